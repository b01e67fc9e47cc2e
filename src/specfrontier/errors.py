"""The one exception tree of specfrontier.

    SpecFrontierError
     ├── ConfigError          bad config or CLI input; raised before any server is launched
     ├── EngineError          an inference server could not be used
     │    ├── EngineStartError    the process exited or refused to start (carries the log tail)
     │    ├── EngineTimeout       the process lived but never became ready in time
     │    ├── PortTakenError      the port answered, but from a process that is not the launched server
     │    ├── EngineStalled       the server stopped answering: consecutive requests timed out
     │    └── EngineResponseError the server answered with something we cannot interpret
     ├── StoreError           the SQLite store is missing, from another schema version, or has no such run
     └── DependencyError      an optional package or binary is not installed (names what to install)

Messages follow `<where>: <field> = <value seen>: <what is wrong>; fix: <one action>` so that the CLI
can print `ClassName: message` without a traceback and the user still knows what to do. A value the user
gave is quoted through `shown_value`, cut to a bounded length, so a 10 MB string under a mistyped key
makes a line that still fits a terminal.
"""

from __future__ import annotations

from pathlib import Path

SHOWN_CHARACTERS = 80
"""How much of a user's value an error line quotes; the rest is counted, not shown."""


def clip(text: str, limit: int = SHOWN_CHARACTERS) -> str:
    """`text`, or its first `limit` characters and how long it was: `aaaa… (10485760 characters)`."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… ({len(text)} characters)"


def shown_value(value: object, limit: int = SHOWN_CHARACTERS) -> str:
    """A user's value as an error line quotes it: its repr (one line: newlines escaped), cut by `clip`;
    a string is counted in its own characters, not its repr's."""
    text = repr(value)
    if len(text) <= limit:
        return text
    size = len(value) if isinstance(value, str) else len(text)
    return f"{text[:limit]}… ({size} characters)"


class SpecFrontierError(Exception):
    """Root of every error specfrontier raises on purpose."""


class ConfigError(SpecFrontierError):
    """Invalid configuration or command-line input."""


class EngineError(SpecFrontierError):
    """An inference server could not be launched, reached or understood."""


class EngineStartError(EngineError):
    """The server process exited (crash, bad flag, out of memory) before it became ready."""

    def __init__(self, message: str, *, log_path: Path | None = None, log_tail: str = "") -> None:
        detail = message
        if log_path is not None:
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
    """The result store cannot be used as asked."""


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
    "clip",
    "shown_value",
]
