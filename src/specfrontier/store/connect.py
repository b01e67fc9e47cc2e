"""Opening the store file: read-write for the commands that write, read-only for those that only read.

Read-only opening uses the URI `file:PATH?mode=ro`: SQLite then never writes the database file, so a
report works on a store the user may not write (a colleague's file, a read-only mount), and naming the
wrong file cannot turn it into a store. `PRAGMA query_only` is set on top, so even a bug in this tool
cannot write through a read-only Store.

A store is in WAL mode, and a WAL reader needs the `-wal` and `-shm` side files next to the database;
`mode=ro` creates them when they are missing (they are left, empty, after the reader closes). In a folder
the user cannot write they cannot be created, and SQLite refuses with "unable to open database file".
There, and only there, the file is opened with `immutable=1`: SQLite reads the main file without side
files and without locks. That is safe only when nobody writes the store meanwhile, which is why it is a
fallback and not the default: no `-shm` file means no writer has the store open at this moment, and
whoever could start one owns the folder, not us. A non-empty `-wal` file would be ignored by
`immutable=1` (its committed cells would be invisible), so that case is refused with a fix instead.
"""

from __future__ import annotations

import os
import sqlite3
from enum import StrEnum
from pathlib import Path

from specfrontier.errors import StoreError

_WAL_VERSION_OFFSET = 18
"""Header bytes 18 and 19 (file format write/read version) are 2 in a WAL-mode database."""


class Access(StrEnum):
    read_write = "read-write"
    read_only = "read-only"
    """URI mode=ro: reads see every committed write, including those of a writer running now."""
    immutable = "immutable"
    """URI immutable=1: no side files, no locks; only for a folder where they cannot be created."""


def side_files(path: Path) -> tuple[Path, Path]:
    """The `-wal` and `-shm` files of a WAL-mode database."""
    return path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")


def is_wal_file(path: Path) -> bool:
    """True when the database header says WAL mode (a reader then needs the side files)."""
    try:
        with path.open("rb") as fh:
            header = fh.read(_WAL_VERSION_OFFSET + 2)
    except OSError:
        return False
    return len(header) == _WAL_VERSION_OFFSET + 2 and header[_WAL_VERSION_OFFSET:] == b"\x02\x02"


def side_files_creatable(path: Path) -> bool:
    """Whether this process may create files in the store's folder (false on a read-only mount too)."""
    return os.access(path.absolute().parent, os.W_OK | os.X_OK)


def read_only_access(path: Path, *, can_create_side_files: bool) -> Access:
    """`mode=ro`, or the `immutable=1` fallback when a WAL reader could not create its side files.

    Raises StoreError when the fallback would hide committed results (a non-empty `-wal` file)."""
    wal, shm = side_files(path)
    if can_create_side_files or shm.exists() or not is_wal_file(path):
        return Access.read_only  # the side files exist (readable) or can be created, or none is needed
    if wal.exists() and wal.stat().st_size > 0:
        raise StoreError(
            f"store = {str(path)!r}: its folder is read-only and {wal.name} holds results not yet in the "
            f"main file, which a read-only reader cannot apply; fix: make {str(path.absolute().parent)!r} "
            "writable (or copy the store with its -wal file to a writable folder), then run the command again"
        )
    return Access.immutable


def uri(path: Path, access: Access) -> str:
    """The SQLite URI of `path` opened with `access` (percent-encoded: '?' or '#' in a name stay literal)."""
    query = {Access.read_only: "?mode=ro", Access.immutable: "?mode=ro&immutable=1"}.get(access, "")
    return path.absolute().as_uri() + query


def connect(path: Path, access: Access) -> sqlite3.Connection:
    """A connection in autocommit mode (transactions are explicit), rows addressable by column name."""
    if access is Access.read_write:
        db = sqlite3.connect(path, isolation_level=None)
    else:
        db = sqlite3.connect(uri(path, access), uri=True, isolation_level=None)
    db.row_factory = sqlite3.Row
    if access is not Access.read_write:
        db.execute("PRAGMA query_only=ON")
    return db


__all__ = ["Access", "connect", "is_wal_file", "read_only_access", "side_files", "side_files_creatable", "uri"]
