"""An engine's contract file is all it takes: the toy engine's file, copied under another name to a folder
no test or list knows, passes the whole contract there, and the engine it registered is gone for the
tests that run after it.

The copy runs in a fresh pytest (this project's settings, `-c pyproject.toml`), followed by
`test_every_engine.py`, whose second test finds the registry holding exactly the built-in engines.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

CONTRACT = Path(__file__).resolve().parent
ROOT = CONTRACT.parents[1]


def test_the_toy_engine_file_alone_passes_the_contract_and_leaves_no_engine_behind(tmp_path: Path) -> None:
    copy = tmp_path / "elsewhere" / "test_an_engine_nobody_lists.py"
    copy.parent.mkdir()
    shutil.copy(CONTRACT / "test_toy_engine.py", copy)
    settings = ["-c", str(ROOT / "pyproject.toml"), "--rootdir", str(ROOT), "-p", "no:cacheprovider", "-v"]
    done = subprocess.run(
        [sys.executable, "-m", "pytest", *settings, str(copy), str(CONTRACT / "test_every_engine.py")],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    passed = [line.split("::")[-1].split()[0] for line in done.stdout.splitlines() if line.endswith("%]")]
    assert passed == [  # in this order: the copy's 3 static checks and its live server, then the registry
        "test_config_and_default_settings_validate_through_the_registry",
        "test_settings_describe_themselves",
        "test_command_binds_loopback_on_the_given_port",
        "test_a_live_server_honours_the_contract",
        "test_every_registered_engine_has_a_contract_class",
        "test_an_engine_registered_by_its_own_tests_is_not_seen_by_any_other",
    ], done.stdout[-3000:]
    assert "TestToyEngineContract::test_a_live_server_honours_the_contract PASSED" in done.stdout
    assert done.stdout.strip().splitlines()[-1].startswith("=") and " 6 passed" in done.stdout
