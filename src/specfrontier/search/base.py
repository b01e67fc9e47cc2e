"""The strategy contract: given what the store holds, the next setting to measure, or why to stop."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from specfrontier.engines.base import EngineSetting
from specfrontier.search.observe import Observations


@dataclass(frozen=True, slots=True)
class Proposal:
    """Measure `setting` next, because `reason` (shown to the user, one line)."""

    setting: EngineSetting
    reason: str
    concurrency: tuple[int, ...] | None = None
    """Measure only these levels (None: every level of the config)."""


@dataclass(frozen=True, slots=True)
class Done:
    """Nothing more to measure; `reason` says why (shown to the user)."""

    reason: str


Step = Proposal | Done


class Strategy(Protocol):
    """Chooses settings from stored results only (so a resumed search makes the same choices).

    `attempted` holds the settings already launched in this session or completed in an earlier one:
    a strategy never proposes one of them again. A setting attempted without cells failed to run.
    """

    name: str

    def propose(self, obs: Observations, attempted: set[str]) -> Step: ...


__all__ = ["Done", "Proposal", "Step", "Strategy"]
