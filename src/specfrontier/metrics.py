"""Figures of one measured cell (one engine config x workload x concurrency), from raw request records.

Definitions (stated here because tools use the same names for different formulas; see the anchors
reference, section 4). All times are client-side `perf_counter_ns` stamps, taken when a read returned.

- window: first `send_ns` -> last `end_ns` over all records, errors included; `window_s` its length.
- `requests` = all records; `errors` = records with `error`; `ok_requests` = the rest;
  `error_rate` = errors / requests.
- `output_tokens` = sum of server-reported `completion_tokens` over ok requests (never chunk counts).
- `aggregate_tok_s` = output_tokens / window_s.
- Per ok request: TTFT = first_token_ns - send_ns; E2E = end_ns - send_ns;
  TPOT = (E2E - TTFT) / (completion_tokens - 1); per-request tok/s = (completion_tokens - 1) / (E2E - TTFT)
  = 1 / TPOT. Requests with fewer than 2 tokens, or with TTFT == E2E, have no TPOT and are left out of
  the TPOT and per-request tok/s percentiles only. Failed requests are left out of every latency figure.
- `per_request_tok_s_p10` is the 10th percentile: the slow users.
- `achieved_concurrency` = sum of E2E over all records / window (mean requests in flight);
  `peak_concurrency` = most send->end intervals open at one instant (an interval ending exactly when
  another starts does not overlap it).
- Means "per request" divide by `requests` (errors count, contributing 0 tokens and 0 chunks):
  `output_tokens_per_request_mean` = output_tokens / requests, `chunks_per_request_mean` = content chunks
  of ok requests / requests. `tokens_per_chunk_mean` = output_tokens / content chunks of ok requests
  (> 1 means chunks carry several tokens, as with speculative decoding).
- Spec: `draft_tokens` and `accepted_tokens` are summed over ok requests that report `spec` (None when
  none does); `request_acceptance_rate` = accepted / drafted (None when nothing was drafted).
- Percentiles use numpy's linear interpolation. A figure with no data is None (never 0 or NaN).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from specfrontier.records import RequestRecord

_NS_PER_S = 1e9
_NS_PER_MS = 1e6


@dataclass(frozen=True, slots=True)
class CellMetrics:
    """Derived figures of one cell; the module docstring gives every definition."""

    window_s: float
    requests: int
    errors: int
    ok_requests: int
    error_rate: float
    output_tokens: int
    aggregate_tok_s: float | None
    per_request_tok_s_p50: float | None
    per_request_tok_s_p10: float | None
    ttft_p50_ms: float | None
    ttft_p90_ms: float | None
    ttft_p99_ms: float | None
    tpot_p50_ms: float | None
    tpot_p90_ms: float | None
    e2e_p50_ms: float | None
    output_tokens_per_request_mean: float
    achieved_concurrency: float | None
    peak_concurrency: int
    chunks_per_request_mean: float
    tokens_per_chunk_mean: float | None
    draft_tokens: int | None
    accepted_tokens: int | None
    request_acceptance_rate: float | None


def _percentile(values: Sequence[float], q: float) -> float | None:
    if not values:
        return None
    return float(np.percentile(np.asarray(values, dtype=np.float64), q, method="linear"))


def _ratio(numerator: float, denominator: float) -> float | None:
    return numerator / denominator if denominator > 0 else None


def peak_concurrency(records: Sequence[RequestRecord]) -> int:
    """Most requests in flight at one instant, from the [send_ns, end_ns) intervals."""
    # At equal times the end (-1) sorts before the start (+1): back-to-back requests do not overlap.
    events = sorted([(r.send_ns, 1) for r in records] + [(r.end_ns, -1) for r in records])
    peak = current = 0
    for _, step in events:
        current += step
        peak = max(peak, current)
    return peak


def cell_metrics(records: Sequence[RequestRecord]) -> CellMetrics:
    """Compute a cell's figures from all its records (errors included); raises on an empty list."""
    if not records:
        raise ValueError("cell_metrics needs at least one record")
    for r in records:
        if r.end_ns < r.send_ns:
            raise ValueError(f"record {r.prompt_id!r}: end_ns {r.end_ns} < send_ns {r.send_ns}")
        if r.ok and r.completion_tokens is None:
            raise ValueError(f"record {r.prompt_id!r} has no error but no completion_tokens")

    window_ns = max(r.end_ns for r in records) - min(r.send_ns for r in records)
    window_s = window_ns / _NS_PER_S
    ok = [r for r in records if r.ok]
    requests = len(records)
    errors = requests - len(ok)

    output_tokens = 0
    chunks = 0
    ttft_ms: list[float] = []
    e2e_ms: list[float] = []
    tpot_ms: list[float] = []
    tok_s: list[float] = []
    for r in ok:
        tokens = r.completion_tokens or 0
        output_tokens += tokens
        chunks += len(r.chunk_ns)
        e2e_ns = r.end_ns - r.send_ns
        e2e_ms.append(e2e_ns / _NS_PER_MS)
        if r.first_token_ns is None:
            continue
        ttft_ns = r.first_token_ns - r.send_ns
        ttft_ms.append(ttft_ns / _NS_PER_MS)
        decode_ns = e2e_ns - ttft_ns
        if tokens >= 2 and decode_ns > 0:
            tpot_ms.append(decode_ns / (tokens - 1) / _NS_PER_MS)
            tok_s.append((tokens - 1) / (decode_ns / _NS_PER_S))

    with_spec = [r.spec for r in ok if r.spec is not None]
    draft_tokens = sum(s.draft_tokens for s in with_spec) if with_spec else None
    accepted_tokens = sum(s.accepted_tokens for s in with_spec) if with_spec else None
    acceptance = (
        _ratio(accepted_tokens, draft_tokens) if draft_tokens is not None and accepted_tokens is not None else None
    )

    return CellMetrics(
        window_s=window_s,
        requests=requests,
        errors=errors,
        ok_requests=len(ok),
        error_rate=errors / requests,
        output_tokens=output_tokens,
        aggregate_tok_s=_ratio(output_tokens, window_s),
        per_request_tok_s_p50=_percentile(tok_s, 50),
        per_request_tok_s_p10=_percentile(tok_s, 10),
        ttft_p50_ms=_percentile(ttft_ms, 50),
        ttft_p90_ms=_percentile(ttft_ms, 90),
        ttft_p99_ms=_percentile(ttft_ms, 99),
        tpot_p50_ms=_percentile(tpot_ms, 50),
        tpot_p90_ms=_percentile(tpot_ms, 90),
        e2e_p50_ms=_percentile(e2e_ms, 50),
        output_tokens_per_request_mean=output_tokens / requests,
        achieved_concurrency=_ratio(sum(r.end_ns - r.send_ns for r in records), window_ns),
        peak_concurrency=peak_concurrency(records),
        chunks_per_request_mean=chunks / requests,
        tokens_per_chunk_mean=_ratio(output_tokens, chunks),
        draft_tokens=draft_tokens,
        accepted_tokens=accepted_tokens,
        request_acceptance_rate=acceptance,
    )


__all__ = ["CellMetrics", "cell_metrics", "peak_concurrency"]
