"""Report pieces for the detailed metrics: latency and burstiness per cell, goodput under SLOs, and the
acceptance-source warnings. Kept apart from `tables.py` (which lists every table and imports these) so
each stays small; the latency table's columns and notes are declared per metric in `metrics.specs`.

Every table states its definitions in its notes (docs/metrics.md has the long form).
"""

from __future__ import annotations

from specfrontier.analysis.summary import CellSummary, OverRepeats, RunData
from specfrontier.metrics.declare import LatencyColumn
from specfrontier.metrics.slo import slo_text
from specfrontier.metrics.specs import latency_columns
from specfrontier.report.table_model import Table

LATENCY_NOTE_HEAD = "p50 / p99 over each repeat's requests, then the median over repeats."


def _v(fig: OverRepeats, digits: int = 1) -> str:
    return "-" if fig.median is None else f"{fig.median:.{digits}f}"


def _pair(a: OverRepeats, b: OverRepeats, digits: int = 1) -> str:
    return f"{_v(a, digits)} / {_v(b, digits)}"


def _cells_in_order(data: RunData) -> list[CellSummary]:
    order = {name: i for i, name in enumerate(data.measured_settings())}
    return sorted(data.cells, key=lambda c: (c.level, order.get(c.setting, len(order))))


def _latency_cell(c: CellSummary, name: str, column: LatencyColumn) -> str:
    """One latency-table cell: the metric's median, with its declared partner after " / "."""
    if column.then is None:
        return _v(c.figure(name), column.digits)
    return _pair(c.figure(name), c.figure(column.then), column.digits)


def latency_table(data: RunData) -> Table:
    """Per cell: TTFT, TPOT, per-token ITL, inter-chunk gap, tokens per chunk, E2E, output / E2E (the
    columns `metrics.specs` declares with `latency`)."""
    columns = latency_columns()
    rows = []
    estimated = 0
    for c in _cells_in_order(data):
        estimated += c.itl_estimated_requests
        rows.append([str(c.level), c.setting, *(_latency_cell(c, name, column) for name, column in columns)])
    definitions = "; ".join(column.note for _, column in columns if column.note)
    notes = [f"{LATENCY_NOTE_HEAD} {definitions}. docs/metrics.md."]
    if estimated:
        notes.append(
            f"{estimated} requests did not stream per-chunk token counts: their ITL assumes 1 token in the first "
            "chunk and an even split over the rest."
        )
    headers = [column.header for _, column in columns]
    return Table("Latency and burstiness per cell", [data.level_header, "setting", *headers], rows, notes)


def steady_table(data: RunData) -> Table | None:
    """Closed loop, per cell: the steady-state rate the decisions use beside the whole-window rate, and how
    many requests were in flight in each (None for an open-loop run, which has no steady span)."""
    if data.open_loop:
        return None
    rows = []
    for c in _cells_in_order(data):
        steady, window = c.steady_tok_s.median, c.window_tok_s.median
        gap = "-" if steady is None or not window else f"{steady / window - 1:+.1%}"
        inside = _v(c.steady_concurrency, 2) + (" s" if c.steady_too_short else "")
        rows.append(
            [
                str(c.level),
                c.setting,
                _v(c.steady_tok_s),
                _v(c.window_tok_s),
                gap,
                inside,
                _v(c.achieved_concurrency, 2),
                _v(c.steady_s, 2),
            ]
        )
    return Table(
        "Steady state vs whole window",
        [
            data.level_header,
            "setting",
            "steady tok/s",
            "window tok/s",
            "steady/window",
            "in flight: steady",
            "window",
            "steady span s",
        ],
        rows,
        [
            "steady tok/s = output tokens produced while C requests were in flight (from when the first C sent "
            "have all been replaced to the first end after the last send; ramp-up and drain excluded) / that span: the "
            "aggregate tok/s every decision uses. window tok/s = output tokens / (first send to last end), ramp "
            "and drain included. in flight = mean requests in flight inside each span. Medians over repeats. "
            "'s': no steady state to measure (C > 1: a span under 1 s or 4 request lifetimes (median E2E), or "
            "< 95% of C in flight inside it): not used for recommendations. At C = 1 the span is the whole "
            "window. docs/metrics.md.",
        ],
    )


def cell_length_table(data: RunData) -> Table | None:
    """Closed loop, per cell: how long it ran (its window) and how long it kept sending, and why (the
    sizing stored with each repeat, `runs.pacing.CellSize`); None for a run stored without it, or open loop."""
    if data.open_loop or not any(f.get("sized_by") for c in data.cells for f in c.load):
        return None
    rows = []
    for c in _cells_in_order(data):
        sized = [f for f in c.load if f.get("sized_by")]
        last = sized[-1] if sized else {}
        window = OverRepeats.of([f.get("window_s") for f in sized])
        spread = f" ({window.low:.1f}-{window.high:.1f})" if window.n > 1 and window.low != window.high else ""
        send = last.get("send_s")
        rows.append(
            [
                str(c.level),
                c.setting,
                f"{_v(window)}{spread}",
                "-" if not isinstance(send, int | float) else f"{send:.1f}",
                str(last.get("sized_by", "-")),
            ]
        )
    return Table(
        "How long each cell ran",
        [data.level_header, "setting", "window s", "sent for s", "why (last repeat)"],
        rows,
        [
            "window = first send to last end, median over repeats (lowest-highest); sent for = how long the cell "
            "kept sending whole passes over the prompts (server seconds; at least rounds x C requests in any "
            "case; '-': the request count alone); why = how that length was chosen for the cell's last repeat: "
            "with cell_lifetimes (tune) / --cell-lifetimes (bench) a number of measured request lifetimes, so "
            "every level has the 4 lifetimes of steady state the evidence rule asks for (the first cells of a "
            "run are sized from the warmup, and in tune the first request). docs/metrics.md.",
        ],
    )


def goodput_table(data: RunData) -> Table | None:
    """Per cell under the report's SLOs: goodput (req/s, tok/s), good fraction, each SLO's percentile."""
    if not data.slos:
        return None
    rows = []
    for c in _cells_in_order(data):
        g = c.goodput
        if g is None:
            continue
        checks = []
        for slo in data.slos:
            observed = g.observed(slo.key)
            met = all(ch.met for w in g.windows for ch in w.checks if ch.slo.key == slo.key)
            checks.append(
                ("inf" if observed.median is None else f"{observed.median:.1f}") + (" ok" if met else " MISS")
            )
        rows.append(
            [
                str(c.level),
                c.setting,
                _v(g.goodput_req_s, 2),
                _v(g.goodput_tok_s),
                "-" if g.good_fraction.median is None else f"{g.good_fraction.median:.0%}",
                *checks,
                "yes" if g.slo_met else "no",
            ]
        )
    return Table(
        f"Goodput under SLOs ({slo_text(data.slos)})",
        [
            data.level_header,
            "setting",
            "goodput req/s",
            "goodput tok/s",
            "good",
            *[f"{s.metric.upper()} p{s.percentile:g} ms" for s in data.slos],
            "all SLOs met",
        ],
        rows,
        [
            "per request: a request is good when it succeeded and its own TTFT / TPOT / E2E are within every "
            "threshold (no TPOT, i.e. < 2 tokens, passes the TPOT one); goodput = good requests (or their "
            "completion tokens) / window; good = good / all requests, errors counted as misses. Medians over "
            "repeats.",
            "per cell: the SLO's percentile over all requests with failed ones as infinitely slow ('inf'); ok "
            "only when every repeat is within the threshold; 'all SLOs met' = every SLO ok.",
        ],
    )


CUMULATIVE_MARK = "cumulative"
"""An `acceptance_source` containing this word is a lifetime figure, not the measured window's."""


def acceptance_flag_lines(data: RunData) -> list[str]:
    """Speculative settings whose acceptance is not this window's: cumulative only, or none at all."""
    lines = []
    speculative = {s.name for s in data.settings if s.speculative}
    for name in data.measured_settings():
        if name not in speculative:
            continue
        cells = [c for c in data.cells if c.setting == name]
        cumulative = sorted(
            {data.level_text(c.level) for c in cells if c.acceptance_source and CUMULATIVE_MARK in c.acceptance_source}
        )
        missing = sorted({data.level_text(c.level) for c in cells if not c.acceptance_source})
        if cumulative:
            lines.append(
                f"{name} at {', '.join(cumulative)}: acceptance is the engine's cumulative figure (since startup, "
                "incl. warmup and other traffic), not this window's; treat it as approximate"
            )
        if missing:
            lines.append(
                f"{name} at {', '.join(missing)}: the engine offered no acceptance counts for the measured window"
            )
    return lines


__all__ = ["CUMULATIVE_MARK", "acceptance_flag_lines", "goodput_table", "latency_table", "steady_table"]
