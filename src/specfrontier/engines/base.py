"""The contract every engine adapter fulfils.

An adapter knows one inference engine's real interface: how a setting becomes a command line (with
flag spellings probed from the installed version's `--help`), how to tell it is ready, where it reports
its capacity, and where its speculative counters live. It holds no results: the sweep asks it for
commands and readings and stores what comes back. Adapters are cheap to build; `prepare()` does the
checks that can fail before any server is launched.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Generic, TypeVar

import aiohttp

from specfrontier.records import RequestSpecStats, SpecCounters

SettingT = TypeVar("SettingT")


@dataclass(frozen=True, slots=True)
class Capacity:
    """How many requests the running server admits at once, and where that figure was read."""

    max_running_requests: int
    source: str
    context_tokens: int | None = None


class EngineAdapter(ABC, Generic[SettingT]):
    """One engine. Methods are called in this order: prepare, then per setting command -> (server
    runs) -> capacity -> spec_counters before and after each window."""

    name: ClassVar[str]
    health_path: ClassVar[str] = "/health"

    @abstractmethod
    def prepare(self, settings: tuple[SettingT, ...]) -> None:
        """Resolve binaries and model files and check every setting against the installed version.

        Raises ConfigError or DependencyError; never starts a server.
        """

    @abstractmethod
    def command(self, setting: SettingT, *, port: int, max_concurrency: int) -> list[str]:
        """The exact argv that serves `setting` on 127.0.0.1:`port` for up to `max_concurrency` clients."""

    @abstractmethod
    def version(self) -> str:
        """A human-readable version string of the engine binary (for the environment record)."""

    @abstractmethod
    async def capacity(self, session: aiohttp.ClientSession, base_url: str, setting: SettingT) -> Capacity:
        """Read back the resolved capacity from the running server (never assumed from flags)."""

    @abstractmethod
    async def spec_counters(self, session: aiohttp.ClientSession, base_url: str) -> SpecCounters | None:
        """Cumulative speculative counters now, or None if the server exposes none."""

    @abstractmethod
    def request_spec_stats(self, chunk: Mapping[str, Any]) -> RequestSpecStats | None:
        """Per-request speculative counts found in one parsed stream chunk, if any."""

    counters_source: ClassVar[str] = ""
    keep_alive: ClassVar[bool] = True
    """Whether the server keeps a connection open after a streamed response, so the client reuses it
    (see `StreamingClient`); False for an engine known to close it, so no request meets a dead socket."""

    def request_extras(self) -> dict[str, Any]:
        """Engine-specific fields for every request body; none by default."""
        return {}

    @property
    def simulated(self) -> bool:
        """True when the server is a model (the simulator's HTTP face), not a real engine."""
        return False

    @property
    def time_scale(self) -> float:
        """Simulated seconds per wall second of the server (1.0 for every real engine)."""
        return 1.0

    @property
    def startup_timeout_s(self) -> float:
        """Seconds to wait for readiness (engine configs carry it)."""
        return 120.0


__all__ = ["Capacity", "EngineAdapter", "SettingT"]
