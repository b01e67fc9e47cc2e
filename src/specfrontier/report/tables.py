"""The report as format-neutral tables: the terminal and Markdown renderers draw the same content.

Each table states its definitions in its notes, so that no figure appears without saying what it is.
`Table` lives in `table_model` (re-exported here); the per-metric tables come from `metric_tables`, and
which metrics get a grid of their own is declared in `metrics.specs`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from specfrontier.analysis import (
    MIN_STEADY_CONCURRENCY,
    MIN_STEADY_LIFETIMES,
    MIN_STEADY_S,
    CellSummary,
    OverRepeats,
    RunData,
    best_per_concurrency,
    crossovers,
    recommend,
    speedup,
)
from specfrontier.analysis.deploy import deploy_text
from specfrontier.analysis.misconfig import misconfiguration_lines
from specfrontier.analysis.schedule_check import LOSES, schedule_summary_lines, verify_schedules
from specfrontier.analysis.summary import failed_over_bound, percent
from specfrontier.load.health import CPU_LIMIT, LAG_P99_LIMIT_MS
from specfrontier.metrics.specs import CELL_METRICS
from specfrontier.report.metric_tables import (
    acceptance_flag_lines,
    cell_length_table,
    goodput_table,
    latency_table,
    steady_table,
)
from specfrontier.report.table_model import Table
from specfrontier.store import ENGINE_WARNINGS_KEY

SPREAD_NOTE = (
    "Each figure is the median over repeats; ±x% is half the range (max - min) over repeats, relative to "
    "the median. '~' marks a noisy cell (aggregate tok/s MAD over repeats > 10% of the median); '!' marks a "
    "cell whose achieved concurrency fell below 80% of the requested one (queueing or a capacity limit); "
    "'s' marks a closed-loop cell without a steady state to measure (see the flags): not used for "
    "recommendations."
)


CLIENT_SATURATED_NOTE = (
    "'c' marks a cell whose client was saturated in some repeat (event-loop lag p99 > "
    f"{LAG_P99_LIMIT_MS:g} ms or client CPU > {CPU_LIMIT:.0%} of a core): its TTFT and ITL may carry the client's "
    "lag; where the lag also exceeded max_client_lag_share of the request lifetime, or the CPU the limit, the "
    "client could not keep up (the server saw fewer than C) and the cell is not evidence (see the flags)."
)


OPEN_LOOP_NOTE = (
    "Open loop: rows are target request rates (req/s); requests arrive on a seeded gamma schedule whatever "
    "the server does; requests scheduled in the warmup and cooldown seconds are sent but not measured."
)

SIMULATED_NOTE = (
    "SIMULATED: every figure below is a model prediction of the simulator (virtual time), not a measurement."
)


def _fmt(fig: OverRepeats, digits: int = 1) -> str:
    if fig.median is None:
        return "-"
    spread = fig.relative_spread
    text = f"{fig.median:.{digits}f}"
    if spread is not None and fig.n > 1:
        text += f" ±{spread * 50:.0f}%"
    return text


def _flagged(cell: CellSummary | None, get: Callable[[CellSummary], OverRepeats]) -> str:
    if cell is None:
        return "-"
    text = _fmt(get(cell))
    if cell.noisy:
        text += " ~"
    if cell.client_limited:
        text += " !"
    if cell.client_saturated:
        text += " c"
    if cell.steady_too_short:
        text += " s"
    if cell.errors:
        text += f" ({cell.errors} err)"
    return text


def grid_table(data: RunData, title: str, get: Callable[[CellSummary], OverRepeats], definition: str) -> Table:
    """Seed-style table: rows = concurrency, columns = settings."""
    names = data.measured_settings()
    rows = [[str(c)] + [_flagged(data.cell(n, c), get) for n in names] for c in data.concurrency_levels]
    notes = [definition, SPREAD_NOTE] + ([OPEN_LOOP_NOTE] if data.open_loop else [])
    if any(c.client_saturated for c in data.cells):
        notes.append(CLIENT_SATURATED_NOTE)
    return Table(title, [data.level_header, *names], rows, notes)


def evidence_table(data: RunData) -> Table:
    """The evidence rule's verdict per cell (docs/reliability.md): which cells may decide anything."""
    names = data.measured_settings()

    def verdict(cell: CellSummary | None) -> str:
        if cell is None:
            return "-"
        reasons = data.verdict(cell)
        return "yes" if not reasons else "no: " + "; ".join(reasons)

    rows = [[str(c)] + [verdict(data.cell(n, c)) for n in names] for c in data.concurrency_levels]
    return Table(
        "Evidence per cell",
        [data.level_header, *names],
        rows,
        [
            "yes = the cell is evidence: all the repeats the run asked for are stored, its setting's server did "
            f"not fail, at most {percent(data.max_failed_share)} of its requests failed (max_failed_share), "
            "(closed loop) it had a steady state, and its client kept up (lag p99 within "
            f"{percent(data.max_client_lag_share)} of the request lifetime (max_client_lag_share) or "
            f"{LAG_P99_LIMIT_MS:g} ms, CPU within {CPU_LIMIT:.0%}: "
            "else the server saw fewer than C). Only evidence decides the best setting per level, the "
            "crossovers and the recommendations; the other cells are shown but left out (see the flags)."
        ],
    )


def speedup_table(data: RunData) -> Table | None:
    names = [n for n in data.measured_settings() if n != data.baseline]
    if data.baseline is None or not names:  # nothing measured beside the baseline (`bench --url`): no table
        return None
    rows = []
    for c in data.concurrency_levels:
        row = [str(c)]
        for n in names:
            s = speedup(data, n, c)
            row.append("-" if s is None else f"{s:.2f}x")
        rows.append(row)
    return Table(
        f"Speedup vs baseline ({data.baseline})",
        [data.level_header, *names],
        rows,
        [
            "aggregate tok/s of the setting / aggregate tok/s of the no-speculation baseline at the same C (medians); "
            "'-': either cell missing or not evidence."
        ],
    )


def settings_table(data: RunData) -> Table:
    rows = []
    for s in data.settings:
        pooled = data.pooled_counters(s.name)
        rate = f"{pooled.acceptance_rate:.1%}" if pooled and pooled.acceptance_rate is not None else "-"
        length = f"{pooled.acceptance_length:.2f}" if pooled and pooled.acceptance_length is not None else "-"
        drafted = f"{pooled.accepted_tokens}/{pooled.draft_tokens}" if pooled else "-"
        positions = "-"
        rates = pooled.per_position_rate if pooled else ()
        if rates:
            positions = " ".join(f"{r:.2f}" for r in rates[:4]) + (" ..." if len(rates) > 4 else "")
        rows.append(
            [
                s.name,
                s.status,
                "-" if s.capacity is None else str(s.capacity),
                "-" if s.startup_s is None else f"{s.startup_s:.2f}",
                "-" if s.first_ttft_ms is None else f"{s.first_ttft_ms:.0f}",
                "-" if s.first_e2e_ms is None else f"{s.first_e2e_ms:.0f}",
                rate,
                length,
                drafted,
                positions,
            ]
        )
    sources = sorted({c.acceptance_source for c in data.cells if c.acceptance_source})
    capacity_sources = sorted({s.capacity_source for s in data.settings if s.capacity_source})
    return Table(
        "Settings: capacity, startup, acceptance",
        [
            "setting",
            "status",
            "capacity",
            "startup s",
            "1st TTFT ms",
            "1st e2e ms",
            "accept rate",
            "accept length",
            "accepted/drafted",
            "per position",
        ],
        rows,
        [
            "capacity = max concurrent requests the running server reports"
            + (f" ({'; '.join(capacity_sources)})" if capacity_sources else "")
            + "; startup = seconds from spawn to a 200 from the health endpoint; 1st TTFT / e2e = the very first "
            "request on the freshly launched server, before warmup (cold start; '-' when not launched by us).",
            "accept rate = accepted draft tokens / drafted tokens; accept length = 1 + accepted / verification "
            "steps (tokens per step incl. the bonus token); pooled over every measured window (warmup excluded)"
            + (f"; source: {'; '.join(sources)}" if sources else "")
            + ". per position i = accepted draft tokens at position i / verification steps (first four shown).",
        ],
    )


def best_table(data: RunData) -> Table:
    rows = []
    for b in best_per_concurrency(data.complete_evidence()):
        rows.append(
            [
                str(b.concurrency),
                b.setting,
                f"{b.aggregate_tok_s:.1f}",
                b.runner_up or "-",
                "-" if b.margin is None else f"{b.margin:+.1%}",
                "yes" if b.beyond_spread else "no (tie)",
                "-" if b.speedup_vs_baseline is None else f"{b.speedup_vs_baseline:.2f}x",
            ]
        )
    return Table(
        "Best setting per concurrency",
        [data.level_header, "best", "aggregate tok/s", "runner-up", "margin", "beyond spread", "vs baseline"],
        rows,
        [
            "best = highest median aggregate tok/s at that C; margin = best / runner-up - 1 on medians; "
            "beyond spread = the two bootstrap 95% intervals of the median do not overlap and the margin is over "
            "1% (else a tie; the recommendation then takes the cheapest tied setting). Evidence only (see "
            "'Evidence per cell'): cells missing repeats, settings whose server failed, cells with more failed "
            "requests than max_failed_share, closed-loop cells without a steady state and cells whose client could "
            "not keep up are left out."
        ],
    )


def crossover_lines(data: RunData) -> list[str]:
    lines = []
    for x in crossovers(data.complete_evidence()):
        certainty = "" if x.beyond_spread else " (within the spread of repeats at one end: not certain)"
        lines.append(
            f"{x.winner_low} beats {x.winner_high} up to {data.level_text(x.up_to)}, "
            f"loses from {data.level_text(x.from_c)}{certainty}"
        )
    return lines or ["no crossover: the order of settings is the same at every measured concurrency"]


def recommendation_lines(data: RunData) -> list[tuple[str, str, str]]:
    """(headline, command to deploy, what the command leaves out as measurement-only) per recommendation."""
    out = []
    for r in recommend(data):
        levels = ", ".join(str(c) for c in r.concurrency)
        head = f"{data.level_header} = {levels}: {r.setting} ({r.note})"
        if r.deploy is None:
            out.append((head, *deploy_text(data, r.setting)))
        else:
            out.append((head, r.deploy.text(), r.deploy.note()))
    return out


def flag_lines(data: RunData) -> list[str]:
    lines = []
    for s in data.settings:
        if s.status == "failed":
            lines.append(
                f"setting {s.name} failed: {(s.error or '').splitlines()[0] if s.error else '?'} "
                "(its cells are not used for recommendations)"
            )
    rest = "`bench` run again measures it whole" if "bench" in data.run.config else "`tune --resume` measures the rest"
    for c in data.cells:
        at = data.level_text(c.level)
        want = data.repeats_expected_of(c)
        if c.repeats < want:
            lines.append(
                f"{c.setting} {at}: incomplete, {c.repeats} of {want} repeats stored (not used for recommendations; "
                f"{rest})"
            )
        if c.errors:
            over = failed_over_bound(c.errors, c.requests, data.max_failed_share)
            bound = f" (over max_failed_share = {percent(data.max_failed_share)}: not evidence)" if over else ""
            lines.append(f"{c.setting} {at}: {c.errors} of {c.requests} requests failed{bound}")
        if c.noisy:
            rel = c.aggregate_tok_s.relative_mad or 0.0
            lines.append(f"{c.setting} {at}: noisy (aggregate tok/s MAD over repeats {rel:.0%} of the median)")
        lines += _open_loop_flags(c, at)
        lines += client_flag_lines(data, c, at)
        if c.client_limited:
            lines.append(
                f"{c.setting} C={c.concurrency}: achieved concurrency {c.achieved_concurrency.median:.2f} "
                f"< 80% of {c.concurrency}"
            )
        if c.steady_too_short:
            lines.append(steady_flag_line(c))
    lost = [line for line in schedule_summary_lines(data) if " LOSES " in line or " never run" in line]
    return lines + acceptance_flag_lines(data) + misconfiguration_lines(data) + lost


def steady_flag_line(c: CellSummary) -> str:
    """Why a closed-loop cell has no steady state worth the name, and what fixes it."""
    span, inside = c.steady_s.median, c.steady_concurrency.median
    if span is None or inside is None:
        why = f"never {c.concurrency} requests in flight at once after the first {c.concurrency} sent had been replaced"
    elif span < c.min_steady_s:
        why = f"steady span {span:.2f} s < {c.min_steady_s:.2f} s"
        if c.min_steady_s > MIN_STEADY_S:
            why += f" ({MIN_STEADY_LIFETIMES:g} request lifetimes of {c.min_steady_s / MIN_STEADY_LIFETIMES:.2f} s)"
    else:
        why = f"{inside:.2f} in flight inside the steady span < {MIN_STEADY_CONCURRENCY:.0%} of {c.concurrency}"
    return (
        f"{c.setting} C={c.concurrency}: no steady state to measure ({why}); not used for recommendations. "
        "Fix: raise cell_duration_s (tune) / --cell-duration (bench) or rounds_per_cell"
    )


def _open_loop_flags(c: CellSummary, at: str) -> list[str]:
    """An open-loop cell whose schedule was not kept: the in-flight cap was hit, or sends fell behind."""
    lines = []
    waits = sum(int(f.get("cap_waits") or 0) for f in c.load)
    if waits:
        lines.append(f"{c.setting} {at}: in-flight cap hit {waits} times (the load was not fully open)")
    for f in c.load:
        achieved, scheduled = f.get("achieved_rate"), f.get("scheduled_rate")
        if achieved is not None and scheduled is not None and achieved < 0.9 * scheduled:
            lines.append(
                f"{c.setting} {at}: sends fell behind the schedule ({achieved:.2f} req/s sent, "
                f"{scheduled:.2f} scheduled; send lag p99 {f.get('send_lag_p99_ms', 0.0):.0f} ms)"
            )
            break
    return lines


def client_flag_lines(data: RunData, c: CellSummary, at: str) -> list[str]:
    """A cell whose client was saturated: which repeats and why (lag or CPU over the limits), and whether it
    still kept up (`RunData.client_keep_up`: else the cell is not evidence) with the fix."""
    lines = []
    for repeat, h in enumerate(c.client_health):
        if h.get("saturated"):
            why = "; ".join(h.get("reasons") or []) or "over the client limits"
            lines.append(f"{c.setting} {at} repeat {repeat + 1}: client saturated ({why}): TTFT and ITL may carry it")
    if (lagged := data.client_keep_up(c)) is not None:
        lines.append(
            f"{c.setting} {at}: the client could not keep up ({lagged}): the server saw fewer than "
            f"{c.concurrency} requests, not evidence; fix: fewer processes competing with the client for CPU, "
            "or more client processes (client_workers / --client-workers)"
        )
    return lines


def spike_lines(data: RunData, limit: int = 8) -> list[str]:
    """One line per latency spike: a one-second slice whose p99 exceeds SPIKE_FACTOR x the cell's median."""
    lines = []
    for c in data.cells:
        for repeat, s in c.spikes:
            lines.append(
                f"{c.setting} {data.level_text(c.level)} repeat {repeat + 1}: {s.metric.upper()} p99 "
                f"{s.p99_ms:.0f} ms in second {s.start_s:.0f}-{s.start_s + 1:.0f} of the window "
                f"({s.factor:.1f}x the median {s.cell_median_ms:.0f} ms)"
            )
    if len(lines) > limit:
        lines = [*lines[:limit], f"... and {len(lines) - limit} more (see the JSON report's time slices)"]
    return lines


def _figure_of(name: str) -> Callable[[CellSummary], OverRepeats]:
    return lambda c: c.figure(name)


def schedule_table(data: RunData) -> Table | None:
    """Each measured schedule against the best static setting and no speculation, per level."""
    levels = verify_schedules(data)
    if not levels:
        return None

    def tok(value: float | None) -> str:
        return f"{value:.1f}" if value is not None else "-"

    rows = [
        [
            lv.schedule,
            data.level_text(lv.level),
            tok(lv.schedule_tok_s),
            f"{lv.best_static} {tok(lv.best_static_tok_s)}" if lv.best_static else "-",
            tok(lv.baseline_tok_s),
            f"{lv.vs_best_pct:+.1f} %" if lv.vs_best_pct is not None else "-",
            lv.verdict.upper() if lv.verdict == LOSES else lv.verdict,
        ]
        for lv in levels
    ]
    return Table(
        "Schedule verification (the schedule measured as a setting vs the best static setting)",
        ["schedule", data.level_header, "schedule tok/s", "best static tok/s", "no spec tok/s", "vs best", "verdict"],
        rows,
        [
            "aggregate tok/s, median over repeats (the steady-state figure every decision uses); best static = "
            "the highest of the run's other settings at that level (evidence cells only); loses = the best "
            "static setting is above the schedule beyond the spread of repeats (intervals apart, medians > 1 % "
            "apart), holds otherwise.",
            *schedule_summary_lines(data),
        ],
    )


def all_tables(data: RunData) -> list[Table]:
    """Every table of a one-workload view; the grid tables are those `metrics.specs` declares (`grid`)."""
    tables = [grid_table(data, m.grid.title, _figure_of(m.name), m.grid.note) for m in CELL_METRICS if m.grid]
    sp = speedup_table(data)
    if sp is not None:
        tables.append(sp)
    tables += [settings_table(data), evidence_table(data), best_table(data)]
    schedules = schedule_table(data)
    if schedules is not None:
        tables.append(schedules)
    steady = steady_table(data)
    if steady is not None:
        tables.append(steady)
    length = cell_length_table(data)
    if length is not None:
        tables.append(length)
    tables.append(latency_table(data))
    goodput = goodput_table(data)
    if goodput is not None:
        tables.append(goodput)
    return tables


def engine_warning_lines(environment: dict[str, Any]) -> list[str]:
    """The server logs' warnings about speed (`ENGINE_WARNINGS_KEY`), each once with the settings whose
    launch printed it: the figures below were measured with what these say is missing."""
    entries = environment.get(ENGINE_WARNINGS_KEY)
    if not isinstance(entries, dict):
        return []
    by_text: dict[str, list[str]] = {}
    for setting, warnings in entries.items():
        for text in warnings if isinstance(warnings, list) else ():
            by_text.setdefault(str(text), []).append(str(setting))
    return [f"engine warned ({', '.join(settings)}): {text}" for text, settings in by_text.items()]


__all__ = [
    "CLIENT_SATURATED_NOTE",
    "OPEN_LOOP_NOTE",
    "SIMULATED_NOTE",
    "Table",
    "all_tables",
    "client_flag_lines",
    "crossover_lines",
    "engine_warning_lines",
    "evidence_table",
    "flag_lines",
    "recommendation_lines",
    "schedule_table",
    "spike_lines",
]
