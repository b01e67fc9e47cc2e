"""Two runs side by side: how acceptance, throughput and the recommendation change between them.

The typical pair is the seed's best case (greedy, ignore_eos) against production sampling (temperature
> 0, natural EOS, a chat workload): the question is how much of the gain survives and whether the best
setting moves. A per-cell change counts as real only when the two runs' ranges over repeats do not
overlap.
"""

from __future__ import annotations

from dataclasses import dataclass

from specfrontier.analysis.decisions import recommended_per_concurrency
from specfrontier.analysis.summary import CellSummary, OverRepeats, RunData
from specfrontier.metrics.specs import compared
from specfrontier.metrics.stats import separated


@dataclass(frozen=True, slots=True)
class CellDelta:
    setting: str
    concurrency: float
    aggregate_a: float
    aggregate_b: float
    ratio: float
    """aggregate tok/s of B / of A (medians)."""
    beyond_spread: bool


@dataclass(frozen=True, slots=True)
class AcceptanceDelta:
    setting: str
    length_a: float | None
    length_b: float | None
    rate_a: float | None
    rate_b: float | None


@dataclass(frozen=True, slots=True)
class RecommendationDelta:
    concurrency: float
    best_a: str
    best_b: str

    @property
    def changed(self) -> bool:
        return self.best_a != self.best_b


@dataclass(frozen=True, slots=True)
class Comparison:
    a: RunData
    b: RunData
    cells: tuple[CellDelta, ...]
    acceptance: tuple[AcceptanceDelta, ...]
    recommendations: tuple[RecommendationDelta, ...]


def _pooled(data: RunData, setting: str) -> tuple[float | None, float | None]:
    c = data.pooled_counters(setting)
    if c is None:
        return None, None
    return c.acceptance_length, c.acceptance_rate


def compare_runs(a: RunData, b: RunData) -> Comparison:
    """Deltas over the settings (by name) and concurrency levels the two runs share."""
    shared = [s for s in a.measured_settings() if s in set(b.measured_settings())]
    levels = [c for c in a.concurrency_levels if c in set(b.concurrency_levels)]
    cells = []
    for name in shared:
        for c in levels:
            ca, cb = a.cell(name, c), b.cell(name, c)
            if ca is None or cb is None:
                continue
            fa, fb = ca.aggregate_tok_s, cb.aggregate_tok_s
            if not fa.median or fb.median is None:
                continue
            apart = (fb.low or 0) > (fa.high or 0) or (fb.high or 0) < (fa.low or 0)
            cells.append(CellDelta(name, c, fa.median, fb.median, fb.median / fa.median, apart))
    acceptance = []
    for name in shared:
        length_a, rate_a = _pooled(a, name)
        length_b, rate_b = _pooled(b, name)
        acceptance.append(AcceptanceDelta(name, length_a, length_b, rate_a, rate_b))
    # What each run recommends: from its complete, safe evidence, as `recommend` draws it.
    best_a = {x.concurrency: x.setting for x in recommended_per_concurrency(a.recommendable())}
    best_b = {x.concurrency: x.setting for x in recommended_per_concurrency(b.recommendable())}
    recs = tuple(RecommendationDelta(c, best_a[c], best_b[c]) for c in levels if c in best_a and c in best_b)
    return Comparison(a, b, tuple(cells), tuple(acceptance), recs)


@dataclass(frozen=True, slots=True)
class FigureDelta:
    """One figure of one cell in both runs, with whether the change is beyond the noise of the repeats."""

    setting: str
    workload_a: str
    workload_b: str
    level: float
    a: OverRepeats
    b: OverRepeats
    significant: bool
    """Beyond the noise of the repeats (`significant`)."""

    @property
    def ratio(self) -> float | None:
        """B / A on medians (None when A's median is 0 or either is missing)."""
        if not self.a.median or self.b.median is None:
            return None
        return self.b.median / self.a.median


COMPARED: dict[str, str] = compared()
"""The figures `figure_deltas` compares: report name -> declared metric (`metrics.specs`, `compare=`)."""


def significant(a: OverRepeats, b: OverRepeats) -> bool:
    """A change counts when it is beyond the noise of both runs' repeats: the same rule the report uses
    between settings (`stats.separated`: the seeded bootstrap intervals of the two medians do not
    overlap and the medians are more than 1% apart). One repeat in either run has no spread: never.

    Why not a t-test: repeats are few (3 by default) and one is often disturbed; the interval of the
    median assumes no distribution and ignores one outlier.
    """
    if a.n < 2 or b.n < 2 or a.median is None or b.median is None:
        return False
    ia, ib = a.interval, b.interval
    if ia is None or ib is None:
        return False
    return separated(a.median, ia, b.median, ib)


def figure_deltas(a: RunData, b: RunData, metric: str) -> list[FigureDelta]:
    """Per shared (setting, level) cell, one figure in both runs; cells are matched by setting name and
    level (the workload may differ on purpose: that is what a best-case vs production comparison is)."""
    name = COMPARED[metric]

    def get(cell: CellSummary) -> OverRepeats:
        return cell.figure(name)

    shared = [s for s in a.measured_settings() if s in set(b.measured_settings())]
    out = []
    for setting in shared:
        for level in a.concurrency_levels:
            ca, cb = a.cell(setting, level), b.cell(setting, level)
            if ca is None or cb is None or get(ca).median is None or get(cb).median is None:
                continue
            fa, fb = get(ca), get(cb)
            out.append(FigureDelta(setting, ca.workload, cb.workload, level, fa, fb, significant(fa, fb)))
    return out


__all__ = [
    "COMPARED",
    "AcceptanceDelta",
    "CellDelta",
    "Comparison",
    "FigureDelta",
    "RecommendationDelta",
    "compare_runs",
    "figure_deltas",
    "significant",
]
