"""`specfrontier runs` on a hand-built store, and what `runs` and `report` say of a store that is missing.

Most cases call `specfrontier.cli.main` in-process (argv patched, output captured); one runs it as a real
process to check the exit code and stderr that a shell sees.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from builders import Cli, cli_process
from specfrontier.store import Store


def test_runs_json_lists_the_runs(stored_run: tuple[Path, str], cli: Cli) -> None:
    path, run_id = stored_run
    code, out, err = cli("runs", "--json", "--store", str(path))
    assert (code, err) == (0, "")
    (item,) = json.loads(out)
    assert set(item) == {"id", "engine", "status", "created"}
    assert (item["id"], item["engine"], item["status"]) == (run_id, "llamacpp", "done")
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+00:00", item["created"])


def test_runs_plain_and_empty(tmp_path: Path, cli: Cli) -> None:
    empty = tmp_path / "empty.db"
    Store(empty).close()
    assert cli("runs", "--json", "--store", str(empty)) == (0, "[]\n", "")
    code, out, _ = cli("runs", "--store", str(empty))
    assert (code, out.strip()) == (0, "no runs")


@pytest.mark.parametrize("command", [["runs"], ["runs", "--json"], ["report", "some-run"]])
def test_missing_store_is_one_store_error_line(tmp_path: Path, command: list[str], cli: Cli) -> None:
    missing = tmp_path / "nope.db"
    code, out, err = cli(*command, "--store", str(missing))
    assert code == 2  # the store named cannot be used: bad input (issue 39)
    assert out == ""
    assert err.count("\n") == 1
    assert err.startswith("StoreRefused: --store = ")
    assert "nope.db" in err and "fix:" in err
    assert not missing.exists()  # reading never creates a store


def test_missing_store_from_a_real_process(tmp_path: Path) -> None:
    done = cli_process("runs", "--json", "--store", str(tmp_path / "nope.db"), cwd=tmp_path)
    assert done.returncode == 2
    assert done.stdout == ""
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("StoreRefused: ")
    assert "Traceback" not in done.stderr
