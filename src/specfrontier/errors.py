"""The one exception tree of specfrontier.

    SpecFrontierError
     ├── ConfigError          bad config or CLI input; raised before any server is launched
     ├── EngineError          an inference server could not be used
     │    ├── EngineStartError    the process exited or refused to start (carries the log tail)
     │    ├── EngineTimeout       the process lived but never became ready in time
     │    ├── PortTakenError      the port answered, but from a process that is not the launched server
     │    ├── EngineStalled       the server stopped answering: consecutive requests timed out
     │    └── EngineResponseError the server answered with something we cannot interpret
     ├── StoreError           the SQLite store failed while in use (a full disk, a lock, an I/O error)
     │    └── StoreRefused        the store or run named cannot be used: no such file, not a store,
     │                            damaged, another schema version, no such run (bad input: exit 2)
     └── DependencyError      an optional package or binary is not installed (names what to install)

Messages follow `<where>: <field> = <value seen>: <what is wrong>; fix: <one action>` so that the CLI
can print `ClassName: message` without a traceback and the user still knows what to do. A value the user
gave is quoted through `shown_value`, cut to a bounded length, so a 10 MB string under a mistyped key
makes a line that still fits a terminal. Each class carries the exit code the CLI ends with (`exit_code`):
2 for bad input (the user's config, flags, files or the store and run they named), 1 otherwise.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import ClassVar

SHOWN_CHARACTERS = 80
"""How much of a user's value an error line quotes; the rest is counted, not shown."""


def clip(text: str, limit: int = SHOWN_CHARACTERS) -> str:
    """`text`, or its first `limit` characters and how long it was: `aaaa… (10485760 characters)`."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… ({len(text)} characters)"


def _repr_parts(value: object, limit: int) -> Iterator[str]:
    """The repr of `value` in pieces, containers walked lazily, so a reader can stop after a few: a YAML
    alias bomb is a 300-byte config whose value, written out, is gigabytes (its parts are shared objects,
    so it costs nothing until something expands it, as repr() did). A string is cut past `limit`."""
    if isinstance(value, Mapping):
        yield "{"
        for i, (key, item) in enumerate(value.items()):
            yield ", " if i else ""
            yield from _repr_parts(key, limit)
            yield ": "
            yield from _repr_parts(item, limit)
        yield "}"
    elif isinstance(value, list | tuple):
        opening, closing = ("[", "]") if isinstance(value, list) else ("(", ",)" if len(value) == 1 else ")")
        yield opening
        for i, item in enumerate(value):
            yield ", " if i else ""
            yield from _repr_parts(item, limit)
        yield closing
    elif isinstance(value, str):
        yield repr(value[: limit + 1])  # enough to fill the line: each character is one or more in the repr
    elif isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 1000:
        yield f"<an integer of {value.bit_length()} bits>"  # repr() of a huge int refuses, or is megabytes
    else:
        yield repr(value)


def _size_of(value: object) -> str:
    """How big a cut value was: a string in characters, a container in entries (its repr is never built)."""
    if isinstance(value, str):
        return f"{len(value)} characters"
    if isinstance(value, Mapping):
        return f"a mapping of {len(value)} key{'s' if len(value) != 1 else ''}"
    if isinstance(value, list | tuple):
        return f"a list of {len(value)} entr{'ies' if len(value) != 1 else 'y'}"
    return type(value).__name__


def shown_value(value: object, limit: int = SHOWN_CHARACTERS) -> str:
    """A user's value as an error line quotes it: its repr (one line: newlines escaped), cut after `limit`
    characters with how big it was (a string in its own characters, a list in entries). The repr is built
    piece by piece and only as far as the cut: never whole (a 552-byte YAML alias bomb took over 6 GB)."""
    text = ""
    for part in _repr_parts(value, limit):
        text += part
        if len(text) > limit:
            return f"{text[:limit]}… ({_size_of(value)})"
    return text


class SpecFrontierError(Exception):
    """Root of every error specfrontier raises on purpose."""

    exit_code: ClassVar[int] = 1
    """What the CLI exits with after printing this error's one line."""


class ConfigError(SpecFrontierError):
    """Invalid configuration or command-line input."""

    exit_code: ClassVar[int] = 2


class EngineError(SpecFrontierError):
    """An inference server could not be launched, reached or understood."""


class EngineStartError(EngineError):
    """The server process exited (crash, bad flag, out of memory) before it became ready."""

    def __init__(self, message: str, *, log_path: Path | None = None, log_tail: str = "") -> None:
        detail = message
        if log_path is not None and f"(log: {log_path})" not in message:  # named once, by whoever does
            detail += f" (log: {log_path})"
        if log_tail:
            detail += "\n--- last lines of the server log ---\n" + log_tail
        super().__init__(detail)
        self.log_path = log_path
        self.log_tail = log_tail


class EngineTimeout(EngineStartError):
    """The server process stayed alive but did not report ready within the timeout."""


class PortTakenError(EngineStartError):
    """Another program answers on the port chosen for the server (it took the port between our choice
    and the server's bind): measuring it would measure the wrong server."""


class EngineStalled(EngineError):
    """The server stopped answering: a bounded number of consecutive requests timed out, so the setting
    is abandoned instead of waiting the full timeout for every remaining request."""


class EngineResponseError(EngineError):
    """The server answered, but not in the shape its interface documents."""


class StoreError(SpecFrontierError):
    """The result store cannot be used as asked: it failed while in use (a full disk, a lock held by
    another process, an I/O error), exit 1."""


class StoreRefused(StoreError):
    """The store or run the user named cannot be used: no such file, a file that is no store (text,
    another program's database), a damaged store, a schema this version does not read, no such run.
    That is bad input, like a wrong config value: exit 2, before anything is written."""

    exit_code: ClassVar[int] = 2


class DependencyError(SpecFrontierError):
    """A package or binary that this feature needs is not installed."""


__all__ = [
    "SHOWN_CHARACTERS",
    "ConfigError",
    "DependencyError",
    "EngineError",
    "EngineResponseError",
    "EngineStalled",
    "EngineStartError",
    "EngineTimeout",
    "PortTakenError",
    "SpecFrontierError",
    "StoreError",
    "StoreRefused",
    "clip",
    "shown_value",
]
