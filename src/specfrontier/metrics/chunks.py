"""How many tokens each streamed chunk of a request carried: the per-token ITL (`window`) and the
steady-state rates (`steady`) split a request's tokens over its chunks the same way."""

from __future__ import annotations

from specfrontier.records import RequestRecord


def chunk_token_counts(r: RequestRecord) -> tuple[tuple[float, ...], bool]:
    """Tokens carried by each content chunk of an ok request, and whether the split was estimated.

    Server-reported per-chunk counts win; else one token per chunk when chunks == completion_tokens;
    else the first chunk is taken as 1 token and the rest share completion_tokens - 1 evenly.
    """
    n = len(r.chunk_ns)
    if n == 0:
        return (), False
    if r.chunk_tokens is not None and len(r.chunk_tokens) == n:
        return tuple(map(float, r.chunk_tokens)), False
    tokens = r.completion_tokens or 0
    if tokens == n:
        return (1.0,) * n, False
    if n == 1:
        return (float(tokens),), True
    rest = max(tokens - 1, 0) / (n - 1)
    return (1.0, *([rest] * (n - 1))), True


__all__ = ["chunk_token_counts"]
