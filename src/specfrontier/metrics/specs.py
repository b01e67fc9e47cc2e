"""Every per-cell metric declared once: what it is, its unit, how a cell gets it, and where it is shown.

Why: a metric used to be listed by hand in four places (the summary over repeats, the JSON model and its
builder, the CSV spread columns, the latency table), so adding one meant four edits that could disagree.
Here each metric is one `MetricSpec`; `analysis.summary` builds `CellSummary` from the list and the
reports lay out their fields, columns and notes from it. Its computation over one window stays in
`metrics/window.py` (the `CellMetrics` field named by `source`); docs/metrics.md has the long definitions.

The order of `CELL_METRICS` is the order of the JSON report's cell fields and the CSV columns within each
`section`; views with an order of their own (the JSON `spread` object, the latency table) say it with a
position. Changing an existing entry changes a public shape: tests pin the field and column lists.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Literal

from specfrontier.metrics.window import CellMetrics

OverRepeats = Literal["median", "sum"]
"""How repeats combine: "median" makes an `analysis.summary.OverRepeats` (median, range, MAD, bootstrap
interval) of the per-window values; "sum" adds integer counts over the repeats."""

Section = Literal["headline", "counts", "detail"]
"""Where a metric stands in a JSON cell (and the CSV row made from it). The cell's other facts sit
between the sections: setting ... complete, *headline*, acceptance ... capacity, *counts*, noisy ...
client_health, *detail*, goodput, spread."""

SECTIONS: tuple[Section, ...] = ("headline", "counts", "detail")


@dataclass(frozen=True, slots=True)
class Grid:
    """A seed-style table of the metric: one row per level, one column per setting (`report.tables`)."""

    title: str
    note: str
    """The definition printed under the table."""


@dataclass(frozen=True, slots=True)
class LatencyColumn:
    """A column of the "Latency and burstiness per cell" table (`report.metric_tables`)."""

    position: int
    """Columns are laid out by this number (after the level and setting columns)."""
    header: str
    digits: int
    then: str | None = None
    """A second metric shown after " / " in the same cell (the p99 beside a p50)."""
    note: str = ""
    """Its definition, joined into the table's note ("" when the shared note covers it)."""


@dataclass(frozen=True, slots=True)
class MetricSpec:
    """One per-cell metric. `name` is its `CellSummary` attribute and its JSON field and CSV column."""

    name: str
    unit: str
    definition: str
    """One line, as the JSON schema's field description."""
    source: str = ""
    """The `CellMetrics` field of one window it comes from ("": the same as `name`)."""
    over_repeats: OverRepeats = "median"
    section: Section | None = None
    """Where the JSON cell and the CSV row carry it (None: in `CellSummary` only)."""
    csv_range: bool = False
    """The CSV adds `<name>_min` and `<name>_max` (lowest and highest repeat)."""
    spread: int | None = None
    """Position in the JSON cell's `spread` object (median, range, MAD, interval); None: not there."""
    grid: Grid | None = None
    latency: LatencyColumn | None = None
    html_latency: str | None = None
    """Column header in the HTML report's "Latency percentiles" table, in declaration order."""

    @property
    def field(self) -> str:
        """The `CellMetrics` field read per window."""
        return self.source or self.name

    def window_value(self, window: CellMetrics) -> float | None:
        """This metric's value in one window (one repeat)."""
        value: float | None = getattr(window, self.field)
        return value


CELL_METRICS: tuple[MetricSpec, ...] = (
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
    ),
    MetricSpec(
        "per_request_tok_s_p10", "tok/s", "Median over repeats of the p10 per-request tok/s.", section="headline"
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
    ),
    MetricSpec("ttft_p90_ms", "ms", "Median over repeats of p90 TTFT (ms).", html_latency="TTFT p90"),
    MetricSpec(
        "ttft_p99_ms", "ms", "Median over repeats of p99 TTFT (ms).", section="headline", html_latency="TTFT p99"
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
    ),
    MetricSpec("tpot_p90_ms", "ms", "Median over repeats of p90 TPOT (ms).", html_latency="TPOT p90"),
    MetricSpec(
        "achieved_concurrency", "requests", "Median over repeats of mean requests in flight.", section="headline"
    ),
    MetricSpec(
        "window_tok_s",
        "tok/s",
        "Median over repeats of output tok/s over the whole window (first send to last end, ramp and drain included).",
        section="headline",
    ),
    MetricSpec(
        "steady_tok_s",
        "tok/s",
        "Closed loop: median over repeats of output tok/s over the steady span (C in flight; ramp and drain excluded).",
        section="headline",
    ),
    MetricSpec(
        "steady_concurrency",
        "requests",
        "Closed loop: median over repeats of mean requests in flight inside the steady span.",
        section="headline",
    ),
    MetricSpec(
        "steady_s", "s", "Closed loop: median over repeats of the steady span's length (s).", section="headline"
    ),
    MetricSpec("requests", "requests", "Requests over all repeats.", over_repeats="sum", section="counts"),
    MetricSpec("errors", "requests", "Failed requests over all repeats.", over_repeats="sum", section="counts"),
    MetricSpec("tpot_p99_ms", "ms", "Median over repeats of p99 TPOT (ms).", section="detail"),
    MetricSpec(
        "e2e_p50_ms",
        "ms",
        "Median over repeats of p50 end-to-end latency (ms).",
        section="detail",
        spread=5,
        latency=LatencyColumn(6, "E2E ms p50/p99", 0, then="e2e_p99_ms"),
    ),
    MetricSpec("e2e_p99_ms", "ms", "Median over repeats of p99 end-to-end latency (ms).", section="detail"),
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
    ),
    MetricSpec("itl_p99_ms", "ms", "Median over repeats of p99 per-token ITL (ms).", section="detail"),
    MetricSpec(
        "itl_estimated_requests",
        "requests",
        "Requests without streamed per-chunk token counts: ITL split assumed (1 token first, even rest).",
        over_repeats="sum",
        section="detail",
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
    ),
    MetricSpec("chunk_gap_p99_ms", "ms", "Median over repeats of p99 raw inter-chunk gap (ms).", section="detail"),
    MetricSpec(
        "tokens_per_chunk_mean",
        "tokens",
        "Median over repeats of output tokens / content chunks.",
        section="detail",
        latency=LatencyColumn(5, "tok/chunk", 2, note="tok/chunk = output tokens / content chunks"),
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
    ),
)


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


def _check(specs: tuple[MetricSpec, ...]) -> None:
    """Refuse a declaration that cannot work: run at import, so a slip fails every test, not one report."""
    window = {f.name for f in fields(CellMetrics)}
    names = [m.name for m in specs]
    if len(set(names)) != len(names):
        raise ValueError(f"metric_specs: a metric is declared twice in {names}")
    for m in specs:
        if m.field not in window:
            raise ValueError(f"metric_specs: {m.name} reads CellMetrics.{m.field}, which does not exist")
        if m.csv_range and m.spread is None:
            raise ValueError(f"metric_specs: {m.name} has CSV min/max columns, read from `spread`, but no spread")
        if m.latency is not None and m.latency.then is not None and m.latency.then not in names:
            raise ValueError(f"metric_specs: {m.name}'s latency column shows {m.latency.then}, which is not declared")
    for view, positions in (
        ("spread", [m.spread for m in specs if m.spread is not None]),
        ("latency", [m.latency.position for m in specs if m.latency is not None]),
    ):
        if len(set(positions)) != len(positions):
            raise ValueError(f"metric_specs: two metrics share a {view} position: {sorted(positions)}")


_check(CELL_METRICS)


__all__ = [
    "CELL_METRICS",
    "SECTIONS",
    "Grid",
    "LatencyColumn",
    "MetricSpec",
    "OverRepeats",
    "Section",
    "html_latency_columns",
    "in_section",
    "latency_columns",
    "spread_metrics",
]
