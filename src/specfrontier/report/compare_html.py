"""Two runs compared, as one self-contained HTML page (same rules as report/html.py: no script, strict
CSP, autoescape): the sentences of what changes, a plot of B / A per cell with the significant ones
marked, and the comparison tables the terminal prints."""

from __future__ import annotations

from typing import Any

from specfrontier.analysis.compare import Comparison
from specfrontier.report import plots
from specfrontier.report.compare import comparison_commands, comparison_summary, comparison_tables
from specfrontier.report.html import Plot, render_page
from specfrontier.report.tables import SIMULATED_NOTE


def ratio_plot(cmp: Comparison) -> str | None:
    """B / A of median aggregate tok/s per shared cell; filled bars where the change beats the spread."""
    if not cmp.cells:
        return None
    labels = [f"{d.setting} C={d.concurrency:g}" for d in cmp.cells]
    fig, ax = plots.new_figure(max(1.8, 0.28 * len(labels) + 0.9))
    ys = list(range(len(labels)))
    colors = ["#2da44e" if d.ratio >= 1 else "#cf222e" for d in cmp.cells]
    bars = ax.barh(ys, [d.ratio - 1 for d in cmp.cells], left=1, color=colors)
    for bar, d in zip(bars, cmp.cells, strict=True):
        if not d.beyond_spread:
            bar.set_alpha(0.35)
            bar.set_hatch("//")
    ax.axvline(1.0, color="black", linewidth=1)
    ax.set_yticks(ys)
    ax.set_yticklabels(labels, fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("aggregate tok/s, B / A (median over repeats); hatched: within the spread of repeats")
    return plots.svg_of(fig)


def _run_facts(cmp: Comparison) -> list[tuple[str, dict[str, Any]]]:
    out = []
    for label, data in (("A", cmp.a), ("B", cmp.b)):
        workloads = ", ".join(sorted({c.workload for c in data.cells})) or "-"
        run = data.run
        out.append(
            (label, {"run_id": run.run_id, "engine": run.engine, "workloads": workloads, "created": run.created_at})
        )
    return out


def compare_html(cmp: Comparison) -> str:
    """The comparison page (see the module docstring)."""
    svg = ratio_plot(cmp)
    simulated = [
        f"{label}: {SIMULATED_NOTE}"
        for label, data in (("A", cmp.a), ("B", cmp.b))
        if data.run.environment.get("simulated")
    ]
    context = {
        "title": f"specfrontier: run {cmp.a.run.run_id} (A) vs {cmp.b.run.run_id} (B)",
        "simulated": simulated,
        "runs": _run_facts(cmp),
        "summary": comparison_summary(cmp),
        "commands": comparison_commands(cmp),
        "plot": None
        if svg is None
        else Plot(
            "ratio",
            "B / A per cell",
            "Each bar: one setting at one level present in both runs. Solid: the two runs' repeats do not "
            "overlap (a real change); hatched: the change is within the spread of repeats.",
            plots.data_uri(svg),
        ),
        "tables": comparison_tables(cmp),
    }
    return render_page("compare.html.j2", context)


__all__ = ["compare_html", "ratio_plot"]
