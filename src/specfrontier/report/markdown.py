"""Markdown report (for pull requests and issues): the same tables as the terminal."""

from __future__ import annotations

from specfrontier.analysis import RunData
from specfrontier.analysis.drift import drift_lines
from specfrontier.report.bias import best_change_lines, workload_tables
from specfrontier.report.tables import (
    SIMULATED_NOTE,
    Table,
    all_tables,
    crossover_lines,
    engine_warning_lines,
    flag_lines,
    recommendation_lines,
    spike_lines,
)


def _escape(cell: str) -> str:
    return cell.replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;")


def _table(t: Table) -> str:
    lines = [f"### {t.title}", "", "| " + " | ".join(_escape(h) for h in t.headers) + " |"]
    lines.append("|" + "---|" * len(t.headers))
    lines += ["| " + " | ".join(_escape(c) for c in row) + " |" for row in t.rows]
    lines += [""] + [f"_{_escape(n)}_" for n in t.notes]
    return "\n".join(lines) + "\n"


def report_markdown(data: RunData) -> str:
    run = data.run
    env = run.environment
    head = [
        f"## specfrontier run {run.run_id}",
        "",
        f"- engine: {run.engine} ({env.get('engine_version', '?')}), status: {run.status}",
        f"- machine: {env.get('cpu', '?')} x{env.get('cpu_count', '?')}, {env.get('platform', '?')}",
        f"- created: {run.created_at}",
        "",
    ]
    if env.get("simulated"):
        head += [f"**{SIMULATED_NOTE}**", ""]
    warned = engine_warning_lines(env)
    if warned:
        head += [*(f"- **{_escape(line)}**" for line in warned), ""]
    body: list[str] = []
    for workload, view in data.workload_views():
        if data.multi_workload:
            body.append(f"## Workload `{_escape(workload)}`\n")
        body += _view_sections(view)
    tables = workload_tables(data)
    if data.multi_workload and tables:
        body.append("## All workloads\n")
    body += [_table(t) for t in tables]
    changes = best_change_lines(data)
    if changes:
        body.append(
            "### Best setting: best case vs each workload\n\n" + "\n".join(f"- {_escape(c)}" for c in changes) + "\n"
        )
    return "\n".join(head) + "\n".join(body)


def _view_sections(data: RunData) -> list[str]:
    """Tables, crossovers, recommendation, flags and spikes of one workload's cells."""
    body = [_table(t) for t in all_tables(data)]
    body.append("### Crossovers\n\n" + "\n".join(f"- {line}" for line in crossover_lines(data)) + "\n")
    rec = ["### Recommendation", ""]
    if not data.cells:
        rec.append("Nothing to recommend: no cell was measured (see the flags for failed settings).")
    for headline, command, note in recommendation_lines(data):
        rec += [f"- {_escape(headline)}", "", "  ```", f"  {command}", "  ```"]
        if note:
            rec += ["", f"  ({_escape(note)})"]
    body.append("\n".join(rec) + "\n")
    flags = flag_lines(data)
    if flags:
        body.append("### Flags\n\n" + "\n".join(f"- {_escape(f)}" for f in flags) + "\n")
    drift = drift_lines(data)
    if drift:
        body.append("### Drift\n\n" + "\n".join(f"- {_escape(f)}" for f in drift) + "\n")
    spikes = spike_lines(data)
    if spikes:
        body.append("### Spikes\n\n" + "\n".join(f"- {_escape(f)}" for f in spikes) + "\n")
    return body


__all__ = ["report_markdown"]
