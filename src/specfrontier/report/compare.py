"""Rendering of a run comparison (terminal and Markdown share these tables)."""

from __future__ import annotations

from specfrontier.analysis.compare import Comparison, figure_deltas
from specfrontier.analysis.deploy import deploy_text
from specfrontier.analysis.summary import OverRepeats
from specfrontier.report.table_model import Table


def _num(value: float | None, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def comparison_tables(cmp: Comparison) -> list[Table]:
    a, b = cmp.a.run.run_id, cmp.b.run.run_id
    recs = Table(
        f"Recommendation per concurrency: A = {a} vs B = {b}",
        ["C", "best in A", "best in B", "changed"],
        [[str(r.concurrency), r.best_a, r.best_b, "yes" if r.changed else "no"] for r in cmp.recommendations],
        ["best = highest median aggregate tok/s, a tie within the spread over the baseline going to the baseline."],
    )
    accept = Table(
        "Acceptance: A vs B",
        ["setting", "length A", "length B", "rate A", "rate B"],
        [
            [d.setting, _num(d.length_a, ".2f"), _num(d.length_b, ".2f"), _num(d.rate_a, ".1%"), _num(d.rate_b, ".1%")]
            for d in cmp.acceptance
        ],
        ["length = 1 + accepted drafts / verification steps; rate = accepted / drafted; pooled over windows."],
    )
    cells = Table(
        "Aggregate tok/s: A vs B",
        ["setting", "C", "A", "B", "B / A", "beyond spread"],
        [
            [
                d.setting,
                str(d.concurrency),
                f"{d.aggregate_a:.1f}",
                f"{d.aggregate_b:.1f}",
                f"{d.ratio:.2f}x",
                "yes" if d.beyond_spread else "no",
            ]
            for d in cmp.cells
        ],
        ["medians over repeats; beyond spread = the two runs' ranges over repeats do not overlap."],
    )
    return [recs, accept, cells, *delta_tables(cmp)]


def _with_range(fig: OverRepeats, digits: int) -> str:
    if fig.median is None:
        return "-"
    text = f"{fig.median:.{digits}f}"
    if fig.n > 1 and fig.low is not None and fig.high is not None:
        text += f" [{fig.low:.{digits}f}-{fig.high:.{digits}f}]"
    return text


def delta_tables(cmp: Comparison) -> list[Table]:
    """Per-user speed and first-token latency per shared cell, with each run's range and significance."""
    out = []
    for metric, digits in (("per-request tok/s p50", 1), ("TTFT p50 ms", 0)):
        rows = []
        for d in figure_deltas(cmp.a, cmp.b, metric):
            ratio = d.ratio
            rows.append(
                [
                    d.setting,
                    f"{d.level:g}",
                    _with_range(d.a, digits),
                    _with_range(d.b, digits),
                    "-" if ratio is None else f"{ratio:.2f}x",
                    "yes" if d.significant else "no",
                ]
            )
        if rows:
            out.append(
                Table(
                    f"{metric}: A vs B",
                    ["setting", "C", "A median [min-max]", "B median [min-max]", "B / A", "significant"],
                    rows,
                    [
                        "median over repeats [lowest-highest repeat]; significant = beyond the noise: the 95% "
                        "bootstrap intervals of the two medians do not overlap and the medians differ by more "
                        "than 1% (the rule the report uses between settings); one repeat is never significant."
                    ],
                )
            )
    return out


def comparison_summary(cmp: Comparison) -> list[str]:
    """Plain sentences: whether and where the recommendation moves, and how much speed-up survives."""
    lines = []
    moved = [r for r in cmp.recommendations if r.changed]
    if moved:
        lines += [f"at C={r.concurrency} the best setting moves from {r.best_a} to {r.best_b}" for r in moved]
    else:
        lines.append("the best setting is the same at every shared concurrency")
    base_a, base_b = cmp.a.baseline, cmp.b.baseline
    for r in cmp.recommendations:
        if r.best_a == base_a or base_a is None or base_b is None:
            continue
        ga = _gain(cmp, r.best_a, base_a, r.concurrency, "a")
        gb = _gain(cmp, r.best_a, base_b, r.concurrency, "b")
        if ga is not None and gb is not None:
            lines.append(
                f"at C={r.concurrency}, {r.best_a}'s speed-up over no speculation is {ga:.2f}x in A, {gb:.2f}x in B"
            )
    return lines


def comparison_commands(cmp: Comparison) -> list[tuple[str, str, str]]:
    """(headline, command to deploy, what it leaves out as measurement-only) for each setting best in B (the
    later run) at some shared level, drawn from B's store by its engine's rule like every recommendation."""
    levels: dict[str, list[str]] = {}
    for r in cmp.recommendations:
        if r.best_b:
            levels.setdefault(r.best_b, []).append(str(r.concurrency))
    out = []
    for name, at in levels.items():
        command, note = deploy_text(cmp.b, name)
        out.append((f"B's best at C = {', '.join(at)}: {name}", command, note))
    return out


def _gain(cmp: Comparison, setting: str, baseline: str, c: float, which: str) -> float | None:
    data = cmp.a if which == "a" else cmp.b
    cell, base = data.cell(setting, c), data.cell(baseline, c)
    if cell is None or base is None or not base.aggregate_tok_s.median or cell.aggregate_tok_s.median is None:
        return None
    return cell.aggregate_tok_s.median / base.aggregate_tok_s.median


__all__ = ["comparison_commands", "comparison_summary", "comparison_tables", "delta_tables"]
