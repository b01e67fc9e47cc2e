"""TTFT p95 (`metrics/added/ttft_p95.py`): its definition by hand, the median over repeats, its latency-table
column, and the checks every declared metric passes (tests/metric_rules.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from metric_rules import assert_metric_works
from specfrontier.analysis import load_run
from specfrontier.metrics.added.ttft_p95 import METRIC
from specfrontier.metrics.window import cell_metrics
from specfrontier.records import RequestRecord
from specfrontier.report.metric_tables import latency_table
from specfrontier.store import Store

MS = 1_000_000


def _request(ttft_ms: int | None, *, send_ms: int = 0, error: str | None = None) -> RequestRecord:
    """A 2-token request sent at `send_ms` whose first text arrives `ttft_ms` later (None: no text)."""
    first = None if ttft_ms is None else (send_ms + ttft_ms) * MS
    chunks = () if first is None else (first, first + 10 * MS)
    return RequestRecord(
        "p",
        send_ms * MS,
        (send_ms + (ttft_ms or 0) + 20) * MS,
        first,
        chunk_ns=chunks,
        completion_tokens=2 if first is not None else 0,
        error=error,
    )


@pytest.mark.parametrize(
    ("ttfts_ms", "expected"),
    [
        ((10, 20, 30, 40, 100), 88.0),  # rank 0.95 x 4 = 3.8: 40 + 0.8 x (100 - 40)
        (tuple(range(0, 101, 5)), 95.0),  # 21 values 0..100: rank 19 exactly
        ((250,), 250.0),  # one request: its own TTFT
    ],
)
def test_the_95th_percentile_interpolates_linearly(ttfts_ms: tuple[int, ...], expected: float) -> None:
    assert cell_metrics([_request(t) for t in ttfts_ms]).more["ttft_p95_ms"] == pytest.approx(expected)


def test_failed_requests_and_streams_without_text_are_left_out() -> None:
    window = [_request(10), _request(20), _request(None), _request(900, error="HTTP 500")]
    assert cell_metrics(window).more["ttft_p95_ms"] == pytest.approx(19.5)  # of 10 and 20 only
    assert cell_metrics([_request(None)]).more["ttft_p95_ms"] is None  # no TTFT at all: no figure, never 0


def test_a_cell_shows_the_median_of_its_repeats_in_the_latency_table(tmp_path: Path) -> None:
    store = Store(tmp_path / "p95.db")
    run_id = store.create_run(engine="sim", config={}, environment={})
    store.add_setting(run_id, setting_id="s", position=0, name="s", params={}, speculative=False)
    # 10 requests of 50 ms and 1 slow one: rank 0.95 x 10 = 9.5, so p95 = 50 + 0.5 x (slow - 50)
    for repeat, slow_ms in enumerate((300, 100, 200)):  # p95 175, 75, 125
        requests = [_request(50, send_ms=100 * i) for i in range(10)] + [_request(slow_ms, send_ms=1000)]
        store.record_cell(
            run_id,
            setting_id="s",
            workload="w",
            concurrency=1,
            repeat=repeat,
            requests=requests,
            counters=None,
            acceptance_source=None,
        )
    data = load_run(store, run_id)
    store.close()
    (cell,) = data.cells
    figure = cell.figure("ttft_p95_ms")
    assert (figure.low, figure.median, figure.high, figure.n) == pytest.approx((75.0, 125.0, 175.0, 3))
    table = latency_table(data)
    assert table.headers[-1] == "TTFT ms p95"  # after the core columns (position 8)
    assert table.rows[0][-1] == "125"
    assert "TTFT p95 = the 95th percentile of the same TTFTs" in table.notes[0]


def test_ttft_p95_works_as_every_declared_metric(tmp_path: Path) -> None:
    assert_metric_works(METRIC, tmp_path)
