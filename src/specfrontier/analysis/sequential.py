"""The sequential rule: stop a level's repeats once more of them cannot change what the level decides.

With `min_repeats` the interleaved sweep (`runs.sweep`) measures every setting `min_repeats` times, then
after each further round asks this module which levels are settled, and measures only the others, up to
`repeats`. A level is settled when every pair of its settings is either

- a tie more repeats cannot undo: their ranges (lowest..highest repeat) overlap. Up to 5 repeats the
  report's interval of the median is that range (the percentile bootstrap of 2-5 values reaches the
  extremes), and a further repeat can only widen a range, so the pair stays within the spread; or
- a win beyond doubt: the ranges are apart by a gap larger than both ranges' widths, and the medians by
  more than 1% and than the level's measured drift (`analysis.drift`). A further repeat would have to
  fall further outside its setting's range than the range is wide to close the gap.

Error rate (docs/metrics.md, 'Stopping early'; `benchmarks/sequential_rule.py` simulates it): two settings
of the same speed with normal noise of 3-10%, stopped after 2 repeats, are called a win for 9.1-9.2% of
pairs; the 3-repeat rule without stopping calls 9.8-10.1% (any two disjoint ranges of 3). 67% of such pairs
stop at 2 repeats as a tie, with no error against the 3-repeat answer; the rest take the third repeat.
"""

from __future__ import annotations

from specfrontier.analysis.drift import drift_at, within_drift
from specfrontier.analysis.summary import CellSummary, RunData
from specfrontier.metrics.stats import TIE_RELATIVE

MAX_EXACT_TIE_REPEATS = 5
"""Up to this many repeats the report's interval of the median is the min-max range (see above)."""


def _range(cell: CellSummary) -> tuple[float, float] | None:
    values = [v for v in cell.repeat_tok_s if v is not None]
    return (min(values), max(values)) if len(values) >= 2 else None


def pair_settled(a: CellSummary, b: CellSummary, drift_size: float = 0.0) -> bool:
    """Whether more repeats of `a` and `b` cannot change their comparison (module docstring)."""
    ra, rb = _range(a), _range(b)
    if ra is None or rb is None:
        return False
    (lo_a, hi_a), (lo_b, hi_b) = ra, rb
    if lo_a <= hi_b and lo_b <= hi_a:  # overlapping ranges: a tie that further repeats only widen
        return max(a.repeats, b.repeats) < MAX_EXACT_TIE_REPEATS
    (lo_w, hi_w), (lo_l, hi_l) = (ra, rb) if lo_a > hi_b else (rb, ra)
    gap = lo_w - hi_l
    med_w = (a if lo_a > hi_b else b).aggregate_tok_s.median
    med_l = (b if lo_a > hi_b else a).aggregate_tok_s.median
    if med_w is None or med_l is None or med_l <= 0:
        return False
    margin = med_w / med_l - 1.0
    return gap > max(hi_w - lo_w, hi_l - lo_l) and margin > max(TIE_RELATIVE, drift_size)


def level_settled(data: RunData, level: float) -> bool:
    """Every pair of settings at `level` settled (one workload view; a level with one setting is settled)."""
    cells = [c for c in data.cells if c.level == level]
    drift = drift_at(data, level)
    size = drift.size if drift is not None else 0.0
    return all(pair_settled(a, b, size) for i, a in enumerate(cells) for b in cells[i + 1 :])


def open_levels(data: RunData) -> list[float]:
    """Levels that still need repeats, in every workload of the run (a level is measured for all workloads
    until each of them has settled it); settings whose server failed take no part (they get no more)."""
    data = data.without_settings(data.failed_settings)
    views = [view for _, view in data.workload_views()]
    return [lv for lv in data.concurrency_levels if not all(level_settled(v, lv) for v in views)]


__all__ = ["MAX_EXACT_TIE_REPEATS", "level_settled", "open_levels", "pair_settled", "within_drift"]
