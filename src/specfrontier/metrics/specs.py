"""Every metric declared once: what it is, its unit, how one window computes it, how repeats combine it,
whether SLOs and comparisons may use it, and where it is shown.

Why: a metric used to cost about ten edits that could disagree (a `CellMetrics` field and its code inside
`cell_metrics`, a `CellSummary` field, the JSON and CSV columns, the SLO key pattern, the comparison's
list, the digest's version). Here each metric is one `MetricSpec` (`metrics.declare`):
`metrics.window.cell_metrics` is a loop over the declarations, `analysis.summary` combines them over
repeats, the reports lay out their fields, columns and notes from them, `metrics.slo` accepts the keys
they allow and `analysis.compare` compares the ones they name. docs/metrics.md has the long definitions.

A new metric is one file in `metrics/added/` that sets `METRIC = MetricSpec(...)` (or `METRICS = (...)`
for metrics shown together), and its test: it is collected here (after the core ones, by file name), so
no list needs an edit, in the source or in the tests (they pin the core metrics only).

The order of `CELL_METRICS` is the order of the JSON report's cell fields and the CSV columns within each
`section`; views with an order of their own (the JSON `spread` object, the latency table) say it with a
position. Changing a core entry changes a public shape: tests pin the core fields and columns.
"""

from __future__ import annotations

import importlib
import pkgutil
from types import ModuleType
from typing import TYPE_CHECKING

import numpy as np

from specfrontier.metrics import added
from specfrontier.metrics.declare import (
    Grid,
    LatencyColumn,
    MetricSpec,
    Section,
    SloUse,
)
from specfrontier.metrics.per_request import (
    percentile,
    ratio,
    request_e2e_ms,
    request_tpot_ms,
    request_ttft_ms,
)

if TYPE_CHECKING:
    from specfrontier.metrics.prepared import Window


def _aggregate_tok_s(w: Window) -> float | None:
    """Closed loop with a steady state: the steady rate (ramp and drain excluded); else the whole window's."""
    if w.steady is not None and w.steady.tok_s is not None:
        return w.steady.tok_s
    return ratio(w.output_tokens, w.window_s)


def _spec_sum(w: Window, field: str) -> int | None:
    """A spec counter summed over the ok requests that report spec (None when none does)."""
    return sum(getattr(s, field) for s in w.with_spec) if w.with_spec else None


def _acceptance_rate(w: Window) -> float | None:
    drafted, accepted = _spec_sum(w, "draft_tokens"), _spec_sum(w, "accepted_tokens")
    return ratio(accepted, drafted) if drafted is not None and accepted is not None else None


def _acceptance_rate_request_weighted(w: Window) -> float | None:
    rates = [s.accepted_tokens / s.draft_tokens for s in w.with_spec if s.draft_tokens > 0]
    return sum(rates) / len(rates) if rates else None


def _acceptance_length_token_weighted(w: Window) -> float | None:
    """1 + accepted / verify steps, summed first; needs every reporting request to give its steps."""
    with_steps = [s for s in w.with_spec if s.verify_steps is not None and s.verify_steps > 0]
    if not with_steps or len(with_steps) != len(w.with_spec):
        return None
    return 1.0 + sum(s.accepted_tokens for s in with_steps) / sum(s.verify_steps or 0 for s in with_steps)


def _acceptance_length_request_weighted(w: Window) -> float | None:
    lengths = [
        1.0 + s.accepted_tokens / (s.verify_steps or 1)
        for s in w.with_spec
        if s.verify_steps is not None and s.verify_steps > 0
    ]
    return sum(lengths) / len(lengths) if lengths else None


_WINDOW_ONLY: tuple[MetricSpec, ...] = (
    MetricSpec(
        "window_s",
        "s",
        "First send to last end over all records, errors included.",
        lambda w: w.window_s,
        over_repeats=None,
    ),
    MetricSpec("ok_requests", "requests", "Records without an error.", lambda w: len(w.ok), over_repeats=None),
    MetricSpec(
        "error_rate",
        "ratio",
        "Failed requests / requests.",
        lambda w: (len(w.records) - len(w.ok)) / len(w.records),
        over_repeats=None,
    ),
    MetricSpec(
        "output_tokens",
        "tokens",
        "Server-reported completion tokens summed over ok requests.",
        lambda w: w.output_tokens,
        over_repeats=None,
    ),
    MetricSpec(
        "output_tokens_per_request_mean",
        "tokens",
        "Output tokens / requests (errors count, with 0 tokens).",
        lambda w: w.output_tokens / len(w.records),
        over_repeats=None,
    ),
    MetricSpec(
        "peak_concurrency",
        "requests",
        "Most send->end intervals open at one instant.",
        lambda w: w.peak_concurrency,
        over_repeats=None,
    ),
    MetricSpec(
        "chunks_per_request_mean",
        "chunks",
        "Content chunks of ok requests / requests.",
        lambda w: w.chunks / len(w.records),
        over_repeats=None,
    ),
    MetricSpec(
        "draft_tokens",
        "tokens",
        "Drafted tokens over ok requests that report spec.",
        lambda w: _spec_sum(w, "draft_tokens"),
        over_repeats=None,
    ),
    MetricSpec(
        "accepted_tokens",
        "tokens",
        "Accepted tokens over ok requests that report spec.",
        lambda w: _spec_sum(w, "accepted_tokens"),
        over_repeats=None,
    ),
    MetricSpec("request_acceptance_rate", "ratio", "Accepted / drafted.", _acceptance_rate, over_repeats=None),
    MetricSpec("e2e_p90_ms", "ms", "p90 end-to-end latency.", lambda w: percentile(w.e2e_ms, 90), over_repeats=None),
    MetricSpec(
        "e2e_tok_s_p10",
        "tok/s",
        "p10 completion tokens / E2E per request.",
        lambda w: percentile(w.e2e_tok_s, 10),
        over_repeats=None,
    ),
    MetricSpec("itl_p90_ms", "ms", "p90 per-token ITL.", lambda w: w.itl[1], over_repeats=None),
    MetricSpec(
        "chunk_gap_p90_ms",
        "ms",
        "p90 raw inter-chunk gap.",
        lambda w: percentile(w.pooled.gaps_ms, 90),
        over_repeats=None,
    ),
    MetricSpec(
        "tokens_per_chunk_p50",
        "tokens",
        "p50 tokens per content chunk, from server-reported per-chunk counts only.",
        lambda w: percentile(np.asarray(w.known_chunk_tokens, dtype=np.float64), 50),
        over_repeats=None,
    ),
    MetricSpec(
        "tokens_per_chunk_max",
        "tokens",
        "Most tokens in one content chunk, from server-reported per-chunk counts only.",
        lambda w: max(w.known_chunk_tokens) if w.known_chunk_tokens else None,
        over_repeats=None,
    ),
    MetricSpec(
        "request_rate_s",
        "req/s",
        "Ok requests / window_s.",
        lambda w: ratio(len(w.ok), w.window_s),
        over_repeats=None,
    ),
    MetricSpec(
        "request_acceptance_rate_request_weighted",
        "ratio",
        "Mean over ok requests that drafted of accepted / drafted.",
        _acceptance_rate_request_weighted,
        over_repeats=None,
    ),
    MetricSpec(
        "acceptance_length_token_weighted",
        "tokens",
        "1 + sum accepted / sum verify steps.",
        _acceptance_length_token_weighted,
        over_repeats=None,
    ),
)
"""Figures of one window that are not combined over repeats (kept in `CellMetrics` and the digest)."""

_CORE_CELL: tuple[MetricSpec, ...] = (
    MetricSpec(
        "per_request_tok_s_p50",
        "tok/s",
        "Median over repeats of the p50 per-request tok/s.",
        section="headline",
        csv_range=True,
        spread=0,
        grid=Grid(
            "Per-request tok/s (p50 over requests)",
            "per-request tok/s = (output tokens - 1) / (end - first token) per request, i.e. 1/TPOT; p50 over "
            "the window's requests.",
        ),
        compute=lambda w: percentile(w.tok_s, 50),
        compare="per-request tok/s p50",
    ),
    MetricSpec(
        "per_request_tok_s_p10",
        "tok/s",
        "Median over repeats of the p10 per-request tok/s.",
        section="headline",
        compute=lambda w: percentile(w.tok_s, 10),
    ),
    MetricSpec(
        "aggregate_tok_s",
        "tok/s",
        "Median over repeats of aggregate output tok/s.",
        section="headline",
        csv_range=True,
        spread=1,
        grid=Grid(
            "Aggregate tok/s",
            "aggregate tok/s = output tokens / time: closed loop, over the steady span (C in flight; ramp and "
            "drain excluded; window_tok_s has the whole window); open loop, over the measured window.",
        ),
        compute=_aggregate_tok_s,
        compare="aggregate tok/s",
    ),
    MetricSpec(
        "ttft_p50_ms",
        "ms",
        "Median over repeats of p50 TTFT (ms).",
        section="headline",
        csv_range=True,
        spread=2,
        grid=Grid(
            "TTFT p50 (ms)", "TTFT = first streamed chunk with text - request send, per request; p50 over the window."
        ),
        latency=LatencyColumn(1, "TTFT ms p50/p99", 0, then="ttft_p99_ms"),
        html_latency="TTFT p50",
        compute=lambda w: percentile(w.ttft_ms, 50),
        slo=SloUse("ttft", request_ttft_ms),
        compare="TTFT p50 ms",
    ),
    MetricSpec(
        "ttft_p90_ms",
        "ms",
        "Median over repeats of p90 TTFT (ms).",
        html_latency="TTFT p90",
        compute=lambda w: percentile(w.ttft_ms, 90),
    ),
    MetricSpec(
        "ttft_p99_ms",
        "ms",
        "Median over repeats of p99 TTFT (ms).",
        section="headline",
        html_latency="TTFT p99",
        compute=lambda w: percentile(w.ttft_ms, 99),
    ),
    MetricSpec(
        "tpot_p50_ms",
        "ms",
        "Median over repeats of p50 TPOT (ms).",
        section="headline",
        csv_range=True,
        spread=3,
        latency=LatencyColumn(2, "TPOT ms p50/p99", 1, then="tpot_p99_ms", note="TPOT = (E2E - TTFT) / (tokens - 1)"),
        html_latency="TPOT p50",
        compute=lambda w: percentile(w.tpot_ms, 50),
        slo=SloUse("tpot", request_tpot_ms, missing_passes=True),
        compare="TPOT p50 ms",
    ),
    MetricSpec(
        "tpot_p90_ms",
        "ms",
        "Median over repeats of p90 TPOT (ms).",
        html_latency="TPOT p90",
        compute=lambda w: percentile(w.tpot_ms, 90),
    ),
    MetricSpec(
        "achieved_concurrency",
        "requests",
        "Median over repeats of mean requests in flight.",
        section="headline",
        compute=lambda w: ratio(sum(r.end_ns - r.send_ns for r in w.records), w.window_ns),
    ),
    MetricSpec(
        "window_tok_s",
        "tok/s",
        "Median over repeats of output tok/s over the whole window (first send to last end, ramp and drain included).",
        section="headline",
        compute=lambda w: ratio(w.output_tokens, w.window_s),
    ),
    MetricSpec(
        "steady_tok_s",
        "tok/s",
        "Closed loop: median over repeats of output tok/s over the steady span (C in flight; ramp and drain excluded).",
        section="headline",
        compute=lambda w: w.steady.tok_s if w.steady else None,
    ),
    MetricSpec(
        "steady_concurrency",
        "requests",
        "Closed loop: median over repeats of mean requests in flight inside the steady span.",
        section="headline",
        compute=lambda w: w.steady.concurrency if w.steady else None,
    ),
    MetricSpec(
        "steady_s",
        "s",
        "Closed loop: median over repeats of the steady span's length (s).",
        section="headline",
        compute=lambda w: w.steady.span_s if w.steady else None,
    ),
    MetricSpec(
        "requests",
        "requests",
        "Requests over all repeats.",
        over_repeats="sum",
        section="counts",
        compute=lambda w: len(w.records),
    ),
    MetricSpec(
        "errors",
        "requests",
        "Failed requests over all repeats.",
        over_repeats="sum",
        section="counts",
        compute=lambda w: len(w.records) - len(w.ok),
    ),
    MetricSpec(
        "tpot_p99_ms",
        "ms",
        "Median over repeats of p99 TPOT (ms).",
        section="detail",
        compute=lambda w: percentile(w.tpot_ms, 99),
    ),
    MetricSpec(
        "e2e_p50_ms",
        "ms",
        "Median over repeats of p50 end-to-end latency (ms).",
        section="detail",
        spread=5,
        latency=LatencyColumn(6, "E2E ms p50/p99", 0, then="e2e_p99_ms"),
        compute=lambda w: percentile(w.e2e_ms, 50),
        slo=SloUse("e2e", request_e2e_ms),
    ),
    MetricSpec(
        "e2e_p99_ms",
        "ms",
        "Median over repeats of p99 end-to-end latency (ms).",
        section="detail",
        compute=lambda w: percentile(w.e2e_ms, 99),
    ),
    MetricSpec(
        "e2e_tok_s_p50",
        "tok/s",
        "Median over repeats of p50 completion tokens / E2E per request.",
        section="detail",
        latency=LatencyColumn(
            7,
            "out/E2E tok/s p50",
            1,
            note="out/E2E = completion tokens / E2E per request (per-user speed including the wait for the first "
            "token)",
        ),
        compute=lambda w: percentile(w.e2e_tok_s, 50),
    ),
    MetricSpec(
        "itl_p50_ms",
        "ms",
        "Median over repeats of p50 per-token ITL (chunk gap split over its tokens; token-weighted).",
        section="detail",
        spread=4,
        latency=LatencyColumn(
            3,
            "ITL ms p50/p99",
            1,
            then="itl_p99_ms",
            note="ITL = per token: each gap between content chunks split evenly over the tokens the later chunk "
            "carries (token-weighted percentiles)",
        ),
        compute=lambda w: w.itl[0],
    ),
    MetricSpec(
        "itl_p99_ms",
        "ms",
        "Median over repeats of p99 per-token ITL (ms).",
        section="detail",
        compute=lambda w: w.itl[2],
    ),
    MetricSpec(
        "itl_estimated_requests",
        "requests",
        "Requests without streamed per-chunk token counts: ITL split assumed (1 token first, even rest).",
        over_repeats="sum",
        section="detail",
        compute=lambda w: w.pooled.itl_estimated,
    ),
    MetricSpec(
        "chunk_gap_p50_ms",
        "ms",
        "Median over repeats of p50 raw inter-chunk gap (ms).",
        section="detail",
        latency=LatencyColumn(
            4,
            "chunk gap ms p50/p99",
            1,
            then="chunk_gap_p99_ms",
            note="chunk gap = raw time between content chunks (burstiness; grows with tokens per chunk under "
            "speculation)",
        ),
        compute=lambda w: percentile(w.pooled.gaps_ms, 50),
    ),
    MetricSpec(
        "chunk_gap_p99_ms",
        "ms",
        "Median over repeats of p99 raw inter-chunk gap (ms).",
        section="detail",
        compute=lambda w: percentile(w.pooled.gaps_ms, 99),
    ),
    MetricSpec(
        "tokens_per_chunk_mean",
        "tokens",
        "Median over repeats of output tokens / content chunks.",
        section="detail",
        latency=LatencyColumn(5, "tok/chunk", 2, note="tok/chunk = output tokens / content chunks"),
        compute=lambda w: ratio(w.output_tokens, w.chunks),
    ),
    MetricSpec(
        "acceptance_rate_request_weighted",
        "ratio",
        "Median over repeats of the mean per-request accepted / drafted (per-request stats only).",
        source="request_acceptance_rate_request_weighted",
        section="detail",
    ),
    MetricSpec(
        "acceptance_length_request_weighted",
        "tokens",
        "Median over repeats of the mean per-request 1 + accepted / verify steps.",
        section="detail",
        compute=_acceptance_length_request_weighted,
    ),
)


def declared_in(package: ModuleType) -> tuple[MetricSpec, ...]:
    """The metrics every module of `package` declares, by file name: its `METRIC`, or its `METRICS` when
    one file declares metrics that belong together (a latency column's p50 and the p99 it shows beside it)."""
    found: list[MetricSpec] = []
    for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda module: module.name):
        module = importlib.import_module(f"{package.__name__}.{info.name}")
        where = f"{package.__name__.replace('.', '/')}/{info.name}.py"
        one, several = getattr(module, "METRIC", None), getattr(module, "METRICS", None)
        if one is not None and several is not None:
            raise TypeError(f"{where}: sets both METRIC and METRICS; fix: keep one")
        declared = (one,) if several is None else several
        if not isinstance(declared, tuple) or not declared or not all(isinstance(m, MetricSpec) for m in declared):
            raise TypeError(
                f"{where}: sets no METRIC = MetricSpec(...) nor METRICS = (MetricSpec(...), ...); fix: declare one"
            )
        found.extend(declared)
    return tuple(found)


ADDED_METRICS: tuple[MetricSpec, ...] = declared_in(added)
"""Metrics declared in files of their own (`metrics/added/`): in `CellMetrics.more` and `CellSummary.more`."""

METRICS: tuple[MetricSpec, ...] = (*_WINDOW_ONLY, *_CORE_CELL, *ADDED_METRICS)
"""Every declared metric: each one's `compute` runs once per window (`metrics.window.cell_metrics`)."""

CELL_METRICS: tuple[MetricSpec, ...] = tuple(m for m in METRICS if m.over_repeats is not None)
"""The metrics combined over repeats (`CellSummary`), in the JSON report's order."""


def in_section(section: Section) -> tuple[MetricSpec, ...]:
    """The metrics a JSON cell carries in `section`, in their order."""
    return tuple(m for m in CELL_METRICS if m.section == section)


def spread_metrics() -> tuple[MetricSpec, ...]:
    """The metrics of the JSON cell's `spread` object, in its order."""
    placed = [(m.spread, m) for m in CELL_METRICS if m.spread is not None]
    return tuple(m for _, m in sorted(placed, key=lambda pair: pair[0]))


def latency_columns() -> tuple[tuple[str, LatencyColumn], ...]:
    """(metric name, column) of the latency table, in column order."""
    columns = [(m.name, m.latency) for m in CELL_METRICS if m.latency is not None]
    return tuple(sorted(columns, key=lambda pair: pair[1].position))


def html_latency_columns() -> tuple[tuple[str, str], ...]:
    """(metric name, header) of the HTML report's latency table, in declaration order."""
    return tuple((m.name, m.html_latency) for m in CELL_METRICS if m.html_latency is not None)


def slo_uses() -> dict[str, SloUse]:
    """The SLO keys `--slo` accepts (`ttft`, ...), in declaration order, with each one's per-request value."""
    return {m.slo.key: m.slo for m in CELL_METRICS if m.slo is not None}


def compared() -> dict[str, str]:
    """(report name -> metric name) of the figures two runs are compared on (`analysis.compare`)."""
    return {m.compare: m.name for m in CELL_METRICS if m.compare is not None}


def metric_revisions() -> dict[str, int]:
    """The metrics whose definition was revised since it was declared (revision > 1): a stored digest
    records these and is recomputed when they differ (`metrics.digest`)."""
    return {m.name: m.revision for m in METRICS if m.revision != 1}


def _check(specs: tuple[MetricSpec, ...]) -> None:
    """Refuse a declaration that cannot work: run at import, so a slip fails every test, not one report."""
    names = [m.name for m in specs]
    computed = {m.name for m in specs if m.compute is not None}
    if len(set(names)) != len(names):
        raise ValueError(f"metrics.specs: a metric is declared twice in {names}")
    for m in specs:
        if (m.compute is None) == (not m.source):
            raise ValueError(f"metrics.specs: {m.name} needs exactly one of compute and source")
        if m.source and m.source not in computed:
            raise ValueError(f"metrics.specs: {m.name} reads {m.source}, which no declaration computes")
        if m.over_repeats is None and (m.section or m.spread is not None or m.grid or m.latency or m.html_latency):
            raise ValueError(f"metrics.specs: {m.name} is a window figure only (over_repeats None) but is shown")
        if m.over_repeats is None and (m.slo or m.compare):
            raise ValueError(f"metrics.specs: {m.name} is a window figure only but is an SLO or comparison figure")
        if m.csv_range and m.spread is None:
            raise ValueError(f"metrics.specs: {m.name} has CSV min/max columns, read from `spread`, but no spread")
        if m.latency is not None and m.latency.then is not None and m.latency.then not in names:
            raise ValueError(f"metrics.specs: {m.name}'s latency column shows {m.latency.then}, which is not declared")
        if m.revision < 1:
            raise ValueError(f"metrics.specs: {m.name} has revision {m.revision}; fix: revisions start at 1")
    for view, keys in (
        ("spread", [m.spread for m in specs if m.spread is not None]),
        ("latency", [m.latency.position for m in specs if m.latency is not None]),
        ("SLO key", [m.slo.key for m in specs if m.slo is not None]),
        ("comparison name", [m.compare for m in specs if m.compare is not None]),
    ):
        if len(set(keys)) != len(keys):
            raise ValueError(f"metrics.specs: two metrics share a {view}: {keys}")


_check(METRICS)


__all__ = [
    "ADDED_METRICS",
    "CELL_METRICS",
    "METRICS",
    "compared",
    "declared_in",
    "html_latency_columns",
    "in_section",
    "latency_columns",
    "metric_revisions",
    "slo_uses",
    "spread_metrics",
]
