"""`specfrontier schedule`: the best depth per batch size as an engine's schedule file."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.markup import escape

from specfrontier.cli.app import (
    StoreOption,
    _open_existing,
    app,
    console,
    run_id_value,
)
from specfrontier.errors import ConfigError
from specfrontier.textfiles import check_output_path, write_text_atomic

if TYPE_CHECKING:  # annotations only: each command imports what it runs when it runs (a light --help)
    from specfrontier.analysis import RunData
    from specfrontier.engines.base import Deployable, ScheduleFormat
    from specfrontier.schedules.choose import DepthSchedule


def _paths(data: RunData) -> tuple[str, str | None]:
    """Model and draft paths from the run's engine options, where they name them (placeholders for a
    simulator run, which has neither)."""
    engine = data.run.config.get("engine", {})
    if isinstance(engine.get("model_path"), str):
        return engine["model_path"], engine.get("draft_model_path")
    return "<model-path>", "<draft-model-path>"


def _launch(
    data: RunData, fmt: ScheduleFormat, schedule: DepthSchedule | None, name: str | None = None
) -> Deployable | None:
    """The deployable command of a setting the run measured on the format's own engine (`name`, else the
    schedule's deepest setting), which the engine's schedule command starts from: the run's interpreter,
    model, limits and environment; None for a run of another engine (the format then uses placeholders)."""
    from specfrontier.analysis.deploy import deploy_command

    if data.run.engine != fmt.engine:
        return None
    target = name if name is not None else (schedule.deepest_setting if schedule is not None else None)
    return deploy_command(data, target) if target is not None else None


def _format(name: str) -> ScheduleFormat:
    from specfrontier.engines.registry import schedule_formats

    formats = schedule_formats()
    if name not in formats:
        raise ConfigError(f"--engine = {name!r}: no schedule format; fix: use one of {', '.join(formats)}")
    return formats[name]


def _print_schedule(schedule: DepthSchedule, data: RunData, console: Console) -> None:
    for lv in schedule.levels:
        solid = "beyond the spread" if lv.beyond_spread else "within the spread of the runner-up"
        console.print(
            f"  C={lv.concurrency}: {escape(lv.setting)} (depth {lv.depth}), "
            f"{lv.aggregate_tok_s:.1f} aggregate tok/s ({solid})"
        )
    ranges = ", ".join(f"batch {e.batch_lo}-{e.batch_hi}: {e.depth}" for e in schedule.entries)
    console.print(f"  schedule (batch size: depth): {ranges}")
    deepest = schedule.deepest_setting
    capacity = data.setting(deepest).capacity
    console.print(
        f"  note: the engine sizes its buffers for depth {schedule.max_depth}, so the capacity is that of "
        f"{escape(deepest)} ({capacity if capacity is not None else 'unknown'} requests in this run)"
    )
    top = max(lv.concurrency for lv in schedule.levels)
    if capacity is not None and capacity < top:
        console.print(
            f"  [yellow]warning[/yellow]: batches above {capacity} never run under this schedule, so its choices for "
            f"C > {capacity} (measured with a shallower setting's larger capacity) do not apply; at that load "
            "compare it with the static throughput choice below"
        )
    for line in schedule.left_out:
        console.print(f"  left out: {escape(line)}")


def run_schedule(
    data: RunData,
    engine: str,
    output: Path | None,
    slo_tpot_ms: float | None,
    console: Console,
) -> None:
    """Print (and with `output`, write) the schedule, its launch command and the static choices."""
    from specfrontier.analysis.schedule_check import schedule_summary_lines
    from specfrontier.engines.base import LaunchTarget
    from specfrontier.schedules.choose import depth_schedule, run_setting, static_choices

    _format(engine)  # an unknown format is refused before anything is printed
    if output is not None:
        check_output_path(output, "-o", example=f"{engine}-schedule.json")
    simulated = " (SIMULATED: model predictions, not measurements)" if data.run.environment.get("simulated") else ""
    console.print(f"[bold]Schedule for {engine}[/bold] from run {data.run.run_id}{simulated}")
    data = data.complete_evidence()  # partial evidence and cells without a steady state choose nothing
    schedule = depth_schedule(data)
    _print_schedule(schedule, data, console)
    model, draft = _paths(data)
    fmt = _format(engine)
    if len(schedule.entries) == 1:  # one depth everywhere: the static setting, without the schedule's machinery
        only = schedule.entries[0]
        console.print(
            f"  no schedule to write: {escape(only.setting)} (depth {only.depth}) is the best at every measured "
            "batch size, and a schedule of one range only runs it through the engine's per-batch-size path; "
            "launch the static setting:"
        )
        launch = _launch(data, fmt, None, only.setting)
        setting = run_setting(data, only.setting)
        console.print(f"    {escape(fmt.static_command(setting, LaunchTarget(model, draft, launch)))}")
        if launch is not None and launch.note():
            console.print(f"    ({escape(launch.note())})")
        return
    content = fmt.config(schedule, draft_model=draft or "<draft-model-path>")
    path = str(output) if output is not None else f"<{engine}-schedule-file>"
    launch = _launch(data, fmt, schedule)
    command = fmt.command(schedule, content, path, LaunchTarget(model, draft, launch))
    console.print(f"  {escape(fmt.above_last(content))}")
    text = fmt.file_text(content)
    if output is not None:
        write_text_atomic(output, text)
        console.print(f"  wrote {escape(str(output))}")
    else:
        console.print(text, end="", markup=False)
    console.print(f"  launch: {escape(command)}")
    if launch is not None and launch.note():
        console.print(f"    ({escape(launch.note())})")
    measured = schedule_summary_lines(data)
    for line in measured:
        console.print(f"  measured: {escape(line)}")
    if not measured:
        console.print(
            "  not measured: this schedule is a prediction from static cells; run `tune` with "
            "`verify_schedule: true` to measure it as one setting at every level (docs/schedules.md)"
        )
    console.print("\n[bold]Static best per workload[/bold] (one setting, no schedule)")
    for choice in static_choices(data, slo_tpot_ms):
        if choice.setting is None:
            console.print(f"  {choice.workload}: none ({escape(choice.figure)})")
            continue
        console.print(f"  {choice.workload}: {escape(choice.setting)}, {escape(choice.figure)}")
        setting = run_setting(data, choice.setting)
        launch = _launch(data, fmt, None, choice.setting)
        console.print(f"    {escape(fmt.static_command(setting, LaunchTarget(model, draft, launch)))}")
        if launch is not None and launch.note():
            console.print(f"    ({escape(launch.note())})")


@app.command()
def schedule(
    run_id: Annotated[
        str, typer.Argument(help="Run id (a closed-loop run over a depth ladder).", callback=run_id_value)
    ],
    engine: Annotated[
        str,
        typer.Option(
            "--engine", help="Schedule format: the engine that serves it (one that takes a per-batch-size schedule)."
        ),
    ],
    output: Annotated[Path | None, typer.Option("--output", "-o", help="Write the schedule file here.")] = None,
    slo_tpot_ms: Annotated[
        float | None, typer.Option("--slo-tpot-ms", help="Also pick the best setting meeting TPOT p90 <= this.")
    ] = None,
    store: StoreOption = Path("specfrontier.db"),
) -> None:
    """Best speculation depth per batch size as the engine's schedule file, plus the static best per workload."""
    from specfrontier.analysis import load_run

    run_schedule(load_run(_open_existing(store, read_only=True), run_id), engine, output, slo_tpot_ms, console)
