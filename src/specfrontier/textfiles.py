"""Reading the user's text files and writing the files the user asked for, with one-line errors.

Why one module: every command that reads a user file (a config, a prompts JSONL, an import table, a
measurements file) or writes to a path the user named (`report -o`, `compare -o`, `schedule -o`, the HTML
page `tune` leaves next to its store) used to call `read_text`/`write_text` directly, so a non-UTF-8 byte,
a directory where a file was expected or a missing parent directory escaped as a traceback. Here each of
those becomes a ConfigError in the project's format (`<what> = <path>: <problem>; fix: <one action>`),
raised before anything is launched or written.
"""

from __future__ import annotations

import contextlib
import errno
import os
from pathlib import Path

from specfrontier.errors import ConfigError

_READ_FIX = {
    errno.ENOENT: "pass an existing file",
    errno.EISDIR: "pass a file, not a directory",
    errno.EACCES: "make it readable (chmod u+r) or pass another file",
    errno.EPERM: "make it readable (chmod u+r) or pass another file",
}


def _shown(path: Path) -> str:
    return repr(str(path))


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


def read_text_utf8(path: Path, what: str, *, fix: str | None = None) -> str:
    """The whole text of a user file; `what` names where the path came from (e.g. `--config`).

    Missing, a directory, unreadable or not UTF-8: ConfigError naming the file and the fix (for a missing
    file, `fix` when given, since the command knows the better alternative, e.g. a built-in prompt mix).
    """
    try:
        data = path.read_bytes()
    except OSError as exc:
        default = _READ_FIX.get(exc.errno or 0, "pass a readable file")
        action = fix if fix is not None and exc.errno == errno.ENOENT else default
        reason = exc.strerror or type(exc).__name__
        raise ConfigError(f"{what} = {_shown(path)}: cannot read it ({reason}); fix: {action}") from exc
    return _decode(data, path, what)


def check_output_path(path: Path, what: str = "-o", *, example: str = "report.html") -> Path:
    """Refuse, before anything is rendered, an output path that cannot become a file: a directory, a
    path under a missing directory or a non-directory, or an unwritable directory. `example` is the
    file name suggested when the user named a directory."""
    if path.is_dir():
        raise ConfigError(f"{what} = {_shown(path)}: is a directory; fix: give a file name, e.g. {path / example}")
    parent = path.parent
    if not parent.exists():
        raise ConfigError(
            f"{what} = {_shown(path)}: directory {parent} does not exist; fix: create it or choose another path"
        )
    if not parent.is_dir():
        raise ConfigError(f"{what} = {_shown(path)}: {parent} is not a directory; fix: choose another path")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise ConfigError(f"{what} = {_shown(path)}: directory {parent} is not writable; fix: choose another path")
    return path


def write_text_atomic(path: Path, text: str, what: str = "-o") -> Path:
    """Write `text` to `path` whole: into `<name>.tmp` beside it, then renamed over it, so a reader never
    sees half a file; on any failure (including Ctrl-C) the tmp file is removed and `path` is untouched.
    An OSError becomes a ConfigError naming the path (`what`: where it came from)."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(path)
    except BaseException as exc:
        _remove(tmp)
        if isinstance(exc, OSError):
            reason = exc.strerror or type(exc).__name__
            raise ConfigError(f"{what} = {_shown(path)}: cannot write it ({reason}); fix: choose another path") from exc
        raise
    return path


def _remove(tmp: Path) -> None:
    """Drop our tmp file; something else of that name (a directory) is not ours and stays."""
    with contextlib.suppress(OSError):
        tmp.unlink(missing_ok=True)


__all__ = ["check_output_path", "read_text_utf8", "write_text_atomic"]
