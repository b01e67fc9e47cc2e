"""cell_metrics on hand-built records, with the arithmetic written out."""

from __future__ import annotations

import pytest

from specfrontier.metrics.prepared import peak_concurrency
from specfrontier.metrics.window import cell_metrics
from specfrontier.records import RequestRecord, RequestSpecStats

MS = 1_000_000  # ns per ms


def rec(
    send_ms: float,
    end_ms: float,
    first_ms: float | None = None,
    tokens: int | None = None,
    chunks_ms: tuple[float, ...] = (),
    *,
    error: str | None = None,
    spec: RequestSpecStats | None = None,
    chunk_tokens: tuple[int, ...] | None = None,
) -> RequestRecord:
    return RequestRecord(
        prompt_id="p",
        send_ns=int(send_ms * MS),
        end_ns=int(end_ms * MS),
        first_token_ns=None if first_ms is None else int(first_ms * MS),
        chunk_ns=tuple(int(t * MS) for t in chunks_ms),
        chunk_tokens=chunk_tokens,
        completion_tokens=tokens,
        spec=spec,
        error=error,
    )


# R1: send 0, first token 100, end 1100, 9 tokens in 3 chunks -> TTFT 100, E2E 1100,
#     TPOT (1100-100)/8 = 125 ms, tok/s 8/1.0 s = 8
# R2: send 0, first 200, end 1000, 9 tokens in 3 chunks -> TTFT 200, E2E 1000, TPOT 800/8 = 100, tok/s 10
# R3: send 500, first 800, end 2500, 9 tokens in 3 chunks -> TTFT 300, E2E 2000, TPOT 1700/8 = 212.5,
#     tok/s 8/1.7 = 80/17
# R4: send 1000, end 1500, HTTP error
# R5: send 1500, first 1600, end 1600, 1 token in 1 chunk -> TTFT 100, E2E 100, no TPOT
CELL = [
    rec(0, 1100, 100, 9, (100, 600, 1100), spec=RequestSpecStats(12, 6)),
    rec(0, 1000, 200, 9, (200, 600, 1000), spec=RequestSpecStats(8, 2)),
    rec(500, 2500, 800, 9, (800, 1500, 2500)),
    rec(1000, 1500, error="http 500: boom", spec=RequestSpecStats(100, 100)),
    rec(1500, 1600, 1600, 1, (1600,)),
]


def test_mixed_cell_by_hand() -> None:
    m = cell_metrics(CELL)
    # window: first send 0 -> last end 2500 ms
    assert m.window_s == pytest.approx(2.5)
    assert (m.requests, m.errors, m.ok_requests) == (5, 1, 4)
    assert m.error_rate == pytest.approx(1 / 5)
    # 9 + 9 + 9 + 1 (the error's tokens are unknown and never counted)
    assert m.output_tokens == 28
    assert m.aggregate_tok_s == pytest.approx(28 / 2.5)  # 11.2
    # TTFT of ok requests sorted [100, 100, 200, 300]; linear positions 0.5*3, 0.9*3, 0.99*3
    assert m.ttft_p50_ms == pytest.approx(150)  # 100 + 0.5 * (200 - 100)
    assert m.ttft_p90_ms == pytest.approx(270)  # 200 + 0.7 * (300 - 200)
    assert m.ttft_p99_ms == pytest.approx(297)  # 200 + 0.97 * 100
    # TPOT without the 1-token request: sorted [100, 125, 212.5]; positions 0.5*2 = 1, 0.9*2 = 1.8
    assert m.tpot_p50_ms == pytest.approx(125)
    assert m.tpot_p90_ms == pytest.approx(195)  # 125 + 0.8 * 87.5
    # tok/s sorted [80/17, 8, 10]; p10 at position 0.2: 80/17 + 0.2 * (8 - 80/17) = 64/17 + 1.6
    assert m.per_request_tok_s_p50 == pytest.approx(8)
    assert m.per_request_tok_s_p10 == pytest.approx(64 / 17 + 1.6)  # 5.3647
    # E2E of ok requests sorted [100, 1000, 1100, 2000] -> 1000 + 0.5 * 100
    assert m.e2e_p50_ms == pytest.approx(1050)
    assert m.output_tokens_per_request_mean == pytest.approx(28 / 5)  # the error counts as a request
    # sum E2E of all five: 1100 + 1000 + 2000 + 500 + 100 = 4700 ms over 2500 ms
    assert m.achieved_concurrency == pytest.approx(1.88)
    # 500..1000 ms: R1, R2, R3; at 1000 R2 ends as R4 starts, still 3
    assert m.peak_concurrency == 3
    # content chunks of ok requests 3 + 3 + 3 + 1 = 10
    assert m.chunks_per_request_mean == pytest.approx(10 / 5)
    assert m.tokens_per_chunk_mean == pytest.approx(28 / 10)
    # spec from ok requests only: drafted 12 + 8, accepted 6 + 2
    assert (m.draft_tokens, m.accepted_tokens) == (20, 8)
    assert m.request_acceptance_rate == pytest.approx(0.4)


def test_chunks_carrying_three_tokens() -> None:
    # Two requests, each 9 tokens in 3 chunks of 3 (one speculative verify step per chunk).
    # A: send 0, first 50, end 450 -> TPOT (450 - 50) / 8 = 50 ms, tok/s 8 / 0.4 = 20
    # B: send 0, first 50, end 850 -> TPOT 800 / 8 = 100 ms, tok/s 10
    cell = [
        rec(0, 450, 50, 9, (50, 250, 450), chunk_tokens=(3, 3, 3)),
        rec(0, 850, 50, 9, (50, 450, 850), chunk_tokens=(3, 3, 3)),
    ]
    m = cell_metrics(cell)
    assert m.output_tokens == 18  # from usage, not the 6 chunks
    assert m.tokens_per_chunk_mean == pytest.approx(3.0)  # 18 tokens / 6 chunks
    assert m.chunks_per_request_mean == pytest.approx(3.0)
    assert m.aggregate_tok_s == pytest.approx(18 / 0.85)
    assert m.tpot_p50_ms == pytest.approx(75)  # midway between 50 and 100
    assert m.per_request_tok_s_p50 == pytest.approx(15)  # midway between 10 and 20
    assert m.per_request_tok_s_p10 == pytest.approx(11)  # 10 + 0.1 * (20 - 10)
    assert m.achieved_concurrency == pytest.approx((450 + 850) / 850)
    assert m.peak_concurrency == 2
    assert m.draft_tokens is None
    assert m.request_acceptance_rate is None


def test_one_token_request_has_no_tpot() -> None:
    m = cell_metrics([rec(0, 40, 40, 1, (40,))])
    assert m.ttft_p50_ms == pytest.approx(40)
    assert m.e2e_p50_ms == pytest.approx(40)
    assert m.tpot_p50_ms is None
    assert m.tpot_p90_ms is None
    assert m.per_request_tok_s_p50 is None
    assert m.per_request_tok_s_p10 is None
    assert m.output_tokens == 1


def test_all_tokens_in_the_first_chunk_has_no_tpot() -> None:
    # 5 tokens but TTFT == E2E: no decode time to divide.
    m = cell_metrics([rec(0, 30, 30, 5, (30,))])
    assert m.tpot_p50_ms is None
    assert m.tokens_per_chunk_mean == pytest.approx(5.0)


def test_all_errors() -> None:
    m = cell_metrics([rec(0, 100, error="timeout after 0.1 s"), rec(50, 200, error="http 503: x")])
    assert (m.requests, m.errors, m.ok_requests) == (2, 2, 0)
    assert m.error_rate == 1.0
    assert m.output_tokens == 0
    assert m.aggregate_tok_s == 0.0  # no tokens over a 0.2 s window is data, not missing
    assert m.ttft_p50_ms is None
    assert m.e2e_p50_ms is None
    assert m.tpot_p50_ms is None
    assert m.tokens_per_chunk_mean is None
    assert m.draft_tokens is None
    assert m.achieved_concurrency == pytest.approx((100 + 150) / 200)
    assert m.peak_concurrency == 2


def test_zero_length_window_gives_none_rates() -> None:
    m = cell_metrics([rec(10, 10, error="connection error: refused")])
    assert m.window_s == 0.0
    assert m.aggregate_tok_s is None
    assert m.achieved_concurrency is None


def test_nothing_drafted_gives_no_acceptance_rate() -> None:
    m = cell_metrics([rec(0, 100, 10, 4, (10, 100), spec=RequestSpecStats(0, 0))])
    assert (m.draft_tokens, m.accepted_tokens) == (0, 0)
    assert m.request_acceptance_rate is None


def test_percentiles_match_numpy_linear() -> None:
    # TTFTs 1..101 ms: linear positions 0.5*100 = 50, 0.9*100 = 90, 0.99*100 = 99 hit values exactly.
    cell = [rec(0, 200, t, 2, (t, 200)) for t in range(1, 102)]
    m = cell_metrics(cell)
    assert m.ttft_p50_ms == pytest.approx(51)
    assert m.ttft_p90_ms == pytest.approx(91)
    assert m.ttft_p99_ms == pytest.approx(100)
    # Two values 10 and 20: p90 = 10 + 0.9 * 10 = 19 (linear interpolation, not nearest rank)
    pair = cell_metrics([rec(0, 500, 10, 2, (10, 500)), rec(0, 500, 20, 2, (20, 500))])
    assert pair.ttft_p90_ms == pytest.approx(19)


def test_peak_concurrency_back_to_back_requests_do_not_overlap() -> None:
    assert peak_concurrency([rec(0, 10, error="x"), rec(10, 20, error="x"), rec(20, 30, error="x")]) == 1
    assert peak_concurrency([rec(0, 10, error="x"), rec(9, 20, error="x")]) == 2


def test_empty_cell_raises() -> None:
    with pytest.raises(ValueError, match="at least one record"):
        cell_metrics([])


def test_ok_record_without_usage_raises() -> None:
    with pytest.raises(ValueError, match="no completion_tokens"):
        cell_metrics([rec(0, 10, 5, None, (5,))])
