"""The shared probe every adapter's `prepare()` runs on the installed engine (`engines.probe`): one error
line naming the field, the command and the fix when it cannot run, and the option spellings of a --help."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from specfrontier.engines.probe import help_options, probe_help, run_probe
from specfrontier.errors import ConfigError, DependencyError

ARGPARSE_HELP = """usage: server [-h] [--host HOST] [--port PORT]
  --speculative-num-steps N   steps (non-speculative runs ignore it)
  --max_batch_size INTEGER    click spelling
  -np N, --parallel N
"""


def test_help_options_reads_every_double_dash_spelling() -> None:
    assert help_options(ARGPARSE_HELP) == {
        "--host",
        "--port",
        "--speculative-num-steps",
        "--max_batch_size",
        "--parallel",
    }  # not `-h`, `-np`, nor the `-speculative` inside `non-speculative`
    assert help_options("") == frozenset()


def test_probe_help_joins_what_the_server_prints_on_both_streams() -> None:
    code = "import sys; print('--host H'); print('--port P', file=sys.stderr); sys.exit(1)"
    text = probe_help([sys.executable, "-c", code], timeout_s=30, where="engine", fix="install it")
    assert help_options(text) == {"--host", "--port"}  # the exit status 1 is the caller's to judge


def test_a_probe_that_cannot_run_is_one_line_naming_the_field_the_command_and_the_fix(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-server"
    with pytest.raises(ConfigError) as err:
        probe_help([str(missing), "--help"], timeout_s=30, where="engine.binary = 'x'", fix="point it at the server")
    message = str(err.value)
    assert message.startswith(f"engine.binary = 'x': `{missing} --help` failed (")
    assert message.endswith("; fix: point it at the server") and "\n" not in message


def test_a_probe_that_hangs_is_stopped_at_its_timeout_with_the_error_class_asked_for() -> None:
    with pytest.raises(DependencyError, match=r"^engine: `python -c <sleep>` failed \(.*timed out.*\); fix: x$"):
        run_probe(
            [sys.executable, "-c", "import time; time.sleep(30)"],
            timeout_s=0.5,
            where="engine",
            shown="python -c <sleep>",
            fix="x",
            error=DependencyError,
        )
