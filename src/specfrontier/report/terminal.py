"""Terminal report: rich tables, crossovers, flags and the recommendation with its launch command."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table as RichTable

from specfrontier.analysis import RunData
from specfrontier.analysis.drift import drift_control, drift_lines
from specfrontier.commands import bench_again_command, resume_command
from specfrontier.metrics.timeslices import SPIKE_FACTOR
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


def _rich(t: Table) -> RichTable:
    # Title and notes are printed around the table, not as its title/caption: rich wraps those to the
    # table's width, which for a narrow table leaves a word or two per line.
    table = RichTable()
    for i, h in enumerate(t.headers):
        table.add_column(escape(h), justify="left" if i == 0 else "right", overflow="fold")
    for row in t.rows:
        table.add_row(*(escape(c) for c in row))
    return table


def print_table(table: Table, console: Console) -> None:
    """A table with its title above and its notes below, as whole lines (rich folds them otherwise)."""
    console.print(escape(table.title), style="table.title")
    console.print(_rich(table))
    for note in table.notes:
        console.print(escape(note), style="table.caption")


def completion_hint(data: RunData) -> str:
    """What completes a partial run, as a command that can be pasted: `tune --resume` for a tune run; a
    `bench` run does not resume (the server is the user's), so the same bench is run again."""
    bench = data.run.config.get("bench")
    if isinstance(bench, dict):
        return f"bench does not resume; measure it again with: {bench_again_command(bench, data.store_path)}"
    return f"complete it with: {resume_command(data.run.run_id, data.store_path)}"


def resume_change_lines(environment: dict[str, Any]) -> list[str]:
    """What a `tune --resume RUN -c FILE` changed in the run's config (launch arguments, timeouts), when:
    cells measured before and after such a change are in one run, and the report says so."""
    entries = environment.get("resume_changes")
    if not isinstance(entries, list):
        return []
    return [
        f"config changed on resume at {entry.get('at', '?')}: {change}"
        for entry in entries
        if isinstance(entry, dict)
        for change in entry.get("changes", ())
    ]


def print_report(data: RunData, console: Console) -> None:
    run = data.run
    env = run.environment
    console.print(
        f"[bold]run {escape(run.run_id)}[/bold]  engine {escape(run.engine)} "
        f"({escape(str(env.get('engine_version', '?')))})  status {escape(run.status)}"
    )
    if env.get("simulated"):
        console.print(f"[bold yellow]{escape(SIMULATED_NOTE)}[/bold yellow]")
    if isinstance(env.get("output_tokens"), str):  # bench on a server without `usage` (runs.bench)
        console.print(f"[yellow]{escape(env['output_tokens'])}[/yellow]")
    if isinstance(env.get("settings_source"), str):  # a space:, or no settings: the engine's own (runs.sweep)
        console.print(escape(env["settings_source"]), soft_wrap=True)
    for change in resume_change_lines(env):
        console.print(f"[yellow]{escape(change)}[/yellow]")
    for line in engine_warning_lines(env):
        console.print(f"[yellow]{escape(line)}[/yellow]", soft_wrap=True)
    if run.status in ("incomplete", "interrupted", "failed"):
        console.print(
            f"[bold yellow]run {escape(run.status)}: partial evidence (cells missing repeats, settings whose server "
            f"failed) is shown but never recommended; {escape(completion_hint(data))}[/bold yellow]",
            soft_wrap=True,  # one line, so the command in it can be pasted whole
        )
    for workload, view in data.workload_views():
        if data.multi_workload:
            console.print()
            console.rule(f"[bold]workload {escape(workload)}[/bold]")
        _print_view(view, console)
    _print_workload_sections(data, console)


def _print_workload_sections(data: RunData, console: Console) -> None:
    """Optimism bias (best case vs each workload) and the correctness gate, over the whole run."""
    tables = workload_tables(data)
    if data.multi_workload and tables:
        console.print()
        console.rule("[bold]all workloads[/bold]")
    for t in tables:
        console.print()
        print_table(t, console)
    changes = best_change_lines(data)
    if changes:
        console.print()
        console.print("[bold]Best setting: best case vs each workload[/bold]")
        for line in changes:
            console.print(f"  {escape(line)}")


def _print_view(data: RunData, console: Console) -> None:
    """Tables, crossovers, flags, spikes and the recommendation of one workload's cells."""
    for t in all_tables(data):
        console.print()
        print_table(t, console)
    console.print()
    console.print("[bold]Crossovers[/bold]")
    for line in crossover_lines(data):
        console.print(f"  {escape(line)}")
    flags = flag_lines(data)
    if flags:
        console.print("[bold yellow]Flags[/bold yellow]")
        for line in flags:
            console.print(f"  {escape(line)}")
    drift = drift_lines(data)
    if drift:
        how = {
            "interleave": " (each setting's first repeat vs its last; a smaller difference is no win)",
            "reference": " (the first setting's end-of-run reference vs its start; a smaller difference is no win)",
        }.get(drift_control(data), "")
        console.print(f"[bold]Drift[/bold]{how}")
        for line in drift:
            console.print(f"  {escape(line)}")
    spikes = spike_lines(data)
    if spikes:
        console.print(
            f"[bold yellow]Spikes[/bold yellow] (a one-second slice whose TTFT or TPOT p99 > {SPIKE_FACTOR:g}x "
            "the median of that repeat)"
        )
        for line in spikes:
            console.print(f"  {escape(line)}")
    console.print()
    console.print("[bold green]Recommendation[/bold green]")
    if not data.cells:
        console.print("  nothing to recommend: no cell was measured (see the flags for failed settings)")
    for headline, command, note in recommendation_lines(data):
        console.print(f"  {escape(headline)}")
        console.print(f"    {escape(command)}", soft_wrap=True)
        if note:
            console.print(f"    [dim]({escape(note)})[/dim]", soft_wrap=True)


__all__ = ["print_report", "print_table"]
