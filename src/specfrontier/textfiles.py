"""Reading the user's text files and writing the files the user asked for, with one-line errors.

Why one module: every command that reads a user file (a config, a prompts JSONL, an import table, a
measurements file) or writes to a path the user named (`report -o`, `compare -o`, `schedule -o`, the HTML
page `tune` leaves next to its store) used to call `read_text`/`write_text` directly, so a non-UTF-8 byte,
a directory where a file was expected or a missing parent directory escaped as a traceback. Here each of
those becomes a ConfigError in the project's format (`<what> = <path>: <problem>; fix: <one action>`),
raised before anything is launched or written. Writing never destroys what sits at the path (a device,
a FIFO, a symlink, a file of the user's named like our temporary file, an SQLite store: `-o s.db` used
to turn a store into an HTML page), and the names of files derived from a user's label (a setting's
server log) are bounded (`file_name_for`). Reading is bounded too: only a regular file is read (a device
or a FIFO may never end: `-c /dev/zero` ended in a MemoryError), and at most `max_bytes` of it.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import re
import secrets
import stat
import sys
from pathlib import Path
from typing import Any

from specfrontier.errors import ConfigError

_READ_FIX = {
    errno.ENOENT: "pass an existing file",
    errno.EISDIR: "pass a file, not a directory",
    errno.EACCES: "make it readable (chmod u+r) or pass another file",
    errno.EPERM: "make it readable (chmod u+r) or pass another file",
}


MAX_TEXT_BYTES = 16 * 2**20
"""Largest config read (the default bound): 16 MiB is thousands of times any real config, and a YAML
parser holds many times the text in memory."""

MAX_DATA_BYTES = 64 * 2**20
"""Largest data file read: prompts (JSONL), a traffic profile (a Prometheus query_range body of many
series), an import table, a measurements file. A prompts file this big is already far more than a cell
can send (`records.MAX_PROMPTS` bounds the count as well)."""

SQLITE_MAGIC = b"SQLite format 3\x00"
"""The first 16 bytes of every SQLite database file."""

_SQLITE_SIDE_MAGICS = (b"\x37\x7f\x06\x82", b"\x37\x7f\x06\x83", b"\xd9\xd5\x05\xf9\x20\xa1\x63\xd7")
"""The first bytes of an SQLite `-wal` file (two byte orders) and of a rollback `-journal`: writing over
one loses the results it holds that are not yet in the main file."""


def _shown(path: Path) -> str:
    return repr(str(path))


def sqlite_kind(path: Path) -> str | None:
    """'an SQLite database' or 'an SQLite -wal or -journal file' when `path` (followed through symlinks)
    is a regular file starting like one, by its first bytes, whatever its name; else None."""
    try:
        if not stat.S_ISREG(path.stat().st_mode):
            return None  # a device or FIFO is never read here: reading one may block or never end
        with path.open("rb") as fh:
            head = fh.read(len(SQLITE_MAGIC))
    except OSError:
        return None
    if head == SQLITE_MAGIC:
        return "an SQLite database"
    if head.startswith(_SQLITE_SIDE_MAGICS):
        return "an SQLite -wal or -journal file"
    return None


def _refuse_sqlite(path: Path, what: str, example: str) -> None:
    """An output path that holds an SQLite database (any store, not only the one being reported) is
    refused: the report would replace the whole file, and every run in it would be lost."""
    kind = sqlite_kind(path)
    if kind is not None:
        raise ConfigError(
            f"{what} = {_shown(path)}: is {kind} (a store?); writing there would destroy every result in it; "
            f"fix: choose another file name, e.g. {path.with_name(example)}"
        )


def _size(count: int) -> str:
    return f"{count / 2**20:.1f} MiB" if count >= 2**20 else f"{count} bytes"


_FILE_KINDS = (
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISSOCK, "a socket"),
)


def load_json(text: str) -> Any:
    """`json.loads`, where a number longer than Python converts (a plain ValueError, which callers catching
    JSONDecodeError let through as a traceback) is a JSONDecodeError at that number, like any syntax error."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        raise
    except ValueError as exc:
        digits = sys.get_int_max_str_digits()
        found = re.search(rf"\d{{{digits + 1},}}", text)
        where = found.start() if found else 0
        raise json.JSONDecodeError(f"a number longer than {digits} digits", text, where) from exc


def _read_bounded(path: Path, what: str, fix: str | None, max_bytes: int, too_big_fix: str) -> bytes:
    """At most `max_bytes` of a regular file, or a ConfigError naming the path, the problem and the fix.

    Opened with O_NONBLOCK so that a FIFO named by mistake does not block the open itself; then anything
    that is not a regular file is refused before a byte is read, and a file over the bound (by its size,
    or by what it yields: /proc files say 0 bytes) is refused without being read whole."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise _unreadable(path, what, fix, exc) from exc
    try:
        info = os.fstat(fd)
        mode, size = info.st_mode, info.st_size
        if stat.S_ISDIR(mode):
            raise _unreadable(path, what, fix, IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR)))
        if not stat.S_ISREG(mode):
            kind = next((name for test, name in _FILE_KINDS if test(mode)), "a special file")
            raise ConfigError(
                f"{what} = {_shown(path)}: {kind}, not a regular file (it may never end); fix: pass a regular file"
            )
        data = b""
        if size <= max_bytes:
            with os.fdopen(os.dup(fd), "rb") as fh:
                data = fh.read(max_bytes + 1)
    finally:
        os.close(fd)
    if size > max_bytes or len(data) > max_bytes:
        shown = _size(size) if size > max_bytes else f"more than {_size(max_bytes)}"
        raise ConfigError(
            f"{what} = {_shown(path)}: {shown}, over the {_size(max_bytes)} this file may hold; fix: {too_big_fix}"
        )
    return data


def _unreadable(path: Path, what: str, fix: str | None, exc: OSError) -> ConfigError:
    default = _READ_FIX.get(exc.errno or 0, "pass a readable file")
    action = fix if fix is not None and exc.errno == errno.ENOENT else default
    reason = exc.strerror or type(exc).__name__
    return ConfigError(f"{what} = {_shown(path)}: cannot read it ({reason}); fix: {action}")


def _decode(data: bytes, path: Path, what: str) -> str:
    """UTF-8 text (a leading byte-order mark, as some Windows editors write, is dropped: it is still
    UTF-8, and JSON and CSV headers would otherwise start with an invisible character)."""
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        byte = data[exc.start : exc.start + 1].hex()
        raise ConfigError(
            f"{what} = {_shown(path)}: not UTF-8 text (byte 0x{byte} at offset {exc.start}, line {line}); "
            "fix: save it as UTF-8"
        ) from exc


def read_text_utf8(
    path: Path,
    what: str,
    *,
    fix: str | None = None,
    max_bytes: int = MAX_TEXT_BYTES,
    too_big_fix: str = "pass the file meant here (this one is far larger than any)",
) -> str:
    """The whole text of a user file; `what` names where the path came from (e.g. `--config`).

    Missing, a directory, unreadable, not a regular file (a device, a FIFO), over `max_bytes` (fixed by
    `too_big_fix`) or not UTF-8: ConfigError naming the file and the fix (for a missing file, `fix` when
    given, since the command knows the better alternative, e.g. a built-in prompt mix).
    """
    return _decode(_read_bounded(path, what, fix, max_bytes, too_big_fix), path, what)


def _resolved(path: Path) -> Path:
    """Where `path` leads: a symlink (a chain of them) is followed to its target, which is what a
    shell's `>` writes; anything else is `path` itself."""
    return Path(os.path.realpath(path)) if path.is_symlink() else path


def _is_special(path: Path) -> bool:
    """True for an existing device, FIFO or socket: written in place, never replaced by a file."""
    try:
        mode = path.stat().st_mode
    except OSError:
        return False
    return not stat.S_ISREG(mode) and not stat.S_ISDIR(mode)


def check_output_path(path: Path, what: str = "-o", *, example: str = "report.html") -> Path:
    """Refuse, before anything is rendered, an output path that cannot become a file: a directory, a
    path under a missing directory or a non-directory, or an unwritable directory. `example` is the
    file name suggested when the user named a directory.

    A symlink is judged by its target (the file written); a device or FIFO (`/dev/null`, a named pipe)
    needs only to be writable itself, since it is written in place, not replaced. A file that holds an
    SQLite database (a store, by its first bytes, whatever its name) is refused: it would be replaced."""
    if path.is_dir():
        raise ConfigError(f"{what} = {_shown(path)}: is a directory; fix: give a file name, e.g. {path / example}")
    if _is_special(path):
        if not os.access(path, os.W_OK):
            raise ConfigError(f"{what} = {_shown(path)}: not writable; fix: choose another path")
        return path
    _refuse_sqlite(path, what, example)
    parent = _resolved(path).parent
    if not parent.exists():
        raise ConfigError(
            f"{what} = {_shown(path)}: directory {parent} does not exist; fix: create it or choose another path"
        )
    if not parent.is_dir():
        raise ConfigError(f"{what} = {_shown(path)}: {parent} is not a directory; fix: choose another path")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise ConfigError(f"{what} = {_shown(path)}: directory {parent} is not writable; fix: choose another path")
    return path


def write_text_atomic(path: Path, text: str, what: str = "-o", *, example: str = "report.html") -> Path:
    """Write `text` to `path` (`what`: where the path came from) without ever destroying what is there.

    - A regular file (or a new one) is written whole: into a temporary file of a fresh name beside it
      (`.NAME.<random>.tmp`, created with O_EXCL, so no file of the user's, such as an old `NAME.tmp`, is
      touched), then renamed over it, so a reader never sees half a file; an existing file keeps its
      permission bits. On any failure (Ctrl-C included) only that temporary file is removed and `path`
      is untouched.
    - A symlink is written through: its target is replaced as above and the link stays a link.
    - A device or FIFO (`/dev/null`, `/dev/stdout`, a named pipe) is written in place, as a shell's `>`
      would: renaming a file over it would destroy the node (as root, `-o /dev/full` used to turn the
      device into a regular file).
    - An SQLite database (a store, any store) is never written over (`check_output_path` says so before
      anything is rendered; this is the last guard, for the paths a command chose itself).

    An OSError becomes a ConfigError naming the path."""
    _refuse_sqlite(path, what, example)
    try:
        if _is_special(path):  # opened by its own name: a link to one (/dev/stdout) is followed by open()
            with path.open("w", encoding="utf-8") as out:
                out.write(text)
        else:
            _replace_whole(_resolved(path), text)
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise ConfigError(f"{what} = {_shown(path)}: cannot write it ({reason}); fix: choose another path") from exc
    return path


def _replace_whole(target: Path, text: str) -> None:
    """Write `text` into a new temporary file beside `target`, then rename it over `target`."""
    try:
        old_mode: int | None = stat.S_IMODE(target.stat().st_mode)
    except FileNotFoundError:
        old_mode = None
    tmp, fd = _new_tmp(target)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
        if old_mode is not None:
            tmp.chmod(old_mode)  # the file keeps its permissions (a new one gets the umask's, as open() gives)
        tmp.replace(target)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise


def _new_tmp(target: Path) -> tuple[Path, int]:
    """A temporary file beside `target` that did not exist before (O_EXCL): `.NAME.<random>.tmp`. Only
    this file is ever removed on failure; a file of the user's of any name stays."""
    for _ in range(100):
        tmp = target.with_name(f".{target.name[:64]}.{secrets.token_hex(4)}.tmp")
        try:
            return tmp, os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        except FileExistsError:
            continue
    raise FileExistsError(errno.EEXIST, "no free temporary file name beside it", str(target))


_NAME_BYTES = 96
"""Longest label kept whole in a derived file name (file systems allow 255 bytes per name)."""


def file_name_for(label: str, suffix: str) -> str:
    """The name of a file derived from a user's label (a setting's server log, a file its launch reads).

    Why: the label was used as it was, so a 260-character setting name failed the launch with `File name
    too long` (after the run had started) and a `/` would have made a folder. A short label of plain
    characters is kept (`steps2.log`, so the files stay easy to find); any other is cut and its
    characters outside `A-Za-z0-9._:+-` replaced, with 12 hex digits of its SHA-256 added, so two labels
    never share a file and the name stays under 120 bytes whatever the label."""
    plain = re.sub(r"[^A-Za-z0-9._:+-]", "_", label).lstrip(".")
    if plain == label and 0 < len(label) <= _NAME_BYTES:
        return label + suffix
    digest = hashlib.sha256(label.encode("utf-8", "surrogatepass")).hexdigest()[:12]
    return f"{plain[:64]}-{digest}{suffix}" if plain else f"{digest}{suffix}"


__all__ = [
    "MAX_DATA_BYTES",
    "MAX_TEXT_BYTES",
    "SQLITE_MAGIC",
    "check_output_path",
    "file_name_for",
    "load_json",
    "read_text_utf8",
    "sqlite_kind",
    "write_text_atomic",
]
