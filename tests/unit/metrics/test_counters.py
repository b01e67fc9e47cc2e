"""Sweep pieces that need no server: window sizing and acceptance-window selection."""

from __future__ import annotations

import pytest

from specfrontier.load.closed_loop import requests_per_cell
from specfrontier.metrics.counters import PER_REQUEST_SOURCE
from specfrontier.metrics.counters import window_counters as _window_counters
from specfrontier.records import RequestRecord, RequestSpecStats, SpecCounters


@pytest.mark.parametrize(
    ("rounds", "concurrency", "prompts", "expected"),
    [(2, 1, 4, 4), (2, 2, 4, 4), (2, 4, 4, 8), (3, 4, 4, 12), (2, 4, 6, 12), (1, 1, 1, 1), (5, 3, 4, 16)],
)
def test_requests_per_cell_are_whole_passes_over_the_prompts(
    rounds: int, concurrency: int, prompts: int, expected: int
) -> None:
    n = requests_per_cell(rounds, concurrency, prompts)
    assert n == expected
    assert n % prompts == 0 and n >= rounds * concurrency


def _record(drafted: int, accepted: int, error: str | None = None) -> RequestRecord:
    return RequestRecord("p", 0, 10, 5, completion_tokens=3, spec=RequestSpecStats(drafted, accepted), error=error)


def test_window_prefers_the_server_counter_diff() -> None:
    before, after = SpecCounters(10, 5, 4, (3, 2)), SpecCounters(30, 20, 9, (7, 6, 2))
    counters, source = _window_counters(before, after, [_record(1, 1)], "server /metrics")
    assert counters == SpecCounters(20, 15, 5, (4, 4, 2))
    assert source == "server /metrics"


def test_window_falls_back_to_per_request_sums_without_server_counters() -> None:
    records = [_record(10, 7), _record(6, 3), _record(50, 50, error="timeout after 1 s")]
    counters, source = _window_counters(None, None, records, "server /metrics")
    assert counters == SpecCounters(16, 10, 0)  # failed request left out; no verify-step count known
    assert source == PER_REQUEST_SOURCE
    assert _window_counters(None, None, [], "x") == (None, None)
