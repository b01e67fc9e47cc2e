"""The steady span of a closed-loop cell: rates over the part of the window with C requests in flight."""

from __future__ import annotations

import pytest

from specfrontier.metrics.steady import steady_span, steady_state
from specfrontier.metrics.window import cell_metrics
from specfrontier.records import RequestRecord

S = 1_000_000_000


def _request(start_s: float, *, tokens: int = 10, duration_s: float = 1.0, error: str | None = None) -> RequestRecord:
    """A request streaming one token every duration/tokens seconds, the first after one such step."""
    step = duration_s / tokens
    chunks = tuple(round((start_s + step * (i + 1)) * S) for i in range(tokens))
    return RequestRecord(
        "p",
        round(start_s * S),
        round((start_s + duration_s) * S),
        chunks[0],
        chunk_ns=chunks,
        completion_tokens=tokens,
        error=error,
    )


def _closed_loop(users: int, per_user: int, stagger_s: float) -> list[RequestRecord]:
    """`users` workers, each sending `per_user` back-to-back 1 s requests; worker i starts at i * stagger."""
    return [_request(i * stagger_s + k) for i in range(users) for k in range(per_user)]


def test_ramp_and_drain_are_left_out_and_the_true_rate_remains() -> None:
    records = _closed_loop(users=2, per_user=4, stagger_s=0.5)  # 20 tok/s while both users are busy
    # from 1.5 s (both first requests, the ramp cohort, have ended) to 4 s (the first end after the last send)
    assert steady_span(records, 2) == (round(1.5 * S), 4 * S)
    steady = steady_state(records, 2)
    assert steady is not None
    assert steady.output_tokens == 50 and steady.tok_s == pytest.approx(20.0)
    assert steady.concurrency == pytest.approx(2.0)
    whole = cell_metrics(records)
    assert whole.aggregate_tok_s == pytest.approx(80 / 4.5)  # ramp and drain pull it 11% below the truth
    assert whole.achieved_concurrency == pytest.approx(8 / 4.5)


def test_the_span_starts_when_the_ramp_cohort_has_been_replaced() -> None:
    """Two requests sent together, the first 1 s long and the second 2 s: the span starts at 2 s, when
    both have ended and been replaced; a cell that stops sending before then has no steady state."""
    records = [_request(0.0), _request(0.0, duration_s=2.0, tokens=20), _request(1.0), _request(2.0), _request(2.0)]
    records += [_request(3.0), _request(3.0)]
    assert steady_span(records, 2) == (2 * S, 4 * S)
    assert steady_span(records[:3], 2) is None  # sending stopped (1 s) before the cohort's end (2 s)
    assert steady_span([_request(0.0), _request(1.0)], 1) == (0, 2 * S)  # C = 1: the whole window


@pytest.mark.parametrize("users", [1, 4, 16, 64])
def test_the_steady_rate_is_the_true_rate_at_every_level(users: int) -> None:
    records = _closed_loop(users=users, per_user=4, stagger_s=0.01)
    steady = steady_state(records, users)
    assert steady is not None
    assert steady.tok_s == pytest.approx(10.0 * users, rel=1e-9)
    assert steady.concurrency == pytest.approx(users, rel=1e-9)


def test_no_steady_state_when_c_requests_were_never_in_flight() -> None:
    records = _closed_loop(users=2, per_user=2, stagger_s=0.0)
    assert steady_state(records, 4) is None  # asked for 4, never more than 2 at once
    assert steady_state([], 1) is None


def test_failed_requests_hold_a_seat_but_bring_no_tokens() -> None:
    records = _closed_loop(users=2, per_user=4, stagger_s=0.0)  # steady from 1 s to 4 s: 60 tokens
    records[1] = _request(1.0, error="timeout")  # user 0's second request fails after its full second
    steady = steady_state(records, 2)
    assert steady is not None and steady.concurrency == pytest.approx(2.0)
    assert steady.output_tokens == 50  # 60 in the span, minus the failed request's 10


def test_a_stored_cell_carries_the_steady_figures_and_a_short_steady_state_is_flagged() -> None:
    from specfrontier.analysis.summary import summarise_cells
    from specfrontier.store import CellRow

    long_cell = CellRow(0, "s", "w", 2, 0, None, None, tuple(_closed_loop(users=2, per_user=7, stagger_s=0.5)))
    (summary,) = summarise_cells([long_cell])
    assert summary.steady_tok_s.median == pytest.approx(20.0) and summary.steady_s.median == pytest.approx(5.5)
    assert summary.aggregate_tok_s.median == pytest.approx(20.0)  # what decisions compare
    assert summary.window_tok_s.median == pytest.approx(140 / 7.5)  # the whole window, beside it
    assert not summary.steady_too_short  # 5.5 s >= 4 request lifetimes of 1 s
    short = CellRow(0, "s", "w", 4, 0, None, None, tuple(_closed_loop(users=2, per_user=3, stagger_s=0.5)))
    (never,) = summarise_cells([short])  # labelled C=4, never more than 2 in flight
    assert never.steady_tok_s.median is None and never.steady_too_short
