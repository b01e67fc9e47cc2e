"""Time slices on hand-made records: per-second counts, delivered tokens, percentiles and a spike."""

from __future__ import annotations

import pytest

from specfrontier.metrics.timeslices import SPIKE_FACTOR, spikes, time_slices
from specfrontier.records import RequestRecord

S = 1_000_000_000
MS = 1_000_000


def _req(
    send_ms: int, ttft_ms: int, e2e_ms: int, tokens: int, chunks: int, *, error: str | None = None
) -> RequestRecord:
    send = send_ms * MS
    first = send + ttft_ms * MS
    end = send + e2e_ms * MS
    step = (end - first) // max(chunks - 1, 1)
    chunk_ns = tuple(first + i * step for i in range(chunks)) if error is None else ()
    return RequestRecord(
        prompt_id="p",
        send_ns=send,
        end_ns=end,
        first_token_ns=first if error is None else None,
        chunk_ns=chunk_ns,
        completion_tokens=tokens if error is None else None,
        error=error,
    )


def test_slices_count_finishes_tokens_and_latency_per_second() -> None:
    records = [
        _req(0, 100, 500, tokens=5, chunks=5),  # ends in slice 0, TPOT = 400/4 = 100 ms
        _req(200, 100, 1300, tokens=13, chunks=13),  # first token in slice 0, ends in slice 1, TPOT 100 ms
        _req(1500, 200, 1150, tokens=20, chunks=20),  # first token slice 1, ends in slice 2, TPOT 50 ms
        _req(1600, 0, 100, tokens=0, chunks=0, error="http 500: boom"),  # an error ending in slice 1
    ]
    slices = time_slices(records, slice_s=1.0)
    assert [s.index for s in slices] == [0, 1, 2]
    assert [s.finished for s in slices] == [1, 2, 1]
    assert [s.errors for s in slices] == [0, 1, 0]
    assert sum(s.output_tokens for s in slices) == pytest.approx(38)
    assert slices[0].ttft_p50_ms == pytest.approx(100.0)  # both first tokens at 100 and 300 ms: TTFT 100 each
    assert slices[1].ttft_p50_ms == pytest.approx(200.0)
    assert slices[2].ttft_p50_ms is None
    assert slices[0].tpot_p50_ms == pytest.approx(100.0)
    assert slices[1].tpot_p99_ms == pytest.approx(100.0)
    assert slices[2].tpot_p50_ms == pytest.approx(50.0)
    assert spikes(records, slices) == []


def test_chunk_tokens_are_counted_at_their_arrival() -> None:
    send = 0
    r = RequestRecord(
        prompt_id="p",
        send_ns=send,
        end_ns=int(1.5 * S),
        first_token_ns=int(0.1 * S),
        chunk_ns=(int(0.1 * S), int(0.9 * S), int(1.5 * S)),
        chunk_tokens=(1, 3, 4),
        completion_tokens=8,
    )
    slices = time_slices([r])
    assert [s.output_tokens for s in slices] == [4.0, 4.0]


def test_a_stall_is_detected_as_a_spike() -> None:
    # Ten seconds of steady requests (TTFT 50 ms), and one second where TTFT jumps to 600 ms.
    records = [_req(t * 250, 50, 400, tokens=8, chunks=8) for t in range(40)]
    stalled = [_req(5000 + k * 100, 600, 900, tokens=8, chunks=8) for k in range(3)]
    slices = time_slices(records + stalled)
    found = spikes(records + stalled, slices)
    assert [(s.metric, s.slice_index) for s in found] == [("ttft", 5)]
    spike = found[0]
    assert spike.cell_median_ms == pytest.approx(50.0)
    assert spike.factor > SPIKE_FACTOR
    assert spike.p99_ms == pytest.approx(600.0)


def test_slice_width_must_be_positive() -> None:
    with pytest.raises(ValueError, match="slice_s"):
        time_slices([], slice_s=0)
    assert time_slices([]) == []


def test_percentiles_of_many_groups_equal_one_call_per_group() -> None:
    """The slices' p50/p99, computed for all groups of one size at once, are numpy's values of each group."""
    import numpy as np

    from specfrontier.metrics.timeslices import p50_p99_each

    rng = np.random.default_rng(3)
    groups = [list(rng.lognormal(3, 1.5, size=int(n)) * scale) for n, scale in zip(
        rng.integers(0, 30, size=2000), rng.choice([1.0, 1e-3, 1e5], size=2000), strict=True
    )]  # fmt: skip
    expected = [(float(np.percentile(g, 50)), float(np.percentile(g, 99))) if g else (None, None) for g in groups]
    assert p50_p99_each(groups) == expected


def test_whole_token_counts_are_summed_per_second_exactly() -> None:
    """Cells whose chunks all count whole tokens take the one-pass path: each slot's tokens are the exact
    integer sum of the tokens of the chunks that arrived in it; a cell with one uneven split takes the
    request-by-request path and still counts every token."""
    import random

    rng = random.Random(5)
    records = []
    for i in range(60):
        send = i * 100_000_000
        times = sorted(send + rng.randrange(1, 3 * 10**9) for _ in range(rng.randrange(1, 30)))
        counts = tuple(rng.randrange(0, 5) for _ in times)
        records.append(RequestRecord(f"p{i}", send, times[-1], times[0], chunk_ns=tuple(times), chunk_tokens=counts))
    seconds = max(r.end_ns for r in records) // 10**9 + 1  # the window starts at 0
    expected = [0] * seconds
    for r in records:
        for t, n in zip(r.chunk_ns, r.chunk_tokens or (), strict=True):
            expected[min(t // 10**9, seconds - 1)] += n
    slices = time_slices(records)
    assert [s.output_tokens for s in slices] == [float(n) for n in expected]
    uneven = RequestRecord("u", 0, 2 * 10**9, 10**9, chunk_ns=(10**9, 2 * 10**9 - 1), completion_tokens=3)
    mixed = time_slices([*records, uneven])
    assert sum(s.output_tokens for s in mixed) == pytest.approx(sum(expected) + 3)
