"""The figures a prepared window (`metrics.prepared`) gives cell_metrics, token by token: multi-token
chunks, per-token ITL and its weighted percentile, chunk gaps, per-user tok/s, acceptance.

Every expected value is worked out by hand in the comment above it (times in ms). The pooled computation
over a cell's chunks at once must give exactly the per-request definitions (`token_itl`, a per-request
diff), whatever the chunks look like (the last test, on random shapes).
"""

from __future__ import annotations

import random

import numpy as np
import pytest

from specfrontier.metrics.chunks import chunk_token_counts
from specfrontier.metrics.prepared import token_itl, weighted_percentile
from specfrontier.metrics.window import cell_metrics
from specfrontier.records import RequestRecord, RequestSpecStats
from specfrontier.units import NS_PER_MS

MS = 1_000_000


def rec(
    send_ms: float,
    end_ms: float,
    chunks_ms: tuple[float, ...] = (),
    tokens: int | None = None,
    *,
    chunk_tokens: tuple[int, ...] | None = None,
    spec: RequestSpecStats | None = None,
    error: str | None = None,
) -> RequestRecord:
    return RequestRecord(
        prompt_id="p",
        send_ns=int(send_ms * MS),
        end_ns=int(end_ms * MS),
        first_token_ns=int(chunks_ms[0] * MS) if chunks_ms else None,
        chunk_ns=tuple(int(t * MS) for t in chunks_ms),
        chunk_tokens=chunk_tokens,
        completion_tokens=tokens,
        spec=spec,
        error=error,
    )


# Speculative stream: 3 tokens per chunk, chunks at 100, 130, 160, 190; 12 tokens; end 190.
THREE_PER_CHUNK = rec(0, 190, (100, 130, 160, 190), 12, chunk_tokens=(3, 3, 3, 3))


def test_three_tokens_per_chunk_itl_is_per_token_not_per_chunk() -> None:
    m = cell_metrics([THREE_PER_CHUNK])
    # TTFT 100; E2E 190; TPOT (190 - 100) / (12 - 1) = 90/11
    assert m.ttft_p50_ms == pytest.approx(100)
    assert m.e2e_p50_ms == pytest.approx(190)
    assert m.tpot_p50_ms == pytest.approx(90 / 11)
    # per-user tok/s: 1/TPOT = 11 / 0.090 s; secondary 12 tokens / 0.190 s
    assert m.per_request_tok_s_p50 == pytest.approx(11 / 0.090)
    assert m.e2e_tok_s_p50 == pytest.approx(12 / 0.190)
    # each 30 ms gap carries 3 tokens: 9 per-token values of 10 ms (the first chunk's 3 belong to TTFT)
    assert (m.itl_p50_ms, m.itl_p90_ms, m.itl_p99_ms) == (pytest.approx(10), pytest.approx(10), pytest.approx(10))
    assert m.itl_estimated_requests == 0
    # the raw inter-chunk gaps stay 30 ms: a naive ITL would be 3x too high
    assert (m.chunk_gap_p50_ms, m.chunk_gap_p99_ms) == (pytest.approx(30), pytest.approx(30))
    assert (m.tokens_per_chunk_mean, m.tokens_per_chunk_p50, m.tokens_per_chunk_max) == (4 * 3 / 4, 3.0, 3)


def test_three_per_chunk_without_server_counts_is_split_evenly_and_flagged() -> None:
    r = rec(0, 190, (100, 130, 160, 190), 12)
    # unknown split: first chunk 1 token, the others (12 - 1) / 3 each -> 30 / (11/3) = 90/11 ms = TPOT
    assert chunk_token_counts(r) == ((1.0, 11 / 3, 11 / 3, 11 / 3), True)
    m = cell_metrics([r])
    assert m.itl_p50_ms == pytest.approx(90 / 11)
    assert m.itl_estimated_requests == 1
    assert m.tokens_per_chunk_p50 is None and m.tokens_per_chunk_max is None


def test_one_token_per_chunk_is_the_plain_gap_list() -> None:
    r = rec(0, 60, (10, 20, 40, 60), 4)
    values, weights, estimated = token_itl(r)
    assert (values, weights, estimated) == ([10.0, 20.0, 20.0], [1.0, 1.0, 1.0], False)


def test_chunk_without_tokens_carries_its_gap_to_the_next_counted_chunk() -> None:
    # chunk at 20 reports 0 tokens (a text delta not counted): the 30 ms from 10 to 40 go to the 2 tokens at 40
    r = rec(0, 40, (10, 20, 40), 3, chunk_tokens=(1, 0, 2))
    assert token_itl(r)[:2] == ([15.0], [2.0])


def test_weighted_percentile_inverted_cdf() -> None:
    # as the repeated list [10, 15, 15, 20, 20, 20, 20]: p10 -> 1st, p50 -> 4th (cum 3 < 3.5), p100 -> last
    values, weights = [20.0, 10.0, 15.0, 20.0], [3.0, 1.0, 2.0, 1.0]
    assert weighted_percentile(values, weights, 10) == 10
    assert weighted_percentile(values, weights, 42) == 15  # 0.42 x 7 = 2.94 <= cum 3
    assert weighted_percentile(values, weights, 50) == 20
    assert weighted_percentile(values, weights, 100) == 20
    assert weighted_percentile([], [], 50) is None
    with pytest.raises(ValueError, match="2 values but 1 weights"):
        weighted_percentile([1.0, 2.0], [1.0], 50)


# A cell with mixed chunk sizes and one error:
# R1: send 0, chunks 50 (1 tok), 80 (2), 140 (3); 6 tokens; end 140; spec 5 of 10 accepted in 4 steps
# R2: send 10, chunks 60, 70, 90 (1 each); 3 tokens; end 90; spec 2 of 2 accepted in 1 step
# R3: send 0, end 200, error (its spec counts must be ignored)
MIXED = [
    rec(0, 140, (50, 80, 140), 6, chunk_tokens=(1, 2, 3), spec=RequestSpecStats(10, 5, 4)),
    rec(10, 90, (60, 70, 90), 3, chunk_tokens=(1, 1, 1), spec=RequestSpecStats(2, 2, 1)),
    rec(0, 200, error="http 503", spec=RequestSpecStats(50, 50, 10)),
]


def test_mixed_cell_with_an_error_by_hand() -> None:
    m = cell_metrics(MIXED)
    # window 0 -> 200 (the error's end counts); errors stay in every denominator
    assert m.window_s == pytest.approx(0.2)
    assert (m.requests, m.ok_requests, m.errors) == (3, 2, 1)
    assert m.error_rate == pytest.approx(1 / 3)
    assert m.aggregate_tok_s == pytest.approx((6 + 3) / 0.2)
    assert m.request_rate_s == pytest.approx(2 / 0.2)
    # achieved concurrency: (140 + 80 + 200) / 200; peak 3 (all open at t = 10..90)
    assert m.achieved_concurrency == pytest.approx(2.1)
    assert m.peak_concurrency == 3
    assert m.output_tokens_per_request_mean == pytest.approx(9 / 3)
    assert m.chunks_per_request_mean == pytest.approx(6 / 3)
    assert m.tokens_per_chunk_mean == pytest.approx(9 / 6)
    # known per-chunk counts [1, 2, 3, 1, 1, 1]: p50 (linear) of sorted [1, 1, 1, 1, 2, 3] = 1; max 3
    assert (m.tokens_per_chunk_p50, m.tokens_per_chunk_max) == (1.0, 3)
    # TTFT 50 and 50; E2E 140 and 80; TPOT (140 - 50) / 5 = 18 and (90 - 60) / 2 = 15
    assert m.ttft_p50_ms == pytest.approx(50)
    assert m.e2e_p50_ms == pytest.approx(110)
    assert m.tpot_p50_ms == pytest.approx(16.5)
    # 1/TPOT: 5/0.09 and 2/0.03; output/E2E: 6/0.14 and 3/0.08
    assert m.per_request_tok_s_p50 == pytest.approx((5 / 0.09 + 2 / 0.03) / 2)
    assert m.e2e_tok_s_p50 == pytest.approx((6 / 0.14 + 3 / 0.08) / 2)
    # ITL: R1 gaps 30 over 2 tokens (15 x2), 60 over 3 (20 x3); R2 10 and 20 (x1)
    # as a list [10, 15, 15, 20, 20, 20, 20]: p50 = 4th = 20; p10 = 1st = 10 -> check via p50/p90
    assert m.itl_p50_ms == pytest.approx(20)
    assert m.itl_p90_ms == pytest.approx(20)
    # chunk gaps 30, 60, 10, 20 -> sorted 10, 20, 30, 60: p50 25, p90 at rank 2.7 -> 30 + 0.7 x 30 = 51
    assert m.chunk_gap_p50_ms == pytest.approx(25)
    assert m.chunk_gap_p90_ms == pytest.approx(51)
    # acceptance, ok requests only: token-weighted 7/12; request-weighted (0.5 + 1.0) / 2
    assert m.request_acceptance_rate == pytest.approx(7 / 12)
    assert m.request_acceptance_rate_request_weighted == pytest.approx(0.75)
    # acceptance length: token-weighted 1 + 7/5; request-weighted ((1 + 5/4) + (1 + 2/1)) / 2
    assert m.acceptance_length_token_weighted == pytest.approx(2.4)
    assert m.acceptance_length_request_weighted == pytest.approx(2.625)


def test_token_weighted_length_needs_steps_from_every_request() -> None:
    cell = [
        rec(0, 30, (10, 30), 2, spec=RequestSpecStats(4, 2, 2)),
        rec(0, 30, (10, 30), 2, spec=RequestSpecStats(4, 4)),
    ]
    m = cell_metrics(cell)
    assert m.acceptance_length_token_weighted is None  # a partial step sum would bias it
    assert m.acceptance_length_request_weighted == pytest.approx(2.0)  # only the request with steps


def _record(rnd: random.Random, i: int) -> RequestRecord:
    """A request of a random shape: server counts, estimated split, token-less chunks, one chunk, none, error."""
    kind = rnd.choice(["counted", "estimated", "token-less", "one", "none", "error", "mismatch"])
    n = {"one": 1, "none": 0}.get(kind, rnd.randrange(2, 30))
    send = rnd.randrange(0, 10**9)
    t, times = send + rnd.randrange(1, 10**8), []
    for _ in range(n):
        t += rnd.choice([0, rnd.randrange(1, 10**7)])
        times.append(t)
    tokens = [rnd.choice([0, 1, 3]) if kind == "token-less" else rnd.randrange(1, 5) for _ in range(n)]
    counts: tuple[int, ...] | None = tuple(tokens)
    if kind == "estimated":
        counts = None
    elif kind == "mismatch":
        counts = tuple(tokens[:-1])
    return RequestRecord(
        prompt_id=f"r{i}",
        send_ns=send,
        end_ns=(times[-1] if times else t) + rnd.randrange(0, 10**6),
        first_token_ns=times[0] if times else None,
        chunk_ns=tuple(times),
        chunk_tokens=counts,
        completion_tokens=None if kind == "error" else sum(tokens) + rnd.randrange(0, 3),
        error="failed" if kind == "error" else None,
    )


@pytest.mark.parametrize("seed", range(25))
def test_pooled_chunk_figures_equal_the_per_request_definitions(seed: int) -> None:
    rnd = random.Random(seed)
    records = [_record(rnd, i) for i in range(rnd.randrange(1, 40))]
    ok = [r for r in records if r.ok]
    values: list[float] = []
    weights: list[float] = []
    gaps: list[float] = []
    estimated = 0
    for r in ok:
        v, w, guessed = token_itl(r)
        values += v
        weights += w
        estimated += int(guessed and bool(v))
        gaps += (np.diff(np.asarray(r.chunk_ns, dtype=np.int64)) / NS_PER_MS).tolist()
    m = cell_metrics(records)
    assert m.itl_estimated_requests == estimated
    for q, figure in ((50, m.itl_p50_ms), (90, m.itl_p90_ms), (99, m.itl_p99_ms)):
        assert figure == weighted_percentile(values, weights, q)
    for q, figure in ((50, m.chunk_gap_p50_ms), (90, m.chunk_gap_p90_ms), (99, m.chunk_gap_p99_ms)):
        assert figure == (float(np.percentile(np.asarray(gaps), q)) if gaps else None)
