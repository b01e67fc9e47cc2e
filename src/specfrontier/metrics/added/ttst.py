"""Time to second token (TTST), p50 over a window's ok requests: how long a user waits, after the first
token, for the answer to keep coming (a slow second step shows here before it moves TPOT much).

Per ok request: the arrival of the content chunk that carries its 2nd output token minus the arrival of
the chunk that carries its 1st. The tokens per chunk are `metrics.chunks.chunk_token_counts` (the
server's per-chunk counts; else one per chunk when chunks = tokens; else 1 in the first chunk and the
rest split evenly), counted cumulatively. So TTST is 0 when one chunk carries both tokens (a speculative
step that streams several tokens at once), and the gap between the first two chunks when each carries
one. A request that produced fewer than 2 tokens (one streamed token, or none) has no TTST: it is left
out of the percentile, like TPOT, and passes a TTST SLO target (nothing was slow). AIPerf's TTST is the
gap between the first two responses (chunks), whatever tokens they carry; the two agree at one token
per chunk.
"""

from __future__ import annotations

from itertools import accumulate
from typing import TYPE_CHECKING

from specfrontier.metrics.chunks import chunk_token_counts
from specfrontier.metrics.declare import MetricSpec, SloUse
from specfrontier.metrics.per_request import percentile
from specfrontier.records import RequestRecord
from specfrontier.units import ns_to_ms

if TYPE_CHECKING:
    from specfrontier.metrics.prepared import Window


def request_ttst_ms(r: RequestRecord) -> float | None:
    """One request's time from its 1st to its 2nd output token (ms); None with fewer than 2 tokens."""
    if (r.completion_tokens or 0) < 2:
        return None
    counts, _ = chunk_token_counts(r)
    seen = list(accumulate(counts))
    first = next((t for t, n in zip(r.chunk_ns, seen, strict=True) if n >= 1), None)
    second = next((t for t, n in zip(r.chunk_ns, seen, strict=True) if n >= 2), None)
    return None if first is None or second is None else ns_to_ms(second - first)


def _ttst_p50(w: Window) -> float | None:
    return percentile([v for r in w.ok if (v := request_ttst_ms(r)) is not None], 50)


METRIC = MetricSpec(
    "ttst_p50_ms",
    "ms",
    "Median over repeats of p50 time to second token (ms): 2nd token's chunk - 1st token's chunk.",
    _ttst_p50,
    section="detail",
    slo=SloUse("ttst", request_ttst_ms, missing_passes=True),
)
