"""cell_metrics pools chunk gaps and per-token ITL over a cell's chunks at once; the figures must be exactly
those of the per-request definitions (`token_itl`, a per-request diff), whatever the chunks look like."""

from __future__ import annotations

import random

import numpy as np
import pytest

from specfrontier.metrics.prepared import token_itl, weighted_percentile
from specfrontier.metrics.window import cell_metrics
from specfrontier.records import RequestRecord
from specfrontier.units import NS_PER_MS


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
