"""Optimism bias: what the best case (the seed's synthetic greedy + ignore_eos) promises vs what real
workloads deliver, per setting, and whether the best setting changes.

The best case is the `synthetic-greedy@greedy` workload when the run measured it; otherwise the workload
with the highest pooled acceptance stands in for it (and the report says so). For every speculative
setting and production workload:

- acceptance rate, pooled over the workload's windows (accepted / drafted), and the share kept:
  workload acceptance / best-case acceptance;
- speed-up per level: the setting's median aggregate tok/s / the baseline's, same workload and level;
- gain kept: (speed-up - 1) / (best-case speed-up - 1), only where the best case really gained: it beat
  the baseline beyond the spread of repeats and drafted tokens at all (a setting that drafted nothing ran
  like the baseline, so its "speed-up" is run-to-run noise); otherwise there is no gain to keep, and the
  report says which;
- the recommended setting per level (after the tie rule and the correctness gate) under the best case vs
  under the workload.
"""

from __future__ import annotations

from dataclasses import dataclass

from specfrontier.analysis.decisions import beats_baseline, recommended_per_concurrency, speedup
from specfrontier.analysis.summary import RunData
from specfrontier.records import SpecCounters

BEST_CASE = "synthetic-greedy@greedy"
_NOTHING = SpecCounters(0, 0, 0)


@dataclass(frozen=True, slots=True)
class LevelBias:
    level: float
    speedup: float | None
    best_case_speedup: float | None
    best_case_gained: bool = True
    """The best case beat the baseline beyond the spread of repeats, having drafted tokens."""

    @property
    def gain_kept(self) -> float | None:
        """Share of the best case's gain over the baseline that survives (None: the best case gained nothing)."""
        if self.speedup is None or self.best_case_speedup is None or self.best_case_speedup <= 1.0:
            return None
        if not self.best_case_gained:
            return None
        return (self.speedup - 1.0) / (self.best_case_speedup - 1.0)


@dataclass(frozen=True, slots=True)
class SettingBias:
    """One speculative setting on one production workload, against the best case."""

    setting: str
    workload: str
    acceptance_rate: float | None
    best_case_acceptance_rate: float | None
    levels: tuple[LevelBias, ...]

    @property
    def acceptance_kept(self) -> float | None:
        a, b = self.acceptance_rate, self.best_case_acceptance_rate
        return a / b if a is not None and b else None


@dataclass(frozen=True, slots=True)
class BestChange:
    """The recommended setting at one level under the best case vs under a production workload."""

    workload: str
    level: float
    best_case_setting: str
    workload_setting: str

    @property
    def changed(self) -> bool:
        return self.best_case_setting != self.workload_setting


@dataclass(frozen=True, slots=True)
class OptimismBias:
    best_case: str
    best_case_is_synthetic: bool
    settings: tuple[SettingBias, ...]
    best: tuple[BestChange, ...]


def _acceptance(view: RunData, setting: str) -> float | None:
    pooled = view.pooled_counters(setting)
    return pooled.acceptance_rate if pooled is not None else None


def _best_case(data: RunData) -> tuple[str, bool] | None:
    if len(data.workloads) < 2:
        return None
    if BEST_CASE in data.workloads:
        return BEST_CASE, True
    spec = [s.name for s in data.settings if s.speculative]

    def pooled(w: str) -> float:
        view = data.for_workload(w)
        rates = [r for s in spec if (r := _acceptance(view, s)) is not None]
        return max(rates, default=-1.0)

    return max(data.workloads, key=pooled), False


def optimism_bias(data: RunData) -> OptimismBias | None:
    """The bias of a multi-workload run (None: fewer than two workloads, nothing to compare)."""
    found = _best_case(data)
    if found is None:
        return None
    best_key, synthetic = found
    best_view = data.for_workload(best_key)
    speculative = [s.name for s in data.settings if s.speculative and s.name in data.measured_settings()]
    rows: list[SettingBias] = []
    changes: list[BestChange] = []
    best_recommended = {b.concurrency: b.setting for b in recommended_per_concurrency(best_view.recommendable())}
    for workload, view in data.workload_views():
        if workload == best_key:
            continue
        for name in speculative:
            drafted = (best_view.pooled_counters(name) or _NOTHING).draft_tokens > 0
            levels = tuple(
                LevelBias(
                    lv,
                    speedup(view, name, lv),
                    speedup(best_view, name, lv),
                    drafted and beats_baseline(best_view, name, lv),
                )
                for lv in view.concurrency_levels
            )
            rows.append(SettingBias(name, workload, _acceptance(view, name), _acceptance(best_view, name), levels))
        for b in recommended_per_concurrency(view.recommendable()):
            if b.concurrency in best_recommended:
                changes.append(BestChange(workload, b.concurrency, best_recommended[b.concurrency], b.setting))
    return OptimismBias(best_key, synthetic, tuple(rows), tuple(changes))


__all__ = ["BEST_CASE", "BestChange", "LevelBias", "OptimismBias", "SettingBias", "optimism_bias"]
