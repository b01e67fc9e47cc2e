"""SQLite's errors as one-line StoreErrors: which store, what was being done, SQLite's words, and a fix.

Every public `Store` method runs inside `converted(...)`, so no `sqlite3.Error` reaches the user as a
traceback. The fix depends on the kind of failure, not on the call site:

- the file cannot be written (read-only file or folder, disk full, I/O error) while a run is written:
  the transaction in flight is rolled back and everything committed before it is kept, so the fix is
  to make room (or permission) and `tune --resume` the run;
- the file is damaged (a malformed page, a broken header): restore a copy or salvage it with the
  sqlite3 shell's `.recover`;
- the file is no SQLite file at all: pass the store that `tune` wrote;
- another process holds the lock, or a row is already stored: one writer per run.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from specfrontier.commands import resume_command
from specfrontier.errors import StoreError, StoreRefused
from specfrontier.textfiles import SQLITE_MAGIC, sqlite_kind


def has_sqlite_header(path: Path) -> bool:
    """True when the file starts like an SQLite database (a damaged store keeps its header)."""
    return sqlite_kind(path) == "an SQLite database"


def error_kind(exc: sqlite3.Error, path: Path) -> str:
    """corrupt, not-sqlite, full, read-only, io, busy, duplicate, constraint or other."""
    name = getattr(exc, "sqlite_errorname", None) or ""
    if name.startswith("SQLITE_CORRUPT"):
        return "corrupt"
    if name.startswith("SQLITE_NOTADB"):
        return "corrupt" if has_sqlite_header(path) else "not-sqlite"
    if name.startswith("SQLITE_FULL"):
        return "full"
    if name.startswith(("SQLITE_READONLY", "SQLITE_PERM", "SQLITE_CANTOPEN", "SQLITE_AUTH")):
        return "read-only"
    if name.startswith("SQLITE_IOERR"):
        return "io"
    if name.startswith(("SQLITE_BUSY", "SQLITE_LOCKED")):
        return "busy"
    if name in ("SQLITE_CONSTRAINT_UNIQUE", "SQLITE_CONSTRAINT_PRIMARYKEY"):
        return "duplicate"
    if name.startswith("SQLITE_CONSTRAINT"):
        return "constraint"
    return "other"


_ACTIONS = {
    "full": "free space on the disk holding {path}",
    "read-only": "make {path} and its folder writable",
    "io": "check the disk holding {path} (free space, permissions, `dmesg`)",
    "busy": "wait for the other specfrontier process using {path} to finish",
}


def _resume(path: Path, run_id: str | None) -> str:
    """How to go on after a failed write: resume the run when there is one, else run the command again."""
    if run_id is None:
        return "then run the command again"
    return f"then resume the run with `{resume_command(run_id, path)}`"


def fix_for(kind: str, path: Path, *, writing: bool, run_id: str | None) -> str:
    """'<what follows SQLite's message>; fix: <one action>' for a failure of this kind."""
    if kind == "corrupt":
        return f"; fix: restore a copy, or recover what is readable with `sqlite3 {path} .recover | sqlite3 NEW.db`"
    if kind == "not-sqlite":
        return "; fix: pass the --store written by `specfrontier tune` (or a new file name)"
    if kind == "duplicate" and run_id is not None:
        return (
            " (another process may be writing this run); "
            f"fix: let one `{resume_command(run_id, path)}` run at a time, then resume again"
        )
    if kind in _ACTIONS and writing:
        kept = ", results stored before it are kept" if run_id is not None else ""
        return f"{kept}; fix: {_ACTIONS[kind].format(path=path)}, {_resume(path, run_id)}"
    if kind in ("read-only", "io"):
        return f"; fix: check that {path} is a file you can read, then run the command again"
    if kind == "busy":
        return f"; fix: {_ACTIONS['busy'].format(path=path)}, then run the command again"
    return "; fix: run the command again with --debug and report the traceback (stored results are kept)"


def store_error(exc: sqlite3.Error, path: Path, doing: str, *, writing: bool, run_id: str | None) -> StoreError:
    """The one-line StoreError for `exc`, raised while `doing` (a run's id is named when known)."""
    kind = error_kind(exc, path)
    name = getattr(exc, "sqlite_errorname", None)
    said = str(exc).replace("\n", " ") + (f" ({name})" if name else "")
    where = f"store = {str(path)!r}" + (f", run = {run_id!r}" if run_id is not None else "")
    refused = kind in ("corrupt", "not-sqlite")  # the file named is no usable store: bad input, exit 2
    return (StoreRefused if refused else StoreError)(
        f"{where}: {doing}: {said}{fix_for(kind, path, writing=writing, run_id=run_id)}"
    )


@contextmanager
def converted(path: Path, doing: str, *, writing: bool, run_id: str | None = None) -> Iterator[None]:
    """Turn a `sqlite3.Error` raised inside into the StoreError of `store_error` (others pass through)."""
    try:
        yield
    except sqlite3.Error as exc:
        raise store_error(exc, path, doing, writing=writing, run_id=run_id) from exc


__all__ = ["SQLITE_MAGIC", "converted", "error_kind", "fix_for", "has_sqlite_header", "store_error"]
