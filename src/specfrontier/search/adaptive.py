"""Adaptive: extend the speculation depth while it still gains more than the noise.

The seed's engineer measured steps 1-4 and asked whether steps = 5 would help; this answers that by
measuring, one depth at a time:

1. measure the listed settings that are not on a depth ladder (the baseline first);
2. per ladder (`search.ladder`: a chain, or the trees of one branching and draft-token budget, so depth
   is extended within each (topk, draft tokens) family), measure the shallowest depth, then the next
   one, and so on; after each depth, compare it at every target concurrency with the best of the
   baseline and the shallower depths of its ladder (the objective's median over repeats);
3. go one depth deeper only while the last depth beat that best, at one target concurrency at least
   (in any workload of the run), by more than `search.min_gain` AND with repeat ranges that do not
   overlap (`observe.beats`); stop at the first depth that gains nowhere, at a depth that failed to
   run, or at `search.max_depth`.

Listed depths are walked in order, then the ladder is extended past its deepest listed setting. What
the search never measured is reported as not measured, never as a loss.
"""

from __future__ import annotations

from collections.abc import Sequence

from specfrontier.config.search import SearchConfig
from specfrontier.engines.base import EngineSetting
from specfrontier.search.base import Done, Proposal, Step
from specfrontier.search.ladder import Ladder, build_ladders, ladder_depth
from specfrontier.search.observe import Observations, beats


class AdaptiveStrategy:
    name = "adaptive"

    def __init__(self, settings: Sequence[EngineSetting], concurrency: Sequence[int], search: SearchConfig) -> None:
        self.search = search
        self.targets = tuple(search.target_concurrency or concurrency)
        self.ladders: list[Ladder] = build_ladders(settings, search.max_depth, search.extend_depth)
        self.fixed = [s for s in settings if ladder_depth(s) is None]  # baselines first: they are listed first
        self.fixed.sort(key=lambda s: s.speculative)
        self.baselines = [s.name for s in settings if not s.speculative]

    def propose(self, obs: Observations, attempted: set[str]) -> Step:
        for s in self.fixed:
            if s.name not in attempted:
                why = "baseline (no speculation)" if not s.speculative else "listed setting without a depth ladder"
                return Proposal(s, why)
        notes: list[str] = []
        for ladder in self.ladders:
            step = self._walk(ladder, obs, attempted)
            if isinstance(step, Proposal):
                return step
            notes.append(step.reason)
        return Done("; ".join(notes) if notes else "adaptive: no setting with a speculation depth to extend")

    def _walk(self, ladder: Ladder, obs: Observations, attempted: set[str]) -> Step:
        objective = self.search.objective
        reference = list(self.baselines)
        previous: EngineSetting | None = None
        gained = ""
        for depth in ladder.depths():
            setting = ladder.setting_at(depth)
            if setting.name not in attempted:
                if previous is None:
                    return Proposal(setting, "shallowest depth of its ladder")
                return Proposal(setting, f"{previous.name} gained beyond the noise at {gained}: one depth deeper")
            if not obs.measured(setting.name):
                return Done(
                    f"{setting.name} failed to run: its ladder stops at {previous.name if previous else 'none'}"
                )
            wins = []
            many = len(obs.workloads) > 1
            for w, c in ((w, c) for w in obs.workloads for c in self.targets):
                best = max(
                    (obs.figure(r, c, objective, w) for r in reference),
                    key=lambda f: -1.0 if f is None or f.median is None else f.median,
                    default=None,
                )
                new = obs.figure(setting.name, c, objective, w)
                where = f"{w} C={c}" if many else f"C={c}"
                if best is None or best.median is None:
                    if new is not None and new.median is not None:
                        wins.append(f"{where} (nothing to compare with)")
                elif beats(new, best, self.search.min_gain) and new is not None and new.median is not None:
                    wins.append(f"{where} (+{new.median / best.median - 1.0:.0%})")
            if not wins:
                return Done(
                    f"{setting.name} gained no more than the noise (min_gain {self.search.min_gain:.0%} and the "
                    f"repeat spread) at C={','.join(map(str, self.targets))}: deepest useful depth "
                    f"{previous.name if previous else 'none (the baseline is as good)'}"
                )
            gained = ", ".join(wins)
            reference.append(setting.name)
            previous = setting
        last = previous.name if previous else "none"
        return Done(f"{last} still gained but search.max_depth = {ladder.max_depth} is reached")


__all__ = ["AdaptiveStrategy"]
