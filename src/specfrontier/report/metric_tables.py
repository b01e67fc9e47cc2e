"""Report pieces for the detailed metrics: latency and burstiness per cell, goodput under SLOs, and the
acceptance-source warnings. Kept apart from `tables.py` (shared by every report) so each stays small.

Every table states its definitions in its notes (docs/metrics.md has the long form).
"""

from __future__ import annotations

from specfrontier.analysis.summary import CellSummary, Figure, RunData
from specfrontier.report.tables import Table
from specfrontier.slo import slo_text


def _v(fig: Figure, digits: int = 1) -> str:
    return "-" if fig.median is None else f"{fig.median:.{digits}f}"


def _pair(a: Figure, b: Figure, digits: int = 1) -> str:
    return f"{_v(a, digits)} / {_v(b, digits)}"


def _cells_in_order(data: RunData) -> list[CellSummary]:
    order = {name: i for i, name in enumerate(data.measured_settings())}
    return sorted(data.cells, key=lambda c: (c.level, order.get(c.setting, len(order))))


def latency_table(data: RunData) -> Table:
    """Per cell: TTFT, TPOT, per-token ITL, inter-chunk gap, tokens per chunk, E2E, output / E2E."""
    rows = []
    estimated = 0
    for c in _cells_in_order(data):
        estimated += c.itl_estimated_requests
        rows.append(
            [
                str(c.level),
                c.setting,
                _pair(c.ttft_p50_ms, c.ttft_p99_ms, 0),
                _pair(c.tpot_p50_ms, c.tpot_p99_ms),
                _pair(c.itl_p50_ms, c.itl_p99_ms),
                _pair(c.chunk_gap_p50_ms, c.chunk_gap_p99_ms),
                _v(c.tokens_per_chunk_mean, 2),
                _pair(c.e2e_p50_ms, c.e2e_p99_ms, 0),
                _v(c.e2e_tok_s_p50),
            ]
        )
    notes = [
        "p50 / p99 over each repeat's requests, then the median over repeats. TPOT = (E2E - TTFT) / (tokens - 1); "
        "ITL = per token: each gap between content chunks split evenly over the tokens the later chunk carries "
        "(token-weighted percentiles); chunk gap = raw time between content chunks (burstiness; grows with "
        "tokens per chunk under speculation); tok/chunk = output tokens / content chunks; out/E2E = completion "
        "tokens / E2E per request (per-user speed including the wait for the first token). docs/metrics.md."
    ]
    if estimated:
        notes.append(
            f"{estimated} requests did not stream per-chunk token counts: their ITL assumes 1 token in the first "
            "chunk and an even split over the rest."
        )
    return Table(
        "Latency and burstiness per cell",
        [
            data.level_header,
            "setting",
            "TTFT ms p50/p99",
            "TPOT ms p50/p99",
            "ITL ms p50/p99",
            "chunk gap ms p50/p99",
            "tok/chunk",
            "E2E ms p50/p99",
            "out/E2E tok/s p50",
        ],
        rows,
        notes,
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


__all__ = ["CUMULATIVE_MARK", "acceptance_flag_lines", "goodput_table", "latency_table"]
