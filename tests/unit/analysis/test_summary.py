"""load_run / summarise_cells on a hand-built store: medians and ranges over repeats, noise, pooled acceptance."""

from __future__ import annotations

from pathlib import Path

import pytest

from builders import StoredRun
from builders import record_ms as _record
from specfrontier.analysis import CellSummary, OverRepeats, RunData, load_run
from specfrontier.errors import StoreError
from specfrontier.records import RequestRecord, SpecCounters

MS = 1_000_000  # ns per ms


def _repeat(c: int, agg: int, ttft_ms: int = 100) -> list[RequestRecord]:
    """C requests, all sent at 0 and ended at 1000 ms, carrying `agg` tokens in all: exactly `agg` tok/s."""
    tokens = [agg // c] * c
    tokens[0] += agg % c
    return [_record(0, ttft_ms, 1000, t) for t in tokens]


def _store(path: Path) -> StoredRun:
    run = StoredRun(path)
    for name in ("baseline", "ngram", "draft", "broken"):
        run.setting(name)
    return run


@pytest.fixture
def data(tmp_path: Path) -> RunData:
    run = _store(tmp_path / "s.db")
    # Repeats stored out of order on purpose: the median must not depend on the order.
    run.repeats("baseline", 1, [_repeat(1, 82, 300), _repeat(1, 80, 100), _repeat(1, 81, 200)])
    run.repeats("baseline", 4, [_repeat(4, 95), _repeat(4, 105), _repeat(4, 100)])  # range = 10%: not noisy
    run.repeats("ngram", 2, [_repeat(2, 125), _repeat(2, 110), _repeat(2, 115)])  # 15/115 = 13%: noisy
    run.repeats(
        "ngram",
        1,
        [_repeat(1, 100), _repeat(1, 104), _repeat(1, 108)],
        counters=[
            SpecCounters(10, 5, 4, (3, 2)),
            SpecCounters(30, 6, 10, (4, 2)),
            SpecCounters(60, 30, 20, (20, 10, 0)),
        ],
    )
    # One failed request in the second repeat (inside the 0..1000 ms window).
    run.repeats("draft", 2, [_repeat(2, 60), [*_repeat(2, 60), _record(0, None, 500, None, "boom")]])
    # A stored cell with no requests is skipped, not summarised.
    run.repeats("draft", 4, [[]])
    loaded = run.data()
    run.close()
    return loaded


def _cell(data: RunData, setting: str, c: int) -> CellSummary:
    cell = data.cell(setting, c)
    assert cell is not None, (setting, c)
    return cell


def test_median_and_range_over_repeats(data: RunData) -> None:
    base = _cell(data, "baseline", 1)
    assert base.repeats == 3
    # MAD = median(|80-81|, 0, |82-81|) = 1; the bootstrap interval of 3 values' median is their range
    assert base.aggregate_tok_s == OverRepeats(
        median=81.0, low=80.0, high=82.0, n=3, mad=1.0, ci_low=80.0, ci_high=82.0
    )
    # TTFT 300, 100, 200 ms in the three repeats
    assert base.ttft_p50_ms == OverRepeats(200.0, 100.0, 300.0, 3, 100.0, 100.0, 300.0)
    # per-request tok/s = (tokens - 1) / (1000 ms - TTFT): 81/0.7, 79/0.9, 80/0.8 -> median 100, min 79/0.9
    fig = base.per_request_tok_s_p50
    assert fig.median == pytest.approx(100.0)
    assert fig.low == pytest.approx(79 / 0.9)
    assert fig.high == pytest.approx(81 / 0.7)
    # TPOT = (1000 - TTFT) / (tokens - 1): 700/81, 900/79, 800/80 -> median 10 ms
    assert base.tpot_p50_ms.median == pytest.approx(10.0)
    assert (base.tpot_p50_ms.low, base.tpot_p50_ms.high) == pytest.approx((700 / 81, 900 / 79))
    assert base.achieved_concurrency == OverRepeats(1.0, 1.0, 1.0, 3, 0.0, 1.0, 1.0)
    assert not base.client_limited

    ngram = _cell(data, "ngram", 2)
    assert ngram.aggregate_tok_s == OverRepeats(115.0, 110.0, 125.0, 3, 5.0, 110.0, 125.0)
    assert ngram.achieved_concurrency.median == pytest.approx(2.0)


def test_noisy_flag_is_relative_mad_over_ten_percent(data: RunData, tmp_path: Path) -> None:
    # [110, 115, 125]: range 15/115 = 13% but MAD = median(5, 0, 10) = 5 -> 4.3%: one far repeat is not noise
    outlier = _cell(data, "ngram", 2)
    assert outlier.aggregate_tok_s.relative_spread == pytest.approx(15 / 115)
    assert outlier.aggregate_tok_s.relative_mad == pytest.approx(5 / 115)
    assert not outlier.noisy
    assert not _cell(data, "ngram", 1).noisy  # MAD 4 / 104
    run = _store(tmp_path / "noisy.db")
    # [100, 120, 140]: MAD 20 / 120 = 16.7% -> noisy; [100, 110, 120]: MAD 10 / 110 = 9.1% -> not
    run.repeats("baseline", 1, [_repeat(1, 100), _repeat(1, 120), _repeat(1, 140)])
    run.repeats("ngram", 1, [_repeat(1, 100), _repeat(1, 110), _repeat(1, 120)])
    loaded = run.data()
    run.close()
    assert _cell(loaded, "baseline", 1).aggregate_tok_s.relative_mad == pytest.approx(20 / 120)
    assert _cell(loaded, "baseline", 1).noisy
    assert not _cell(loaded, "ngram", 1).noisy


def test_acceptance_is_pooled_over_repeats(data: RunData) -> None:
    cell = _cell(data, "ngram", 1)
    assert cell.counters == SpecCounters(100, 41, 34, (27, 14, 0))
    # (5 + 6 + 30) / (10 + 30 + 60) = 0.41, not the mean of the per-repeat rates (0.5, 0.2, 0.5 -> 0.4)
    assert cell.acceptance_rate == pytest.approx(0.41)
    assert cell.acceptance_length == pytest.approx(1 + 41 / 34)
    assert cell.acceptance_source == "metrics"
    assert data.pooled_counters("ngram") == SpecCounters(100, 41, 34, (27, 14, 0))
    base = _cell(data, "baseline", 1)
    assert (base.counters, base.acceptance_rate, base.acceptance_length) == (None, None, None)
    assert data.pooled_counters("baseline") is None


def test_errors_and_requests_are_summed_over_repeats(data: RunData) -> None:
    cell = _cell(data, "draft", 2)
    assert cell.repeats == 2
    assert (cell.requests, cell.errors) == (5, 1)
    # the failed request adds no tokens and does not widen the 1 s window
    assert cell.window_tok_s == OverRepeats(60.0, 60.0, 60.0, 2, 0.0, 60.0, 60.0)


def test_run_shape(data: RunData) -> None:
    assert data.concurrency_levels == (1, 2, 4)
    assert data.baseline == "baseline"
    assert data.cell("draft", 4) is None  # its only stored repeat had no requests
    assert data.measured_settings() == ["baseline", "ngram", "draft"]  # "broken" has no cell
    assert [s.name for s in data.settings] == ["baseline", "ngram", "draft", "broken"]


def test_client_limited_when_requests_do_not_overlap(tmp_path: Path) -> None:
    run = _store(tmp_path / "s.db")
    # C=2 asked, but the two requests ran one after the other: achieved concurrency 1.0 < 0.8 * 2
    run.repeats("baseline", 2, [[_record(0, 10, 500, 10), _record(500, 510, 1000, 10)]])
    cell = _cell(run.data(), "baseline", 2)
    run.close()
    assert cell.achieved_concurrency.median == pytest.approx(1.0)
    assert cell.client_limited


def test_figure_of_ignores_missing_values() -> None:
    assert OverRepeats.of([None, None]) == OverRepeats(None, None, None, 0)
    # two values: MAD 1; bootstrap medians 1, 2 or 3 -> 95% interval [1, 3]
    assert OverRepeats.of([3.0, None, 1.0]) == OverRepeats(2.0, 1.0, 3.0, 2, 1.0, 1.0, 3.0)
    assert OverRepeats.of([]).relative_spread is None


def test_load_run_of_unknown_run_is_a_store_error(tmp_path: Path) -> None:
    run = _store(tmp_path / "s.db")
    with pytest.raises(StoreError, match="run = 'nope'"):
        load_run(run.store, "nope")
    run.close()
