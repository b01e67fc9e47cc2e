"""The `specfrontier` command: the Typer app, its consoles, and the entry point that turns errors into one
line and an exit code. Each command lives in its own module of this package and registers itself on `app`.

Errors are printed as `ClassName: message` with no traceback (add --debug for one). Exit codes:
0 the run is complete; 1 an error, or a run that produced no evidence; 2 bad input (config or flags,
before any server starts); 3 a run with partial evidence (some settings failed; `tune --resume` it);
130 interrupted (Ctrl-C, SIGTERM, SIGHUP, or the output pipe closed), with how to resume.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.markup import escape

from specfrontier.commands import command
from specfrontier.errors import ConfigError, SpecFrontierError, StoreRefused, clip
from specfrontier.store import Store

if TYPE_CHECKING:
    from specfrontier.runs.sweep import SweepEvents

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="Find the best speculative-decoding settings for an inference server, per concurrency.",
)


class _Console(Console):
    """Rich's console, except for a closed pipe: rich exits 1 without a word (`on_broken_pipe`), which
    left `tune | head -1` failed and silent. Here a closed stdout raises BrokenPipeError, so `tune` can
    stop the sweep as an interruption and say so on stderr, and `main` exits 141 for the other commands;
    a closed stderr just silences that console (there is nobody left to tell)."""

    def on_broken_pipe(self) -> None:
        self.quiet = True
        if self.stderr:
            return
        _detach_stdout()
        raise BrokenPipeError("stdout was closed")


console = _Console(highlight=False)
if not console.is_terminal:  # piped or captured: rich would assume 80 columns and fold every table
    console.width = 160


err = _Console(stderr=True, highlight=False, soft_wrap=True)


_state = {"debug": False}


StoreOption = Annotated[Path, typer.Option("--store", help="SQLite result store.")]


SLO_HELP = (
    "Goodput under SLOs, e.g. ttft_p90_ms=500,tpot_p90_ms=50 (ttft, tpot, e2e or any metric declared for "
    "SLOs; any percentile): see docs/metrics.md."
)


@app.callback()
def _main(debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks on errors.")] = False) -> None:
    """Find the best speculative-decoding settings for an inference server, per concurrency."""
    _state["debug"] = debug


def _detach_stdout() -> None:
    """Point stdout at /dev/null, so nothing later (the interpreter's final flush included) fails on it."""
    with contextlib.suppress(OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)


def _say(line: str) -> None:
    """Print one line on stderr, which may be gone too (SIGHUP: the terminal closed)."""
    with contextlib.suppress(OSError):
        err.print(line)


_STORE_SUFFIXES = (".db", ".sqlite", ".sqlite3")


def run_id_value(value: str | None) -> str | None:
    """A run id given on the command line (a typer callback of every run-id argument and `--resume`).

    A path where a run id belongs (`report runs.db`: the store given as the run) is refused with the
    command that lists the store's ids, instead of looking for a run named like a file in the default
    store (a "no such file" or "not in store" about something else, exit 1). A path: it names a folder
    (`/`), ends like a store file, or is an existing file."""
    if value is None:
        return None
    if "/" in value or os.sep in value or value.lower().endswith(_STORE_SUFFIXES) or Path(value).is_file():
        raise ConfigError(
            f"run = {value!r}: a file path, not a run id (ids look like 20260101-120000-ab12); fix: list the "
            f"store's runs with `{command('runs', '--store', value)}`, then pass one of them with "
            f"--store {shlex.quote(value)}"
        )
    return value


def _existing_path(path: Path) -> Path:
    if not path.exists():
        raise StoreRefused(f"--store = {str(path)!r}: no such file; fix: run `specfrontier tune` or pass --store")
    return path


def _open_existing(path: Path, *, read_only: bool = False) -> Store:
    """The store at `path`, which must exist. `read_only` for commands that only read: the file (and its
    folder) may then be one the user cannot write, and a file that is no store is refused unchanged."""
    return Store(_existing_path(path), read_only=read_only)


def _events(quiet: bool) -> SweepEvents:
    """Plain progress lines (bench, and anything without a cell plan); nothing when quiet."""
    from specfrontier.cli.progress import SweepProgress  # the sweep machinery: only commands that run one

    return SweepProgress(console, "quiet" if quiet else "lines", 0).events()


ERROR_LINE_CHARACTERS = 2000
"""Longest line of an error message printed; longer ones are cut (see `_bounded`)."""


def _bounded(message: str) -> str:
    """The message with each line cut to ERROR_LINE_CHARACTERS: the last guard for a user's value that an
    error quotes whole (the config's errors quote values cut already; a 10 MB one made a 10 MB line)."""
    return "\n".join(clip(line, ERROR_LINE_CHARACTERS) for line in message.split("\n"))


def main() -> None:
    """Entry point: run the app and turn our errors into one line and an exit code."""
    try:
        code = app(standalone_mode=False)  # returns the exit code of typer.Exit in this mode
    except SpecFrontierError as exc:
        if _state["debug"]:
            raise
        err.print(f"[red]{type(exc).__name__}[/red]: {escape(_bounded(str(exc)))}")
        sys.exit(exc.exit_code)  # 2: bad input (ConfigError, StoreRefused); 1: anything else
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except typer.Abort:
        sys.exit(130)
    except typer.exceptions.TyperException as exc:  # usage errors (unknown option, bad value)
        err.print(f"[red]Usage error[/red]: {escape(exc.format_message())}")
        sys.exit(exc.exit_code)
    except BrokenPipeError:  # `specfrontier runs | head -1`: the reader has what it wanted
        _detach_stdout()
        sys.exit(141)  # 128 + SIGPIPE, what a shell reports for a tool killed by a closed pipe
    sys.exit(code if isinstance(code, int) else 0)


__all__ = ["SLO_HELP", "StoreOption", "app", "console", "err", "main", "run_id_value"]
