"""One request's own latencies, and the percentile every per-window figure uses.

Why a module of its own: the window figures (`metrics.window`), the SLO checks (`metrics.slo`) and the
metric declarations (`metrics.specs`) all need the same TTFT, TPOT and E2E of one request; defined here
once, a request's TPOT is the same number in a percentile table and in a goodput count.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from specfrontier.records import RequestRecord
from specfrontier.units import ns_to_ms


def percentile(values: Sequence[float] | np.ndarray, q: float) -> float | None:
    """numpy's linear-interpolation percentile; None for no values (never 0 or NaN)."""
    if len(values) == 0:
        return None
    return float(np.percentile(np.asarray(values, dtype=np.float64), q, method="linear"))


def ratio(numerator: float, denominator: float) -> float | None:
    """numerator / denominator, None when the denominator is not positive."""
    return numerator / denominator if denominator > 0 else None


def request_ttft_ms(r: RequestRecord) -> float | None:
    """First chunk with generated text - send; None when the stream carried no text."""
    return None if r.first_token_ns is None else ns_to_ms(r.first_token_ns - r.send_ns)


def request_e2e_ms(r: RequestRecord) -> float:
    """End of stream - send."""
    return ns_to_ms(r.end_ns - r.send_ns)


def request_decode_ns(r: RequestRecord) -> int | None:
    """E2E - TTFT (end - first token) of a request with at least 2 tokens and decode time; None otherwise."""
    if r.first_token_ns is None or (r.completion_tokens or 0) < 2:
        return None
    decode_ns = r.end_ns - r.first_token_ns
    return decode_ns if decode_ns > 0 else None


def request_tpot_ms(r: RequestRecord) -> float | None:
    """(E2E - TTFT) / (completion_tokens - 1); None with fewer than 2 tokens or no decode time."""
    decode_ns = request_decode_ns(r)
    return None if decode_ns is None else ns_to_ms(decode_ns / ((r.completion_tokens or 0) - 1))


__all__ = ["percentile", "ratio", "request_decode_ns", "request_e2e_ms", "request_tpot_ms", "request_ttft_ms"]
