"""`specfrontier tune`: launch the engine per setting (or run the engine's own runner), measure every
level, store, report; interrupts (signals, a closed stdout) stop it cleanly and say how to resume."""

from __future__ import annotations

import signal
from collections.abc import Callable
from dataclasses import fields
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape

from specfrontier.cli.app import (
    SLO_HELP,
    _detach_stdout,
    _say,
    app,
    console,
    err,
    run_id_value,
)
from specfrontier.commands import report_command, resume_command
from specfrontier.errors import ConfigError
from specfrontier.store import Store

if TYPE_CHECKING:  # annotations only: each command imports what it runs when it runs (a light --help)
    import asyncio

    from specfrontier.analysis import RunData
    from specfrontier.cli.progress import SweepProgress
    from specfrontier.config import TuneConfig
    from specfrontier.runs.sweep import Runner, RunOutcome, SweepEvents
    from specfrontier.search.planner import SearchPlanner


def apply_search_options(
    cfg: TuneConfig, *, strategy: str | None, max_launches: int | None, max_engine_s: float | None
) -> TuneConfig:
    """`cfg` with `--search`, `--max-launches` and `--max-engine-s` applied to its `search:` block."""
    options = {"strategy": "--search", "max_launches": "--max-launches", "max_engine_s": "--max-engine-s"}
    given = {"strategy": strategy, "max_launches": max_launches, "max_engine_s": max_engine_s}
    return _with_options(cfg, "search", given, options)


def _with_options(cfg: TuneConfig, block: str, given: dict[str, Any], options: dict[str, str]) -> TuneConfig:
    """`cfg` with the command-line values in `given` (None: not given) set in its `block:`; a bad value is
    named by its option (`options`: key -> flag)."""
    from pydantic import ValidationError  # here: pydantic is not needed by --help or `runs`

    from specfrontier.config.common import describe_validation_error

    given = {k: v for k, v in given.items() if v is not None}
    if not given:
        return cfg
    data = cfg.model_dump(mode="json")
    data[block] = {**data[block], **given}
    try:
        changed = type(cfg).model_validate(data)
    except ValidationError as exc:
        raise ConfigError(describe_validation_error(exc, options[next(iter(given))])) from exc
    changed._settings_summary = cfg.settings_summary  # where the settings came from is unchanged
    return changed


def apply_executor_options(cfg: TuneConfig, *, executor: str | None, address: str | None) -> TuneConfig:
    """`cfg` with `--executor` and `--address` applied to its `executor:` block."""
    options = {"kind": "--executor", "address": "--address"}
    return _with_options(cfg, "executor", {"kind": executor, "address": address}, options)


def refuse_on_resume(strategy: str | None, max_launches: int | None, max_engine_s: float | None) -> None:
    """A resumed run continues the search it was started with (its stored config)."""
    if strategy is not None or max_launches is not None or max_engine_s is not None:
        raise ConfigError(
            "--search/--max-launches/--max-engine-s with --resume: a resumed run keeps its stored search; "
            "fix: drop these options, or start a new run"
        )


def print_search_trace(planner: SearchPlanner | None, console: Console) -> None:
    """Which settings the search measured and why, and why it stopped (nothing for a plain grid)."""
    if planner is None:
        return
    search = planner.config.search
    if search.strategy == "grid" and not search.budgeted:
        return
    listed = len(planner.config.all_settings())
    console.print(
        f"\n[bold]Search[/bold] ({search.strategy}): {len(planner.trace)} setting(s) launched "
        f"({listed} listed); objective {search.objective} at C="
        f"{','.join(map(str, search.target_concurrency or planner.config.concurrency))}"
    )
    for line in planner.trace:
        console.print(f"  {escape(line)}")
    if planner.stop_reason:
        console.print(f"  stopped: {escape(planner.stop_reason)}")
    if planner.explored:
        console.print(f"  dimensions explored: {escape(planner.explored)}")


def _progress(quiet: bool, events: str | None, config: TuneConfig, store: Store, run_id: str) -> SweepProgress:
    """The live view / lines / JSON lines of a tune, with its cell plan (for the ETA)."""
    from specfrontier.cli.progress import SweepProgress, planned_cells, progress_mode

    mode = progress_mode(quiet, events, console)
    levels = len(config.load.rates) if config.load.mode == "open" else len(config.concurrency)
    return SweepProgress(
        err if mode == "jsonl" else console,
        mode,
        planned_cells(config, store, run_id),
        per_setting_cells=config.repeats * levels * max(len(config.workloads), 1),
    )


_INTERRUPTS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


async def _run_sweep(sweep: Runner, run_id: str, output_closed: list[bool]) -> RunOutcome:
    """Run the sweep; SIGINT (Ctrl-C), SIGTERM and SIGHUP (the terminal went away) cancel it cleanly
    (server stopped, cells kept, run marked interrupted), and so does a closed stdout (`tune | head`).

    The signals are installed explicitly: a process started in the background by a non-interactive shell
    inherits SIGINT as ignored, and Python then installs no KeyboardInterrupt handler of its own.
    """
    import asyncio

    task = asyncio.current_task()
    loop = asyncio.get_running_loop()
    if task is not None:
        for sig in _INTERRUPTS:
            loop.add_signal_handler(sig, task.cancel)
        sweep.events = _cancel_on_closed_output(sweep.events, task, output_closed)
    return await sweep.run(run_id)


def _cancel_on_closed_output(events: SweepEvents, task: asyncio.Task[RunOutcome], closed: list[bool]) -> SweepEvents:
    """The same callbacks, but a closed stdout (BrokenPipeError while printing progress) cancels the sweep
    like Ctrl-C instead of failing it half-way: the run stays resumable and the tool says so on stderr."""
    from specfrontier.runs.sweep import SweepEvents

    def guarded(callback: Callable[..., None] | None) -> Callable[..., None] | None:
        if callback is None:
            return None

        def call(*args: object) -> None:
            if closed:
                return
            try:
                callback(*args)
            except BrokenPipeError:
                closed.append(True)
                _detach_stdout()
                task.cancel()

        return call

    return SweepEvents(**{f.name: guarded(getattr(events, f.name)) for f in fields(SweepEvents)})


ENGINE_OPTION_FLAGS = ("profile", "face", "time_scale")
"""Engine options `tune` takes as flags (`--profile`, `--face`, `--time-scale`): each applies to an engine
whose options have a field of that name (today the simulator's)."""


def _tune_config(
    path: Path | None, engine: str | None, profile: str | None, face: str | None = None, time_scale: float | None = None
) -> TuneConfig:
    """The config from --config, or the engine's embedded default; --engine and the option flags must
    agree with it."""
    from pydantic import ValidationError

    from specfrontier.config.common import describe_validation_error
    from specfrontier.config.load import load_config
    from specfrontier.engines import registry

    spec = registry.spec(engine, where="--engine") if engine is not None else None
    if path is None and spec is not None and spec.default_config is not None:
        cfg = spec.default_config()
    elif path is None and spec is not None:
        embedded = ", ".join(sorted(s.name for s in registry.specs() if s.default_config is not None))
        raise ConfigError(
            f"--engine = {spec.name!r} has no embedded default (its server and model are yours to name); "
            f"fix: pass --config FILE with engine.name: {spec.name} (examples/ has a config per engine), "
            f"or --engine {embedded.replace(', ', ' or ')}"
        )
    else:
        cfg = load_config(path)
    if engine is not None and cfg.engine.name != engine:
        raise ConfigError(f"--engine = {engine!r} but the config says engine.name = {cfg.engine.name!r}; fix: drop one")
    overrides = {"profile": profile, "face": face, "time_scale": time_scale}
    for key, value in overrides.items():
        if value is None:
            continue
        flag = f"--{key.replace('_', '-')}"
        options = type(cfg.engine)
        if key not in options.model_fields:
            owners = [registry.spec(name) for name in registry.engines_with_option(key)]
            labels = " or the ".join(o.adapter.label() for o in owners)
            raise ConfigError(
                f"{flag} = {value!r} needs the {labels} (engine {cfg.engine.name!r} has no {key} option); "
                f"fix: add --engine {owners[0].name}"
            )
        try:
            engine_cfg = options.model_validate({**cfg.engine.model_dump(), key: value})
        except ValidationError as exc:
            raise ConfigError(describe_validation_error(exc, flag)) from exc
        cfg = cfg.model_copy(update={"engine": engine_cfg})
    return cfg


def _companion(cfg: TuneConfig | None, store: Store, first: RunData, out: Console) -> None:
    """The second run an engine asks for after this config (the simulator's seed grid under production
    sampling), measured into the same store and compared with the first."""
    import asyncio

    from specfrontier.analysis import load_run
    from specfrontier.analysis.compare import compare_runs
    from specfrontier.cli.render import print_comparison
    from specfrontier.engines import registry
    from specfrontier.runs.sweep import make_runner

    make = registry.spec_of(cfg).companion if cfg is not None else None
    second = make(cfg) if make is not None and cfg is not None else None
    if second is None:
        return
    runner = make_runner(second)
    runner.prepare()
    runner.attach(store)
    run_id = runner.new_run()
    asyncio.run(runner.run(run_id))
    w = second.workload
    out.print(
        f"\n[bold]Companion run[/bold] ({escape(second.engine.name)}: temperature {w.temperature:g}, "
        f"{'ignore EOS' if w.ignore_eos else 'natural EOS'}): run {run_id}, compared with the run above (A)"
    )
    print_comparison(compare_runs(first, load_run(store, run_id)))


def _dry_run(cfg: TuneConfig | None) -> None:
    """`tune --dry-run`: the settings the config would measure, one line each; nothing launched or stored."""
    if cfg is None:
        raise ConfigError(
            "--dry-run with --resume: a resumed run's config was validated when it started; fix: drop one"
        )
    console.print(f"config valid: engine {escape(cfg.engine.name)}, {len(cfg.all_settings())} setting(s):")
    for setting in cfg.all_settings():
        params = ", ".join(f"{k}={v}" for k, v in setting.parameters().items()) or "no speculation"
        console.print(f"  {escape(setting.name)}: {escape(params)}")


@app.command()
def tune(
    config: Annotated[
        Path | None, typer.Option("--config", "-c", help="YAML config; default: the embedded CPU sweep.")
    ] = None,
    store: Annotated[Path | None, typer.Option("--store", help="SQLite store (overrides the config's).")] = None,
    resume: Annotated[
        str | None,
        typer.Option(
            "--resume",
            help="Continue an interrupted run (its stored config is used; with --config, only its extra_args and "
            "timeouts may change).",
            callback=run_id_value,
        ),
    ] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Print only the final report.")] = False,
    events: Annotated[
        str | None,
        typer.Option("--events", help="jsonl: one JSON object per event on stdout (the report goes to stderr)."),
    ] = None,
    engine: Annotated[
        str | None,
        typer.Option(
            "--engine",
            help="Without --config: the engine whose embedded default runs (the default engine's CPU sweep, or "
            "the simulator's seed grid, a model, in seconds); an engine without one says which have one.",
        ),
    ] = None,
    profile: Annotated[str | None, typer.Option("--profile", help="Simulator profile (with --engine sim).")] = None,
    face: Annotated[
        str | None,
        typer.Option("--face", help="Simulator face: virtual (in-process) or http (a server, via the SGLang adapter)."),
    ] = None,
    time_scale: Annotated[
        float | None, typer.Option("--time-scale", help="http face: simulated seconds per wall second.")
    ] = None,
    search: Annotated[
        str | None, typer.Option("--search", help="grid (every listed setting, default), adaptive or guided.")
    ] = None,
    max_launches: Annotated[int | None, typer.Option("--max-launches", help="Search budget: launches.")] = None,
    max_engine_s: Annotated[
        float | None, typer.Option("--max-engine-s", help="Search budget: engine-seconds (startup + windows).")
    ] = None,
    slo: Annotated[str | None, typer.Option("--slo", help=SLO_HELP)] = None,
    executor: Annotated[
        str | None,
        typer.Option("--executor", help="local (one setting at a time, default) or ray (settings in parallel)."),
    ] = None,
    address: Annotated[
        str | None, typer.Option("--address", help="With --executor ray: the cluster to join (unset: a local Ray).")
    ] = None,
    dry_run: Annotated[
        bool,
        typer.Option(
            "--dry-run", help="Validate the config (its space: expanded) and list the settings; launch nothing."
        ),
    ] = False,
) -> None:
    """Launch the engine per setting, measure every concurrency level, store, and report."""
    import asyncio  # here, like every import a command runs: `--help` and `runs` start without it

    from specfrontier.analysis import load_run
    from specfrontier.cli.render import write_tune_html
    from specfrontier.metrics.slo import parse_slo
    from specfrontier.report import print_report
    from specfrontier.runs.sweep import SweepEvents, open_sweep

    if events not in (None, "jsonl"):
        raise ConfigError(f"--events = {events!r}: unknown event format; fix: use --events jsonl")

    slos = parse_slo(slo)  # before any server is launched
    cfg: TuneConfig | None = None
    if resume is None:
        new = _tune_config(config, engine, profile, face, time_scale)
        if new.settings_summary and not quiet:
            _say(escape(new.settings_summary))
        new = apply_search_options(new, strategy=search, max_launches=max_launches, max_engine_s=max_engine_s)
        cfg = apply_executor_options(new, executor=executor, address=address)
    if dry_run:
        _dry_run(cfg)
        return
    if resume is not None:
        refuse_on_resume(search, max_launches, max_engine_s)
        if executor is not None or address is not None:
            raise ConfigError(
                "--executor/--address with --resume: a resumed run keeps its stored executor; fix: drop them"
            )
        if config is None and (engine, profile, face, time_scale) != (None, None, None, None):
            raise ConfigError(
                "--engine/--profile/--face/--time-scale with --resume: a resumed run keeps its stored engine; "
                "fix: drop them"
            )
        cfg = None if config is None else _tune_config(config, engine, profile, face, time_scale)
    changes: list[str] = []
    sweep, run_id = open_sweep(cfg, store, resume=resume, events=SweepEvents(), changes=changes)
    for change in changes:  # the store keeps them too (the run's environment: resume_changes)
        _say(f"resume {run_id} with {escape(str(config))}: changed {escape(change)}")
    progress = _progress(quiet, events, sweep.config, sweep.store, run_id)
    out = progress.console  # stderr in JSON-lines mode: stdout carries only the events
    sweep.events = progress.events()
    if not quiet:
        simulated = sweep.store.run(run_id).environment.get("simulated")
        note = " (SIMULATED: model predictions, not measurements)" if simulated else ""
        if sweep.store.started_in_empty_file:  # allowed (a zero-byte file holds nothing to lose), but said
            note = " (a new store, in the empty file that was there)" + note
        out.print(f"run [bold]{run_id}[/bold] -> store {escape(str(sweep.store.path))}{note}")
    output_closed: list[bool] = []
    try:
        with progress:
            outcome = asyncio.run(_run_sweep(sweep, run_id, output_closed))
    except (KeyboardInterrupt, asyncio.CancelledError):
        cause = "stdout was closed (broken pipe); " if output_closed else ""
        _say(
            f"interrupted: {cause}every finished cell is stored; resume with: "
            f"{escape(resume_command(run_id, sweep.store.path))}"
        )
        raise typer.Exit(130) from None
    data = load_run(sweep.store, run_id, slos)
    outcome = outcome.judged(sum(map(data.is_evidence, data.cells)), data.not_evidence_lines())
    print_report(data, out)
    print_search_trace(sweep.planner, out)
    out.print(
        f"\nstored as run {run_id} in {escape(str(sweep.store.path))}; "
        f"again with: {escape(report_command(run_id, sweep.store.path))}",
        soft_wrap=True,  # one line, so the command can be pasted whole
    )
    progress.finished(run_id, write_tune_html(sweep.store, run_id, data, out))
    _companion(cfg if resume is None else None, sweep.store, data, out)
    summary = outcome.summary(run_id, sweep.store.path)
    if summary is not None:
        _say(f"[red]{escape(summary)}[/red]" if outcome.exit_code == 1 else f"[yellow]{escape(summary)}[/yellow]")
    if outcome.exit_code:
        raise typer.Exit(outcome.exit_code)
