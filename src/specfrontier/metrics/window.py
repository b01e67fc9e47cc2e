"""Figures of one measured cell (one engine config x workload x concurrency), from raw request records.

Each figure is declared once in `metrics.specs` (its `compute` over a `metrics.prepared.Window`, the
records prepared once); `cell_metrics` is a loop over the declarations. The definitions below are what
they compute.

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
from typing import Any

from specfrontier.metrics.declare import WindowValue
from specfrontier.metrics.prepared import Window
from specfrontier.metrics.specs import ADDED_METRICS, METRICS
from specfrontier.records import RequestRecord


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


__all__ = ["CellMetrics", "cell_metrics"]
