"""stats: median, MAD, the seeded bootstrap interval, the noise and tie rules, worked by hand."""

from __future__ import annotations

import pytest

from specfrontier.metrics.stats import Interval, bootstrap_ci, is_noisy, mad, median, relative_mad, separated


def test_median_and_mad_by_hand() -> None:
    # [100, 104, 130]: median 104; deviations 4, 0, 26 -> MAD 4 (the far repeat does not move it)
    assert median([130.0, 100.0, 104.0]) == 104
    assert mad([130.0, 100.0, 104.0]) == 4
    assert relative_mad([130.0, 100.0, 104.0]) == pytest.approx(4 / 104)
    # even count: median of [1, 2, 3, 10] = 2.5; deviations 1.5, 0.5, 0.5, 7.5 -> MAD 1.0
    assert median([1.0, 2.0, 3.0, 10.0]) == 2.5
    assert mad([1.0, 2.0, 3.0, 10.0]) == 1.0
    assert relative_mad([0.0, 0.0, 1.0]) is None
    with pytest.raises(ValueError, match="no values"):
        median([])


def test_noise_rule_is_relative_mad_over_ten_percent() -> None:
    assert is_noisy([100.0, 120.0, 140.0])  # MAD 20 / 120 = 16.7%
    assert not is_noisy([100.0, 110.0, 120.0])  # 10 / 110 = 9.1%
    assert not is_noisy([90.0, 100.0, 110.0])  # exactly 10%: not over it
    assert not is_noisy([100.0, 101.0, 300.0])  # one wild repeat: MAD 1
    assert not is_noisy([100.0])  # nothing to judge


def test_bootstrap_is_deterministic_and_seeded() -> None:
    values = [10.0, 11.0, 12.5, 9.5, 10.5, 11.5, 30.0]
    first = bootstrap_ci(values)
    assert bootstrap_ci(values) == first  # same data, same interval, every time
    assert bootstrap_ci(list(values)) == first
    assert first.low <= median(values) <= first.high
    assert first.high < 30.0  # the outlier is not the interval's end: the median resists it
    other = bootstrap_ci(values, seed=1)
    assert other.low <= median(values) <= other.high


def test_bootstrap_of_three_repeats_is_their_range() -> None:
    # Each of the 3 values is the resampled median with probability 7/27 > 2.5%, so the 95% ends are min and max.
    assert bootstrap_ci([80.0, 82.0, 81.0]) == Interval(80.0, 82.0)
    assert bootstrap_ci([5.0]) == Interval(5.0, 5.0)


def test_bootstrap_rejects_bad_arguments() -> None:
    with pytest.raises(ValueError, match="no values"):
        bootstrap_ci([])
    with pytest.raises(ValueError, match=r"confidence = 1\.5"):
        bootstrap_ci([1.0, 2.0], confidence=1.5)
    with pytest.raises(ValueError, match="resamples = 0"):
        bootstrap_ci([1.0, 2.0], resamples=0)


def test_tie_rule_overlap_or_within_one_percent() -> None:
    # apart and 10% apart: a real difference
    assert separated(110.0, Interval(108.0, 112.0), 100.0, Interval(98.0, 102.0))
    # intervals overlap (touching counts): a tie
    assert not separated(110.0, Interval(102.0, 112.0), 100.0, Interval(98.0, 102.0))
    # intervals apart but medians 0.5% apart: a tie (within 1%)
    assert not separated(100.5, Interval(100.4, 100.6), 100.0, Interval(99.9, 100.1))
    # 1.5% apart, intervals apart: real
    assert separated(101.5, Interval(101.4, 101.6), 100.0, Interval(99.9, 100.1))
    assert Interval(1.0, 2.0).overlaps(Interval(2.0, 3.0))
    assert not Interval(1.0, 2.0).overlaps(Interval(2.1, 3.0))
