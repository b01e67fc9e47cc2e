"""Grid: every listed setting, in the order listed (the seed's method, and `tune`'s default)."""

from __future__ import annotations

from collections.abc import Sequence

from specfrontier.engines.base import EngineSetting
from specfrontier.search.base import Done, Proposal, Step
from specfrontier.search.observe import Observations


class GridStrategy:
    name = "grid"

    def __init__(self, settings: Sequence[EngineSetting]) -> None:
        self.settings = tuple(settings)

    def propose(self, obs: Observations, attempted: set[str]) -> Step:
        for s in self.settings:
            if s.name not in attempted:
                return Proposal(s, "listed setting (grid)")
        return Done(f"grid: all {len(self.settings)} listed settings measured")


__all__ = ["GridStrategy"]
