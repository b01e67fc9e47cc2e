"""Asking an installed engine what it supports, before any server launches: shared by every adapter.

Engines change their flags between releases (llama.cpp renamed its draft options, SGLang's and
TensorRT-LLM's spellings move), so each adapter's `prepare()` runs the installed server's `--help` (or
`--version`, or for vLLM a short import probe) once, reads the option spellings it lists, and refuses a
setting the installed version cannot express. Running the probe, and the one error line when it cannot
run at all, is the same for every engine; what the text means is each engine's own.
"""

from __future__ import annotations

import re
import shlex
import subprocess
from collections.abc import Sequence

from specfrontier.errors import ConfigError, SpecFrontierError

HELP_OPTION = re.compile(r"(?<![\w-])(--[A-Za-z][\w-]*)")
"""An option spelling in a `--help` text: `--speculative-num-steps`, `--max_batch_size` (not a word with
a dash inside it, such as `non-speculative`)."""


def help_options(help_text: str) -> frozenset[str]:
    """Every `--option` spelling a `--help` text lists."""
    return frozenset(HELP_OPTION.findall(help_text))


def run_probe(
    argv: Sequence[str],
    *,
    timeout_s: float,
    where: str,
    fix: str,
    shown: str | None = None,
    error: type[SpecFrontierError] = ConfigError,
) -> subprocess.CompletedProcess[str]:
    """Run `argv` (no shell, no stdin) and return what it printed; its exit status is the caller's to judge
    (some servers print their help with status 1).

    When it cannot run at all (not found, not executable, still running after `timeout_s`), raise `error`
    as one line: `{where}: \\`{shown}\\` failed (...); fix: {fix}` (`shown`: the command as the user reads
    it, default the whole argv)."""
    command = list(argv)
    try:
        return subprocess.run(
            command,
            capture_output=True,
            text=True,
            errors="replace",
            timeout=timeout_s,
            check=False,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise error(f"{where}: `{shown or shlex.join(command)}` failed ({exc}); fix: {fix}") from exc


def probe_help(
    argv: Sequence[str], *, timeout_s: float, where: str, fix: str, error: type[SpecFrontierError] = ConfigError
) -> str:
    """A server's `--help` (or `--version`) text, standard output and error together (argparse and click
    print to either); errors as `run_probe`."""
    done = run_probe(argv, timeout_s=timeout_s, where=where, fix=fix, error=error)
    return done.stdout + done.stderr


__all__ = ["HELP_OPTION", "help_options", "probe_help", "run_probe"]
