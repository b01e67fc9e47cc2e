"""Figures of one measured cell (one engine config x workload x concurrency), from raw request records.

Each figure is declared once in `metrics.specs` (its `compute` over a `Window`, the records prepared
once); `cell_metrics` is a loop over the declarations. The definitions below are what they compute.

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

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from functools import cached_property
from itertools import chain
from typing import Any

import numpy as np

from specfrontier.metrics.chunks import chunk_token_counts
from specfrontier.metrics.declare import WindowValue
from specfrontier.metrics.per_request import request_decode_ns, request_e2e_ms, request_tpot_ms, request_ttft_ms
from specfrontier.metrics.specs import ADDED_METRICS, METRICS
from specfrontier.metrics.steady import SteadyState, steady_state
from specfrontier.records import RequestRecord, RequestSpecStats
from specfrontier.units import NS_PER_MS, ns_to_s


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
    more: Mapping[str, WindowValue] = field(default_factory=dict)
    """The metrics declared in files of their own (`metrics/added/`), by name: their fields are not spelled
    out here, so that adding one edits no list."""

    def value(self, name: str) -> WindowValue:
        """A declared metric's value in this window, by name (`metrics.specs`)."""
        if name in _FIELDS:
            value: WindowValue = getattr(self, name)
            return value
        return self.more[name]


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


class Window:
    """One window's records, prepared for the declared computations (`metrics.specs`): each list is built
    on first use and shared by the metrics that read it (TTFT p50, p90 and p99 sort one list)."""

    def __init__(self, records: Sequence[RequestRecord], concurrency: int | None) -> None:
        self.records: Sequence[RequestRecord] = records
        self.concurrency: int | None = concurrency
        """The closed loop's C (its steady span is measured); None for an open-loop cell."""

    @cached_property
    def ok(self) -> list[RequestRecord]:
        return [r for r in self.records if r.ok]

    @cached_property
    def window_ns(self) -> int:
        return max(r.end_ns for r in self.records) - min(r.send_ns for r in self.records)

    @cached_property
    def window_s(self) -> float:
        return ns_to_s(self.window_ns)

    @cached_property
    def output_tokens(self) -> int:
        return sum(r.completion_tokens or 0 for r in self.ok)

    @cached_property
    def chunks(self) -> int:
        """Content chunks of the ok requests."""
        return sum(len(r.chunk_ns) for r in self.ok)

    @cached_property
    def ttft_ms(self) -> list[float]:
        return [v for r in self.ok if (v := request_ttft_ms(r)) is not None]

    @cached_property
    def e2e_ms(self) -> list[float]:
        return [request_e2e_ms(r) for r in self.ok]

    @cached_property
    def tpot_ms(self) -> list[float]:
        return [v for r in self.ok if (v := request_tpot_ms(r)) is not None]

    @cached_property
    def tok_s(self) -> list[float]:
        """Per-request tok/s = (completion_tokens - 1) / (E2E - TTFT), over the requests with a TPOT."""
        return [
            ((r.completion_tokens or 0) - 1) / ns_to_s(decode_ns)
            for r in self.ok
            if (decode_ns := request_decode_ns(r)) is not None
        ]

    @cached_property
    def e2e_tok_s(self) -> list[float]:
        return [(r.completion_tokens or 0) / ns_to_s(r.end_ns - r.send_ns) for r in self.ok if r.end_ns > r.send_ns]

    @cached_property
    def known_chunk_tokens(self) -> list[int]:
        """Server-reported per-chunk token counts, pooled over the ok requests that stream them."""
        return [
            k
            for r in self.ok
            if r.chunk_tokens is not None and len(r.chunk_tokens) == len(r.chunk_ns)
            for k in r.chunk_tokens
        ]

    @cached_property
    def pooled(self) -> _ChunkFigures:
        """Chunk gaps and per-token ITL (`token_itl`), over all chunks at once."""
        return _chunk_figures(self.ok)

    @cached_property
    def itl(self) -> list[float | None]:
        """Per-token ITL p50, p90, p99 (token-weighted)."""
        return weighted_percentiles(self.pooled.itl_values, self.pooled.itl_weights, (50, 90, 99))

    @cached_property
    def with_spec(self) -> list[RequestSpecStats]:
        """The spec counts of the ok requests that report them."""
        return [r.spec for r in self.ok if r.spec is not None]

    @cached_property
    def peak_concurrency(self) -> int:
        return peak_concurrency(self.records)

    @cached_property
    def steady(self) -> SteadyState | None:
        """Closed loop: the steady span (`metrics.steady`); None for an open-loop cell or C never reached."""
        return steady_state(self.records, self.concurrency) if self.concurrency is not None else None


def cell_metrics(records: Sequence[RequestRecord], concurrency: int | None = None) -> CellMetrics:
    """Compute a cell's figures from all its records (errors included): every declared metric's `compute`
    (`metrics.specs`) over the prepared window. Raises on an empty list. With the closed loop's
    `concurrency`, also the steady-state figures (`metrics.steady`)."""
    if not records:
        raise ValueError("cell_metrics needs at least one record")
    for r in records:
        if r.end_ns < r.send_ns:
            raise ValueError(f"record {r.prompt_id!r}: end_ns {r.end_ns} < send_ns {r.send_ns}")
        if r.ok and r.completion_tokens is None:
            raise ValueError(f"record {r.prompt_id!r} has no error but no completion_tokens")
    window = Window(records, concurrency)
    values = {m.name: m.compute(window) for m in METRICS if m.compute is not None}
    spelled: dict[str, Any] = {name: values.pop(name) for name in _FIELDS}  # each of its field's type
    return CellMetrics(**spelled, more=values)


def _spelled_fields() -> frozenset[str]:
    """`CellMetrics`'s own fields; each must be a declared metric (checked at import)."""
    names = frozenset(f.name for f in fields(CellMetrics)) - {"more"}
    computed = {m.name for m in METRICS if m.compute is not None}
    if not names <= computed:
        raise ValueError(f"CellMetrics fields without a declaration in metrics.specs: {sorted(names - computed)}")
    core = computed - {m.name for m in ADDED_METRICS}
    if core != names:
        raise ValueError(f"core metrics without a CellMetrics field: {sorted(core - names)}")
    return names


_FIELDS = _spelled_fields()


__all__ = [
    "CellMetrics",
    "Window",
    "cell_metrics",
    "chunk_token_counts",
    "peak_concurrency",
    "token_itl",
    "weighted_percentile",
    "weighted_percentiles",
]
