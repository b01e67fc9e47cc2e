"""Figures of one measured cell (one engine config x workload x concurrency), from raw request records.

Definitions (stated here because tools use the same names for different formulas; see the anchors
reference, section 4). All times are client-side `perf_counter_ns` stamps, taken when a read returned.

- window: first `send_ns` -> last `end_ns` over all records, errors included; `window_s` its length.
- `requests` = all records; `errors` = records with `error`; `ok_requests` = the rest;
  `error_rate` = errors / requests.
- `output_tokens` = sum of server-reported `completion_tokens` over ok requests (never chunk counts).
- `aggregate_tok_s` = output_tokens / window_s; for a closed-loop cell (`concurrency` given) with a steady
  state, the steady-state rate instead (`metrics.steady`: ramp and drain excluded), with the whole-window
  figure kept as `window_tok_s`.
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

Added for speculative decoding, where one streamed chunk may carry several tokens (docs/metrics.md):

- `e2e_p90_ms`, `e2e_p99_ms`, `tpot_p99_ms`: the same per-request values, more percentiles.
- Per-user tok/s, secondary: `e2e_tok_s` = completion_tokens / E2E per ok request (includes the TTFT,
  as AIPerf's "E2E output token throughput"); p50 and p10 (the slow users).
- Inter-chunk gaps (`chunk_gap_p50/p90/p99_ms`): the raw time between consecutive content chunks of one
  request, pooled over ok requests (AIPerf "inter-chunk latency"). It shows bursts: under speculation it
  grows with the tokens each chunk carries, so it is NOT a per-token latency.
- Per-token ITL (`itl_p50/p90/p99_ms`): each gap between content chunk i-1 and chunk i is split evenly
  over the k_i tokens chunk i carries: k_i values of gap / k_i (anchors section 4: split each chunk gap
  over the change of completion_tokens). The first chunk's tokens belong to the TTFT, so a request adds
  (completion_tokens - k_0) values; with one token per chunk this is the plain gap list. k_i comes from
  the server's per-chunk counts (`chunk_tokens`) when known; otherwise, when there are as many chunks as
  tokens, k_i = 1; otherwise the first chunk is assumed to carry 1 token and the others
  (completion_tokens - 1) / (chunks - 1) each (an even split, counted in `itl_estimated_requests`).
  Percentiles of ITL are token-weighted (each value weighs k_i) and use the inverted CDF (the smallest
  value whose cumulative weight reaches q%), so that fractional k_i need no rounding.
- `tokens_per_chunk_p50`/`_max`: per content chunk, from known per-chunk counts only (None when no
  request carries them); `tokens_per_chunk_mean` above covers every ok request.
- `request_rate_s` = ok requests / window_s (completed requests per second, errors excluded).
- Acceptance, request-weighted: `request_acceptance_rate_request_weighted` = mean over ok requests that
  drafted of accepted / drafted; `acceptance_length_token_weighted` = 1 + sum accepted / sum verify steps
  and `acceptance_length_request_weighted` = mean of 1 + accepted / verify steps over requests that
  report steps (token-weighted needs every reporting request to give steps, else None).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import chain

import numpy as np

from specfrontier.metrics.chunks import chunk_token_counts
from specfrontier.metrics.steady import steady_state
from specfrontier.records import RequestRecord
from specfrontier.units import NS_PER_MS, ns_to_ms, ns_to_s


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
    tpot_p99_ms: float | None = None
    e2e_p90_ms: float | None = None
    e2e_p99_ms: float | None = None
    e2e_tok_s_p50: float | None = None
    e2e_tok_s_p10: float | None = None
    itl_p50_ms: float | None = None
    itl_p90_ms: float | None = None
    itl_p99_ms: float | None = None
    itl_estimated_requests: int = 0
    chunk_gap_p50_ms: float | None = None
    chunk_gap_p90_ms: float | None = None
    chunk_gap_p99_ms: float | None = None
    tokens_per_chunk_p50: float | None = None
    tokens_per_chunk_max: int | None = None
    request_rate_s: float | None = None
    request_acceptance_rate_request_weighted: float | None = None
    acceptance_length_token_weighted: float | None = None
    acceptance_length_request_weighted: float | None = None
    window_tok_s: float | None = None
    """output_tokens / window_s, ramp and drain included (the aggregate of an open-loop cell, and of a
    closed-loop cell without a steady state; shown beside the steady figure otherwise)."""
    steady_s: float | None = None
    """Closed loop: length of the steady span, C requests in flight (`metrics.steady`); None: no C given
    (open loop) or C never reached."""
    steady_tok_s: float | None = None
    """Output tokens produced inside the steady span / its length (ramp and drain excluded)."""
    steady_concurrency: float | None = None
    """Mean requests in flight inside the steady span."""


def _percentile(values: Sequence[float] | np.ndarray, q: float) -> float | None:
    if len(values) == 0:
        return None
    return float(np.percentile(np.asarray(values, dtype=np.float64), q, method="linear"))


def _ratio(numerator: float, denominator: float) -> float | None:
    return numerator / denominator if denominator > 0 else None


def weighted_percentile(
    values: Sequence[float] | np.ndarray, weights: Sequence[float] | np.ndarray, q: float
) -> float | None:
    """Inverted-CDF weighted percentile: the smallest value whose cumulative weight reaches q% of the total.

    Used for the per-token ITL, where one chunk gap stands for k tokens (weight k, maybe fractional);
    repeating a value k times would need integer k. None when there is no positive weight.
    """
    return weighted_percentiles(values, weights, (q,))[0]


def weighted_percentiles(
    values: Sequence[float] | np.ndarray, weights: Sequence[float] | np.ndarray, qs: Sequence[float]
) -> list[float | None]:
    """`weighted_percentile` at each of `qs`, sorting the values once (a cell asks for three)."""
    if len(values) != len(weights):
        raise ValueError(f"weighted_percentile: {len(values)} values but {len(weights)} weights")
    # numpy, not a Python loop: a long cell has millions of token gaps and this runs per percentile.
    value_array = np.asarray(values, dtype=np.float64)
    weight_array = np.asarray(weights, dtype=np.float64)
    keep = weight_array > 0
    if not keep.any():
        return [None] * len(qs)
    value_array = value_array[keep]
    order = np.argsort(value_array, kind="stable")
    cumulative = np.cumsum(weight_array[keep][order])
    total = float(cumulative[-1])
    ordered = value_array[order]
    found: list[float | None] = []
    for q in qs:
        # A relative tolerance: cumulative float sums of fractional weights must not skip a value.
        index = int(np.searchsorted(cumulative, q / 100.0 * total - 1e-9 * total, side="left"))
        found.append(float(ordered[min(index, len(order) - 1)]))
    return found


def token_itl(r: RequestRecord) -> tuple[list[float], list[float], bool]:
    """(per-token ITL values in ms, their token weights, estimated?) of one ok request.

    The gap before chunk i is split evenly over the k_i tokens it carries: one value gap / k_i with
    weight k_i. A chunk that reports 0 tokens (e.g. a text-only delta the server did not count) adds
    nothing, and its gap is carried over to the next chunk that has tokens, so no time is lost.
    """
    counts, estimated = chunk_token_counts(r)
    if len(r.chunk_ns) < 2:
        return [], [], estimated
    times = np.asarray(r.chunk_ns, dtype=np.int64)
    tokens = np.asarray(counts, dtype=np.float64)
    carrying = np.flatnonzero(tokens[1:] > 0) + 1  # chunks after the first that carry tokens
    ends = times[carrying]
    starts = np.concatenate((times[:1], ends[:-1]))  # a token-less chunk's gap carries over
    kept = tokens[carrying]
    return ((ends - starts) / kept / NS_PER_MS).tolist(), kept.tolist(), estimated


@dataclass(frozen=True, slots=True)
class _ChunkFigures:
    """The chunk-level values of a cell's ok requests, pooled in request order."""

    gaps_ms: np.ndarray
    itl_values: np.ndarray
    itl_weights: np.ndarray
    itl_estimated: int


def _chunk_figures(ok: Sequence[RequestRecord]) -> _ChunkFigures:
    """Every ok request's chunk gaps and per-token ITL values and weights (`token_itl`), over the cell's
    chunks at once.

    Why: a cell holds thousands of requests of a few hundred chunks each, and a numpy call per request costs
    more than its arithmetic; the same integer differences and divisions, taken element by element over the
    concatenated chunks, give exactly the values (and order) of the per-request computation."""
    lengths = np.fromiter((len(r.chunk_ns) for r in ok), dtype=np.int64, count=len(ok))
    total = int(lengths.sum())
    times = np.fromiter(chain.from_iterable(r.chunk_ns for r in ok), dtype=np.int64, count=total)
    split = [chunk_token_counts(r) for r in ok]
    tokens = np.fromiter(chain.from_iterable(counts for counts, _ in split), dtype=np.float64, count=total)
    first = np.zeros(total, dtype=bool)
    first[(np.cumsum(lengths) - lengths)[lengths > 0]] = True  # each request's first chunk
    gaps_ms = np.diff(times)[~first[1:]] / NS_PER_MS
    # a chunk after the first that carries tokens; a token-less chunk's gap carries over to the next one
    carrying = ~first & (tokens > 0)
    marked = np.where(first | carrying, np.arange(total), 0)
    anchor = np.maximum.accumulate(marked)[np.flatnonzero(carrying) - 1]  # previous carrying or first chunk
    kept = tokens[carrying]
    values = (times[carrying] - times[anchor]) / kept / NS_PER_MS
    owner = np.repeat(np.arange(len(ok)), lengths)
    has_values = np.bincount(owner[carrying], minlength=len(ok)) > 0
    estimated = sum(1 for (_, guessed), valued in zip(split, has_values.tolist(), strict=True) if guessed and valued)
    return _ChunkFigures(gaps_ms, values, kept, estimated)


def peak_concurrency(records: Sequence[RequestRecord]) -> int:
    """Most requests in flight at one instant, from the [send_ns, end_ns) intervals."""
    # At equal times the end (-1) sorts before the start (+1): back-to-back requests do not overlap.
    events = sorted([(r.send_ns, 1) for r in records] + [(r.end_ns, -1) for r in records])
    peak = current = 0
    for _, step in events:
        current += step
        peak = max(peak, current)
    return peak


def cell_metrics(records: Sequence[RequestRecord], concurrency: int | None = None) -> CellMetrics:
    """Compute a cell's figures from all its records (errors included); raises on an empty list. With the
    closed loop's `concurrency`, also the steady-state figures (`metrics.steady`)."""
    if not records:
        raise ValueError("cell_metrics needs at least one record")
    for r in records:
        if r.end_ns < r.send_ns:
            raise ValueError(f"record {r.prompt_id!r}: end_ns {r.end_ns} < send_ns {r.send_ns}")
        if r.ok and r.completion_tokens is None:
            raise ValueError(f"record {r.prompt_id!r} has no error but no completion_tokens")

    window_ns = max(r.end_ns for r in records) - min(r.send_ns for r in records)
    window_s = ns_to_s(window_ns)
    ok = [r for r in records if r.ok]
    requests = len(records)
    errors = requests - len(ok)

    output_tokens = 0
    chunks = 0
    ttft_ms: list[float] = []
    e2e_ms: list[float] = []
    tpot_ms: list[float] = []
    tok_s: list[float] = []
    e2e_tok_s: list[float] = []
    known_chunk_tokens: list[int] = []
    pooled = _chunk_figures(ok)  # gaps and per-token ITL (`token_itl`), over all chunks at once
    for r in ok:
        tokens = r.completion_tokens or 0
        output_tokens += tokens
        chunks += len(r.chunk_ns)
        e2e_ns = r.end_ns - r.send_ns
        e2e_ms.append(ns_to_ms(e2e_ns))
        if e2e_ns > 0:
            e2e_tok_s.append(tokens / ns_to_s(e2e_ns))
        if r.chunk_tokens is not None and len(r.chunk_tokens) == len(r.chunk_ns):
            known_chunk_tokens.extend(r.chunk_tokens)
        if r.first_token_ns is None:
            continue
        ttft_ns = r.first_token_ns - r.send_ns
        ttft_ms.append(ns_to_ms(ttft_ns))
        decode_ns = e2e_ns - ttft_ns
        if tokens >= 2 and decode_ns > 0:
            tpot_ms.append(ns_to_ms(decode_ns / (tokens - 1)))
            tok_s.append((tokens - 1) / ns_to_s(decode_ns))

    with_spec = [r.spec for r in ok if r.spec is not None]
    draft_tokens = sum(s.draft_tokens for s in with_spec) if with_spec else None
    accepted_tokens = sum(s.accepted_tokens for s in with_spec) if with_spec else None
    acceptance = (
        _ratio(accepted_tokens, draft_tokens) if draft_tokens is not None and accepted_tokens is not None else None
    )
    per_request_rates = [s.accepted_tokens / s.draft_tokens for s in with_spec if s.draft_tokens > 0]
    with_steps = [s for s in with_spec if s.verify_steps is not None and s.verify_steps > 0]
    steps_total = sum(s.verify_steps or 0 for s in with_steps)
    length_token = (
        1.0 + sum(s.accepted_tokens for s in with_steps) / steps_total
        if with_steps and len(with_steps) == len(with_spec)
        else None
    )
    length_request = [1.0 + s.accepted_tokens / (s.verify_steps or 1) for s in with_steps]

    steady = _steady_figures(records, concurrency)
    itl_p50, itl_p90, itl_p99 = weighted_percentiles(pooled.itl_values, pooled.itl_weights, (50, 90, 99))
    return CellMetrics(
        window_s=window_s,
        requests=requests,
        errors=errors,
        ok_requests=len(ok),
        error_rate=errors / requests,
        output_tokens=output_tokens,
        aggregate_tok_s=steady.pop("aggregate_tok_s", _ratio(output_tokens, window_s)),
        window_tok_s=_ratio(output_tokens, window_s),
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
        tpot_p99_ms=_percentile(tpot_ms, 99),
        e2e_p90_ms=_percentile(e2e_ms, 90),
        e2e_p99_ms=_percentile(e2e_ms, 99),
        e2e_tok_s_p50=_percentile(e2e_tok_s, 50),
        e2e_tok_s_p10=_percentile(e2e_tok_s, 10),
        itl_p50_ms=itl_p50,
        itl_p90_ms=itl_p90,
        itl_p99_ms=itl_p99,
        itl_estimated_requests=pooled.itl_estimated,
        chunk_gap_p50_ms=_percentile(pooled.gaps_ms, 50),
        chunk_gap_p90_ms=_percentile(pooled.gaps_ms, 90),
        chunk_gap_p99_ms=_percentile(pooled.gaps_ms, 99),
        tokens_per_chunk_p50=_percentile(np.asarray(known_chunk_tokens, dtype=np.float64), 50),
        tokens_per_chunk_max=max(known_chunk_tokens) if known_chunk_tokens else None,
        request_rate_s=_ratio(len(ok), window_s),
        request_acceptance_rate_request_weighted=(
            sum(per_request_rates) / len(per_request_rates) if per_request_rates else None
        ),
        acceptance_length_token_weighted=length_token,
        acceptance_length_request_weighted=sum(length_request) / len(length_request) if length_request else None,
        **steady,
    )


def _steady_figures(records: Sequence[RequestRecord], concurrency: int | None) -> dict[str, float | None]:
    steady = steady_state(records, concurrency) if concurrency is not None else None
    if steady is None:
        return {}
    figures = {"steady_s": steady.span_s, "steady_tok_s": steady.tok_s, "steady_concurrency": steady.concurrency}
    if steady.tok_s is not None:  # a closed-loop cell's aggregate rate is its steady state's
        figures["aggregate_tok_s"] = steady.tok_s
    return figures


__all__ = [
    "CellMetrics",
    "cell_metrics",
    "chunk_token_counts",
    "peak_concurrency",
    "token_itl",
    "weighted_percentile",
    "weighted_percentiles",
]
