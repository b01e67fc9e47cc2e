"""Statistics over a cell's repeats: median, MAD, a bootstrap interval, the noise and tie rules.

Why these: repeats are few (default 3) and one of them is often disturbed (a neighbour process, a GC),
so the centre is the median and the spread the median absolute deviation, which ignore one outlier.
The interval is a percentile bootstrap of the median: it assumes no distribution, and it is seeded, so
the same stored data always gives the same interval and the same report (docs/metrics.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

NOISY_RELATIVE_MAD = 0.10
"""A cell whose relative MAD (MAD / median) exceeds this is flagged noisy (vLLM tune_speculative_k's rule)."""

TIE_RELATIVE = 0.01
"""Medians closer than this (relative) are tied even when their intervals do not overlap."""

BOOTSTRAP_RESAMPLES = 2000
BOOTSTRAP_CONFIDENCE = 0.95
BOOTSTRAP_SEED = 0


def median(values: Sequence[float]) -> float:
    """The median; raises on an empty sequence (a figure with no data is None one level up)."""
    if not values:
        raise ValueError("median of no values")
    return float(np.median(np.asarray(values, dtype=np.float64)))


def mad(values: Sequence[float]) -> float:
    """Median absolute deviation from the median, unscaled (multiply by 1.4826 for a normal sigma)."""
    centre = median(values)
    return median([abs(v - centre) for v in values])


def relative_mad(values: Sequence[float]) -> float | None:
    """MAD / |median|; None when the median is 0 (no scale to compare with)."""
    centre = median(values)
    return mad(values) / abs(centre) if centre != 0 else None


@dataclass(frozen=True, slots=True)
class Interval:
    """A confidence interval [low, high] for a statistic."""

    low: float
    high: float

    def overlaps(self, other: Interval) -> bool:
        """Closed intervals: touching at one end counts as overlapping (no separation shown)."""
        return self.low <= other.high and other.low <= self.high


def bootstrap_ci(
    values: Sequence[float],
    *,
    confidence: float = BOOTSTRAP_CONFIDENCE,
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = BOOTSTRAP_SEED,
) -> Interval:
    """Percentile bootstrap interval of the median: resample with replacement, take the medians' quantiles.

    Deterministic: numpy's PCG64 with a fixed seed. One value gives a zero-width interval.
    """
    if not values:
        raise ValueError("bootstrap_ci of no values")
    if not 0 < confidence < 1:
        raise ValueError(f"bootstrap_ci: confidence = {confidence}: must be in (0, 1)")
    if resamples < 1:
        raise ValueError(f"bootstrap_ci: resamples = {resamples}: must be >= 1")
    data = np.asarray(values, dtype=np.float64)
    if data.size == 1:
        return Interval(float(data[0]), float(data[0]))
    rng = np.random.Generator(np.random.PCG64(seed))
    samples = rng.choice(data, size=(resamples, data.size), replace=True)
    medians = np.median(samples, axis=1)
    tail = (1.0 - confidence) / 2.0 * 100.0
    low, high = np.percentile(medians, [tail, 100.0 - tail])
    return Interval(float(low), float(high))


def is_noisy(values: Sequence[float], threshold: float = NOISY_RELATIVE_MAD) -> bool:
    """Relative MAD above the threshold (False for fewer than 2 values: nothing to judge)."""
    if len(values) < 2:
        return False
    rel = relative_mad(values)
    return rel is not None and rel > threshold


def separated(
    a_median: float,
    a_interval: Interval,
    b_median: float,
    b_interval: Interval,
    tie_relative: float = TIE_RELATIVE,
) -> bool:
    """True when a and b differ beyond the noise: intervals apart AND medians more than 1% apart.

    The 1% is relative to the smaller median, as the report's margin (best / runner-up - 1).

    Either condition failing makes it a tie (docs/metrics.md "Ties and the cheaper setting").
    """
    if a_interval.overlaps(b_interval):
        return False
    smaller = min(abs(a_median), abs(b_median))
    if smaller == 0:
        return a_median != b_median
    return abs(a_median - b_median) / smaller > tie_relative


__all__ = [
    "BOOTSTRAP_CONFIDENCE",
    "BOOTSTRAP_RESAMPLES",
    "BOOTSTRAP_SEED",
    "NOISY_RELATIVE_MAD",
    "TIE_RELATIVE",
    "Interval",
    "bootstrap_ci",
    "is_noisy",
    "mad",
    "median",
    "relative_mad",
    "separated",
]
