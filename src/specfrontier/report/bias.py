"""Report sections for workloads: the optimism-bias table and the correctness gate, format-neutral.

Terminal, Markdown and HTML draw these `Table`s and lines like the other sections; `bias_json` and
`gate_json` give the same content to the JSON report.
"""

from __future__ import annotations

from typing import Any

from specfrontier.analysis.bias import OptimismBias, optimism_bias
from specfrontier.analysis.gate import MIN_DIVERGED_PROMPTS, GateResult
from specfrontier.analysis.summary import RunData
from specfrontier.report.table_model import Table, percent_1dp


def _x(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}x"


def bias_table(data: RunData, bias: OptimismBias | None = None) -> Table | None:
    bias = bias or optimism_bias(data)
    if bias is None or not bias.settings:
        return None
    levels = sorted({lv.level for row in bias.settings for lv in row.levels})
    headers = ["setting", "workload", "accept rate", "best case", "kept"]
    headers += [f"speed-up {data.level_text(lv)}" for lv in levels]
    rows = []
    for row in bias.settings:
        by_level = {lv.level: lv for lv in row.levels}
        rates = (row.acceptance_rate, row.best_case_acceptance_rate, row.acceptance_kept)
        cells = [row.setting, row.workload, *map(percent_1dp, rates)]
        for lv in levels:
            b = by_level.get(lv)
            if b is None or b.speedup is None:
                cells.append("-")
                continue
            kept = b.gain_kept
            tail = f" ({kept:.0%} of gain)" if kept is not None else " (no best-case gain)"
            if row.best_case_acceptance_rate is None:
                tail = " (drafted nothing in the best case)"
            cells.append(f"{_x(b.speedup)} vs {_x(b.best_case_speedup)}{tail}")
        rows.append(cells)
    stand_in = (
        ""
        if bias.best_case_is_synthetic
        else " (no synthetic-greedy workload was measured: the highest-acceptance workload stands in)"
    )
    return Table(
        f"Optimism bias: best case {bias.best_case} vs production workloads{stand_in}",
        headers,
        rows,
        [
            "accept rate = accepted / drafted tokens pooled over the workload's measured windows; best case = the "
            "same for the best-case workload; kept = accept rate / best case.",
            "speed-up = the setting's median aggregate tok/s / the baseline's on the same workload and level; "
            "'x vs y' = production vs best case; '% of gain' = (x - 1) / (y - 1), shown only where the best "
            "case beat the baseline beyond the spread of repeats (a setting that drafted nothing in the best case "
            "ran like the baseline: its speed-up there is run-to-run noise).",
        ],
    )


def best_change_lines(data: RunData, bias: OptimismBias | None = None) -> list[str]:
    """Whether the recommended setting per level changes from the best case to each workload."""
    bias = bias or optimism_bias(data)
    if bias is None:
        return []
    lines = []
    for b in bias.best:
        verdict = "CHANGES" if b.changed else "unchanged"
        lines.append(
            f"{b.workload} {data.level_text(b.level)}: {b.workload_setting} "
            f"(best case {bias.best_case}: {b.best_case_setting}) - {verdict}"
        )
    return lines


def gate_table(data: RunData) -> Table | None:
    if not data.gate:
        return None
    rows = []
    for g in data.gate:
        example = "-"
        if g.examples:
            e = g.examples[0]
            example = f"{e.prompt_id} {data.level_text(e.level)} @char {e.first_diff_char}: {e.setting_excerpt!r}"
        verdict = "UNSAFE" if g.unsafe else "ok"
        rows.append(
            [
                g.setting,
                g.workload,
                f"{g.diverged}/{g.compared} ({g.diverged_prompts} prompts)",
                percent_1dp(g.divergence_rate),
                percent_1dp(g.baseline_rate),
                verdict,
                example,
            ]
        )
    tolerance = data.gate[0].tolerance
    if data.unsafe:
        effect = (
            "unsafe settings are still recommended (allow_unsafe: true)"
            if data.allow_unsafe
            else "unsafe settings are left out of the recommendations (set allow_unsafe: true to include them)"
        )
    else:
        effect = "no setting exceeded the tolerance"
    return Table(
        "Correctness gate (temperature 0: speculative outputs vs the baseline's)",
        ["setting", "workload", "differ", "rate", "baseline self", "verdict", "first difference"],
        rows,
        [
            "differ = requests whose output text matches none of the baseline's outputs for the same prompt and "
            "workload (any level, any repeat); baseline self = the baseline's requests that differ from its own "
            "most common output at that level (the noise floor of batch-shape numerics).",
            f"unsafe = rate > divergence_tolerance = {tolerance:.0%} + baseline self (the noise floor) and at least "
            f"{MIN_DIVERGED_PROMPTS} distinct "
            "prompts differ (engines do not promise bit-exact greedy outputs across batch shapes, and one prompt "
            f"may be a near-tie; a broken setting differs on most prompts); {effect}.",
        ],
    )


def turns_table(data: RunData) -> Table | None:
    """Agentic session replay: latency and acceptance per turn as the context grows."""
    if not data.turns:
        return None
    rows = [
        [
            t.setting,
            t.workload,
            data.level_text(t.level),
            str(t.turn),
            str(t.requests),
            "-" if t.context_tokens_p50 is None else f"{t.context_tokens_p50:.0f}",
            "-" if t.ttft_p50_ms is None else f"{t.ttft_p50_ms:.0f}",
            "-" if t.e2e_p50_ms is None else f"{t.e2e_p50_ms:.0f}",
            percent_1dp(t.acceptance_rate),
        ]
        for t in data.turns
    ]
    return Table(
        "Agentic sessions: per turn (context grows turn by turn)",
        ["setting", "workload", "level", "turn", "requests", "context tok p50", "TTFT p50 ms", "e2e p50 ms", "accept"],
        rows,
        [
            "level = sessions in flight; turn t sends the recorded conversation up to its t-th user message; "
            "context tok = server-reported prompt tokens; TTFT and e2e p50 over the turn's requests in all "
            "repeats; accept = accepted / drafted tokens from the requests' own speculative counts."
        ],
    )


def workload_tables(data: RunData) -> list[Table]:
    """The run-wide workload sections as tables: optimism bias (multi-workload runs), the gate, session turns."""
    return [t for t in (bias_table(data), gate_table(data), turns_table(data)) if t is not None]


def bias_json(data: RunData) -> dict[str, Any] | None:
    bias = optimism_bias(data)
    if bias is None:
        return None
    return {
        "best_case": bias.best_case,
        "best_case_is_synthetic": bias.best_case_is_synthetic,
        "settings": [
            {
                "setting": r.setting,
                "workload": r.workload,
                "acceptance_rate": r.acceptance_rate,
                "best_case_acceptance_rate": r.best_case_acceptance_rate,
                "acceptance_kept": r.acceptance_kept,
                "levels": [
                    {
                        "level": lv.level,
                        "speedup": lv.speedup,
                        "best_case_speedup": lv.best_case_speedup,
                        "gain_kept": lv.gain_kept,
                    }
                    for lv in r.levels
                ],
            }
            for r in bias.settings
        ],
        "best_setting": [
            {
                "workload": b.workload,
                "level": b.level,
                "setting": b.workload_setting,
                "best_case_setting": b.best_case_setting,
                "changed": b.changed,
            }
            for b in bias.best
        ],
    }


def _gate_entry(g: GateResult) -> dict[str, Any]:
    return {
        "setting": g.setting,
        "workload": g.workload,
        "compared": g.compared,
        "diverged": g.diverged,
        "diverged_prompts": g.diverged_prompts,
        "divergence_rate": g.divergence_rate,
        "baseline_compared": g.baseline_compared,
        "baseline_diverged": g.baseline_diverged,
        "tolerance": g.tolerance,
        "threshold": g.threshold,
        "unsafe": g.unsafe,
        "examples": [
            {
                "prompt_id": e.prompt_id,
                "level": e.level,
                "first_diff_char": e.first_diff_char,
                "baseline": e.baseline_excerpt,
                "setting": e.setting_excerpt,
            }
            for e in g.examples
        ],
    }


def turns_json(data: RunData) -> list[dict[str, Any]]:
    return [
        {
            "setting": t.setting,
            "workload": t.workload,
            "level": t.level,
            "turn": t.turn,
            "requests": t.requests,
            "context_tokens_p50": t.context_tokens_p50,
            "ttft_p50_ms": t.ttft_p50_ms,
            "e2e_p50_ms": t.e2e_p50_ms,
            "drafted": t.drafted,
            "accepted": t.accepted,
            "acceptance_rate": t.acceptance_rate,
        }
        for t in data.turns
    ]


def gate_json(data: RunData) -> dict[str, Any]:
    return {
        "allow_unsafe": data.allow_unsafe,
        "unsafe": sorted(data.unsafe),
        "results": [_gate_entry(g) for g in data.gate],
    }


__all__ = [
    "best_change_lines",
    "bias_json",
    "bias_table",
    "gate_json",
    "gate_table",
    "turns_json",
    "turns_table",
    "workload_tables",
]
