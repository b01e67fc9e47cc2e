"""What a search strategy may know about a run: the stored cells, read back through the store.

The search is the only component that reads results back to choose the next setting, and it reads
them from the store (never from an engine), so a resumed search makes the same choices as the first.
A figure is the median over repeats with the lowest and highest repeat (`analysis.summary.OverRepeats`).

Engine-seconds (the budget's unit) = every launched setting's stored startup time + every measured
window (first send to last end of the stored requests). Warmup and cold-start requests are not
stored and not counted; a simulator run counts simulated seconds.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from specfrontier.analysis.summary import OverRepeats
from specfrontier.config.search import SearchObjective
from specfrontier.metrics.window import CellMetrics
from specfrontier.records import SpecCounters
from specfrontier.store import Store

LAUNCHED = ("running", "done", "failed", "interrupted")


@dataclass(frozen=True, slots=True)
class Observations:
    """Closed-loop cells of one run as figures over repeats, plus what the budget needs."""

    figures: dict[tuple[str, str, int], dict[str, OverRepeats]]
    """(setting, workload, C) -> figure name -> its OverRepeats (a multi-workload run keeps them apart)."""
    status: dict[str, str]
    capacity: dict[str, int | None]
    engine_s_by_setting: dict[str, float] = field(default_factory=dict)
    counters: dict[tuple[str, str, int], SpecCounters] = field(default_factory=dict)
    """(setting, workload, C) -> speculative counts summed over the repeats (acceptance for the model)."""
    params: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Setting name -> its stored parameters."""

    def figure(
        self, setting: str, concurrency: int, name: SearchObjective | str, workload: str | None = None
    ) -> OverRepeats | None:
        """A figure of one cell; `workload` None means the run's first workload."""
        key = (setting, workload if workload is not None else self.workloads[0] if self.workloads else "", concurrency)
        cell = self.figures.get(key)
        return cell.get(name) if cell else None

    @property
    def workloads(self) -> list[str]:
        return sorted({w for _, w, _ in self.figures})

    def measured(self, setting: str) -> bool:
        return any(s == setting for s, _, _ in self.figures)

    @property
    def launches(self) -> int:
        return sum(1 for st in self.status.values() if st in LAUNCHED)

    @property
    def engine_s(self) -> float:
        return sum(self.engine_s_by_setting.values())


_FIGURES = ("aggregate_tok_s", "per_request_tok_s_p50", "per_request_tok_s_p10", "tpot_p90_ms")


class Observer:
    """Reads a run back from the store; a finished setting's cells are read once and kept (stored cells
    never change), so each step of a search costs the reading of the settings still in progress."""

    def __init__(self, store: Store, run_id: str) -> None:
        self.store, self.run_id = store, run_id
        self._final: dict[str, list[tuple[str, int, CellMetrics, SpecCounters | None]]] = {}

    def _cells(self, setting: str, final: bool) -> list[tuple[str, int, CellMetrics, SpecCounters | None]]:
        if setting in self._final:
            return self._final[setting]
        rows = self.store.cells(self.run_id, setting)
        cells = [
            (row.workload, row.concurrency, row.digest.metrics, row.counters)  # stored with the cell
            for row in rows
            if row.requests and row.request_rate is None
        ]
        if final:
            self._final[setting] = cells
        return cells

    def observe(self) -> Observations:
        settings = self.store.settings(self.run_id)
        by_cell: dict[tuple[str, str, int], list[CellMetrics]] = defaultdict(list)
        engine_s: dict[str, float] = defaultdict(float)
        counters: dict[tuple[str, str, int], SpecCounters] = {}
        for s in settings:
            if s.status not in LAUNCHED:
                continue
            engine_s[s.name] += s.startup_s or 0.0
            for workload, concurrency, m, counted in self._cells(s.name, final=s.status in ("done", "failed")):
                key = (s.name, workload, concurrency)
                by_cell[key].append(m)
                if counted is not None:
                    counters[key] = _add(counters[key], counted) if key in counters else counted
                engine_s[s.name] += m.window_s
        figures = {
            key: {name: OverRepeats.of([getattr(m, name) for m in ms]) for name in _FIGURES}
            for key, ms in by_cell.items()
        }
        return Observations(
            figures=figures,
            status={s.name: s.status for s in settings},
            capacity={s.name: s.capacity for s in settings},
            engine_s_by_setting=dict(engine_s),
            counters=counters,
            params={s.name: s.params for s in settings},
        )


def _add(a: SpecCounters, b: SpecCounters) -> SpecCounters:
    n = max(len(a.accepted_per_position), len(b.accepted_per_position))
    pa = a.accepted_per_position + (0,) * (n - len(a.accepted_per_position))
    pb = b.accepted_per_position + (0,) * (n - len(b.accepted_per_position))
    return SpecCounters(
        a.draft_tokens + b.draft_tokens,
        a.accepted_tokens + b.accepted_tokens,
        a.verify_steps + b.verify_steps,
        tuple(x + y for x, y in zip(pa, pb, strict=True)),
    )


def observe(store: Store, run_id: str) -> Observations:
    """Read the run's closed-loop cells and settings from the store."""
    return Observer(store, run_id).observe()


def beats(new: OverRepeats | None, old: OverRepeats | None, min_gain: float) -> bool:
    """True when `new` is better than `old` beyond the noise: its median exceeds `old`'s by more than
    `min_gain`, and its worst repeat is above `old`'s best repeat (the ranges do not overlap)."""
    if new is None or old is None or new.median is None or old.median is None:
        return False
    if new.median <= old.median * (1.0 + min_gain):
        return False
    return (new.low or 0.0) > (old.high or 0.0)


__all__ = ["LAUNCHED", "Observations", "Observer", "beats", "observe"]
