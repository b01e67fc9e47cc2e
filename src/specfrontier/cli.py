"""Command line: thin wrappers that parse, call the library once, and print.

Errors are printed as `ClassName: message` with no traceback (add --debug for one). Exit codes:
0 the run is complete; 1 an error, or a run that produced no evidence; 2 bad input (config or flags,
before any server starts); 3 a run with partial evidence (some settings failed; `tune --resume` it);
130 interrupted (Ctrl-C, SIGTERM, SIGHUP, or the output pipe closed), with how to resume.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
from collections.abc import Callable
from dataclasses import fields
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer
from pydantic import ValidationError
from rich.console import Console
from rich.markup import escape

from specfrontier.analysis import RunData, load_run
from specfrontier.analysis.compare import Comparison, compare_runs
from specfrontier.cli_report import run_report, write_compare_html, write_tune_html
from specfrontier.config import TuneConfig
from specfrontier.config.common import describe_validation_error
from specfrontier.config.load import load_config
from specfrontier.engines import registry
from specfrontier.errors import ConfigError, SpecFrontierError, StoreError
from specfrontier.report import print_report
from specfrontier.report.compare import comparison_summary, comparison_tables
from specfrontier.report.progress import SweepProgress, planned_cells, progress_mode
from specfrontier.report.terminal import print_table
from specfrontier.slo import parse_slo
from specfrontier.store import Store
from specfrontier.sweep import Runner, RunOutcome, SweepEvents, make_runner, open_sweep

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="Find the best speculative-decoding settings for an inference server, per concurrency.",
)


class _Console(Console):
    """Rich's console, except for a closed pipe: rich exits 1 without a word (`on_broken_pipe`), which
    left `tune | head -1` failed and silent. Here a closed stdout raises BrokenPipeError, so `tune` can
    stop the sweep as an interruption and say so on stderr, and `main` exits 141 for the other commands;
    a closed stderr just silences that console (there is nobody left to tell)."""

    def on_broken_pipe(self) -> None:
        self.quiet = True
        if self.stderr:
            return
        _detach_stdout()
        raise BrokenPipeError("stdout was closed")


console = _Console(highlight=False)
if not console.is_terminal:  # piped or captured: rich would assume 80 columns and fold every table
    console.width = 160
err = _Console(stderr=True, highlight=False, soft_wrap=True)
_state = {"debug": False}

StoreOption = Annotated[Path, typer.Option("--store", help="SQLite result store.")]


class ReportFormat(StrEnum):
    terminal = "terminal"
    markdown = "markdown"
    json = "json"
    csv = "csv"
    html = "html"


@app.callback()
def _main(debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks on errors.")] = False) -> None:
    """Find the best speculative-decoding settings for an inference server, per concurrency."""
    _state["debug"] = debug


def _events(quiet: bool) -> SweepEvents:
    """Plain progress lines (bench, and anything without a cell plan); nothing when quiet."""
    return SweepProgress(console, "quiet" if quiet else "lines", 0).events()


def _progress(quiet: bool, events: str | None, config: TuneConfig, store: Store, run_id: str) -> SweepProgress:
    """The live view / lines / JSON lines of a tune, with its cell plan (for the ETA)."""
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


def _detach_stdout() -> None:
    """Point stdout at /dev/null, so nothing later (the interpreter's final flush included) fails on it."""
    with contextlib.suppress(OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)


def _say(line: str) -> None:
    """Print one line on stderr, which may be gone too (SIGHUP: the terminal closed)."""
    with contextlib.suppress(OSError):
        err.print(line)


ENGINE_OPTION_FLAGS = ("profile", "face", "time_scale")
"""Engine options `tune` takes as flags (`--profile`, `--face`, `--time-scale`): each applies to an engine
whose options have a field of that name (today the simulator's)."""


def _tune_config(
    path: Path | None, engine: str | None, profile: str | None, face: str | None = None, time_scale: float | None = None
) -> TuneConfig:
    """The config from --config, or the engine's embedded default; --engine and the option flags must
    agree with it."""
    spec = registry.spec(engine, where="--engine") if engine is not None else None
    if path is None and spec is not None and spec.default_config is not None:
        cfg = spec.default_config()
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
    _print_comparison(compare_runs(first, load_run(store, run_id)))


def _print_comparison(cmp: Comparison) -> None:
    for table in comparison_tables(cmp):
        console.print()
        print_table(table, console)
    console.print()
    for line in comparison_summary(cmp):
        console.print(f"  {escape(line)}")


SLO_HELP = (
    "Goodput under SLOs, e.g. ttft_p90_ms=500,tpot_p90_ms=50 (metrics ttft, tpot, e2e; any percentile): "
    "see docs/metrics.md."
)


@app.command()
def tune(
    config: Annotated[
        Path | None, typer.Option("--config", "-c", help="YAML config; default: the embedded CPU sweep.")
    ] = None,
    store: Annotated[Path | None, typer.Option("--store", help="SQLite store (overrides the config's).")] = None,
    resume: Annotated[
        str | None, typer.Option("--resume", help="Continue an interrupted run (its stored config is used).")
    ] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Print only the final report.")] = False,
    events: Annotated[
        str | None,
        typer.Option("--events", help="jsonl: one JSON object per event on stdout (the report goes to stderr)."),
    ] = None,
    engine: Annotated[
        str | None,
        typer.Option("--engine", help="llamacpp (default) or sim: the simulator's seed grid, a model, in seconds."),
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
) -> None:
    """Launch the engine per setting, measure every concurrency level, store, and report."""
    if events not in (None, "jsonl"):
        raise ConfigError(f"--events = {events!r}: unknown event format; fix: use --events jsonl")
    from specfrontier.cli_search import apply_search_options, print_search_trace, refuse_on_resume

    slos = parse_slo(slo)  # before any server is launched
    cfg = _tune_config(config, engine, profile, face, time_scale) if resume is None else None
    if cfg is None:
        refuse_on_resume(search, max_launches, max_engine_s)
    else:
        cfg = apply_search_options(cfg, strategy=search, max_launches=max_launches, max_engine_s=max_engine_s)
    sweep, run_id = open_sweep(cfg, store, resume=resume, events=SweepEvents())
    progress = _progress(quiet, events, sweep.config, sweep.store, run_id)
    out = progress.console  # stderr in JSON-lines mode: stdout carries only the events
    sweep.events = progress.events()
    if not quiet:
        simulated = sweep.store.run(run_id).environment.get("simulated")
        note = " (SIMULATED: model predictions, not measurements)" if simulated else ""
        out.print(f"run [bold]{run_id}[/bold] -> store {escape(str(sweep.store.path))}{note}")
    output_closed: list[bool] = []
    try:
        with progress:
            outcome = asyncio.run(_run_sweep(sweep, run_id, output_closed))
    except (KeyboardInterrupt, asyncio.CancelledError):
        cause = "stdout was closed (broken pipe); " if output_closed else ""
        _say(
            f"interrupted: {cause}every finished cell is stored; resume with: specfrontier tune --resume {run_id} "
            f"--store {sweep.store.path}"
        )
        raise typer.Exit(130) from None
    data = load_run(sweep.store, run_id, slos)
    print_report(data, out)
    print_search_trace(sweep.planner, out)
    out.print(
        f"\nstored as run {run_id} in {escape(str(sweep.store.path))}; "
        f"again with: specfrontier report {run_id} --store {escape(str(sweep.store.path))}"
    )
    progress.finished(run_id, write_tune_html(sweep.store, run_id, data, out))
    _companion(cfg, sweep.store, data, out)
    summary = outcome.summary(run_id, sweep.store.path)
    if summary is not None:
        _say(f"[red]{escape(summary)}[/red]" if outcome.status == "failed" else f"[yellow]{escape(summary)}[/yellow]")
    if outcome.exit_code:
        raise typer.Exit(outcome.exit_code)


@app.command()
def bench(
    url: Annotated[str, typer.Option("--url", help="Base URL of a running OpenAI-compatible server.")],
    concurrency: Annotated[
        str | None, typer.Option("--concurrency", help="Closed-loop levels, e.g. 1,16,64 (default 1,4).")
    ] = None,
    rate: Annotated[str | None, typer.Option("--rate", help="Open loop instead: rates in req/s, e.g. 1,4.")] = None,
    burstiness: Annotated[float, typer.Option("--burstiness", help="Open loop: gamma shape, 1 = Poisson.")] = 1.0,
    duration: Annotated[float | None, typer.Option("--duration", help="Open loop: seconds per cell.")] = None,
    requests: Annotated[int | None, typer.Option("--requests", help="Open loop: requests per cell.")] = None,
    warmup_s: Annotated[float, typer.Option("--warmup-s", help="Open loop: leading seconds not measured.")] = 0.0,
    cooldown_s: Annotated[float, typer.Option("--cooldown-s", help="Open loop: trailing seconds not measured.")] = 0.0,
    max_in_flight: Annotated[int | None, typer.Option("--max-in-flight", help="Open loop: in-flight cap.")] = None,
    model: Annotated[str | None, typer.Option("--model", help="Model name to send (default: /v1/models).")] = None,
    api: Annotated[str | None, typer.Option("--api", help="chat or completion (default: each prompt's).")] = None,
    prompts: Annotated[str, typer.Option("--prompts", help="builtin:<name> or a JSONL file.")] = "builtin:cpu-mix",
    max_tokens: Annotated[int, typer.Option("--max-tokens", help="Output cap per request.")] = 48,
    repeats: Annotated[int, typer.Option("--repeats", help="Measurements of every cell.")] = 3,
    rounds: Annotated[int, typer.Option("--rounds", help="Closed loop: requests per cell >= rounds x C.")] = 2,
    store: StoreOption = Path("specfrontier.db"),
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Print only the final report.")] = False,
    client_workers: Annotated[
        str, typer.Option("--client-workers", help="Client processes per cell: N or auto (one per 64 streams).")
    ] = "auto",
    keep_alive: Annotated[
        bool | None,
        typer.Option(
            "--keep-alive/--no-keep-alive",
            help="Reuse connections between requests (default: yes, except with llama.cpp, which closes them).",
        ),
    ] = None,
) -> None:
    """Measure an already-running server (no launch, no stop) into the store, and report as `tune` does."""
    from specfrontier.bench import BenchOptions, parse_client_workers, parse_levels
    from specfrontier.cli_bench import run_bench

    levels = parse_levels(concurrency if concurrency or rate else "1,4", "--concurrency", int)
    options = BenchOptions(
        url, levels, parse_levels(rate, "--rate", float), burstiness, duration, requests, warmup_s, cooldown_s,
        max_in_flight, model=model, api=api, prompts=prompts, max_tokens=max_tokens, repeats=repeats,
        rounds_per_cell=rounds, store=store, client_workers=parse_client_workers(client_workers),
        keep_alive=keep_alive,
    )  # fmt: skip
    run_bench(options, console, err, None if quiet else _events(False).on_cell_done)


@app.command()
def runs(
    store: StoreOption = Path("specfrontier.db"),
    as_json: Annotated[bool, typer.Option("--json", help="One JSON list for scripts.")] = False,
) -> None:
    """List the runs in a store."""
    rows = _open_existing(store, read_only=True).runs()
    if as_json:
        items = [{"id": r.run_id, "engine": r.engine, "status": r.status, "created": r.created_at} for r in rows]
        sys.stdout.write(json.dumps(items, indent=2) + "\n")
        return
    if not rows:
        console.print("no runs")
    for r in rows:
        console.print(f"{r.run_id}  {r.engine:9}  {r.status:11}  {r.created_at}")


@app.command()
def report(
    run_id: Annotated[str, typer.Argument(help="Run id (see `specfrontier runs`).")],
    store: StoreOption = Path("specfrontier.db"),
    fmt: Annotated[ReportFormat, typer.Option("--format", "-f", help="Output format.")] = ReportFormat.terminal,
    output: Annotated[Path | None, typer.Option("--output", "-o", help="Write to a file.")] = None,
    slo: Annotated[str | None, typer.Option("--slo", help=SLO_HELP)] = None,
) -> None:
    """Print the tables, crossovers and recommendation of a stored run (html: a self-contained page)."""
    slos = parse_slo(slo)
    opened = _open_existing(store, read_only=True)
    if opened.imported_cells(run_id):
        raise ConfigError(
            f"run = {run_id!r}: imported figures, no stored requests to report; fix: `specfrontier plan {run_id}`"
        )
    run_report(opened, run_id, fmt.value, output, console, slos)


@app.command()
def compare(
    run_a: Annotated[str, typer.Argument(help="Run A (e.g. the best case).")],
    run_b: Annotated[str, typer.Argument(help="Run B (e.g. production sampling).")],
    store: StoreOption = Path("specfrontier.db"),
    fmt: Annotated[str, typer.Option("--format", "-f", help="terminal or html.")] = "terminal",
    output: Annotated[Path | None, typer.Option("--output", "-o", help="HTML: the file to write.")] = None,
) -> None:
    """Compare two runs: acceptance, aggregate tok/s per cell, and where the recommendation changes."""
    if fmt not in ("terminal", "html"):
        raise ConfigError(f"--format = {fmt!r}: compare draws terminal or html; fix: pick one of them")
    opened = _open_existing(store, read_only=True)
    cmp = compare_runs(load_run(opened, run_a), load_run(opened, run_b))
    if fmt == "html":
        write_compare_html(cmp, output or store.with_name(f"{store.stem}-{run_a}-vs-{run_b}.html"), console)
    else:
        _print_comparison(cmp)


@app.command()
def workloads(json_out: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False) -> None:
    """List every workload source: package, license, prompt count and prompt lengths."""
    from specfrontier.cli_workloads import run_workloads

    run_workloads(console, as_json=json_out)


@app.command()
def calibrate(
    measurements: Annotated[Path, typer.Argument(help="Measured cells: the seed JSON shape or a list of cells.")],
    profile: Annotated[str, typer.Option("--profile", help="Simulator profile to fit.")] = "seed-qwen3.5-122b-a10b",
) -> None:
    """Fit a simulator profile to measured cells and print the per-cell error table."""
    from specfrontier.sim.calibrate import calibrate_main

    sys.stdout.write(calibrate_main(measurements, profile) + "\n")


class ScheduleEngineName(StrEnum):
    vllm = "vllm"
    sglang = "sglang"


@app.command()
def schedule(
    run_id: Annotated[str, typer.Argument(help="Run id (a closed-loop sim or SGLang run).")],
    engine: Annotated[ScheduleEngineName, typer.Option("--engine", help="Schedule format: vllm or sglang.")],
    output: Annotated[Path | None, typer.Option("--output", "-o", help="Write the schedule file here.")] = None,
    slo_tpot_ms: Annotated[
        float | None, typer.Option("--slo-tpot-ms", help="Also pick the best setting meeting TPOT p90 <= this.")
    ] = None,
    store: StoreOption = Path("specfrontier.db"),
) -> None:
    """Best speculation depth per batch size as the engine's schedule file, plus the static best per workload."""
    from specfrontier.cli_schedule import run_schedule

    run_schedule(load_run(_open_existing(store, read_only=True), run_id), engine.value, output, slo_tpot_ms, console)


@app.command("import")
def import_(
    file: Annotated[Path, typer.Argument(help="CSV or JSON table of measurements (see docs/model.md).")],
    engine: Annotated[str | None, typer.Option("--engine", help="Engine of every row, when the file omits it.")] = None,
    store: StoreOption = Path("specfrontier.db"),
) -> None:
    """Import measurements made elsewhere (CSV/JSON, or the seed table) as a run, to fit with `plan`."""
    from specfrontier.cli_model import run_import

    run_import(file, engine=engine, store_path=store, console=console)


@app.command()
def plan(
    run_id: Annotated[str, typer.Argument(help="Run id (measured, simulated or imported).")],
    store: StoreOption = Path("specfrontier.db"),
    fit_only: Annotated[
        str | None, typer.Option("--fit-only", help="Fit only these settings (comma-separated); predict the rest.")
    ] = None,
    fmt: Annotated[str, typer.Option("--format", "-f", help="terminal or json.")] = "terminal",
) -> None:
    """Fit the performance model to a run: predicted vs measured, the predicted frontier, the max depth."""
    from specfrontier.cli_model import run_plan

    if fmt not in ("terminal", "json"):
        raise ConfigError(f"--format = {fmt!r}: not a plan format; fix: use terminal or json")
    run_plan(run_id, store_path=_existing_path(store), fit_only=fit_only, as_json=fmt == "json", console=console)


def _existing_path(path: Path) -> Path:
    if not path.exists():
        raise StoreError(f"--store = {str(path)!r}: no such file; fix: run `specfrontier tune` or pass --store")
    return path


def _open_existing(path: Path, *, read_only: bool = False) -> Store:
    """The store at `path`, which must exist. `read_only` for commands that only read: the file (and its
    folder) may then be one the user cannot write, and a file that is no store is refused unchanged."""
    return Store(_existing_path(path), read_only=read_only)


def main() -> None:
    """Entry point: run the app and turn our errors into one line and an exit code."""
    try:
        code = app(standalone_mode=False)  # returns the exit code of typer.Exit in this mode
    except SpecFrontierError as exc:
        if _state["debug"]:
            raise
        err.print(f"[red]{type(exc).__name__}[/red]: {escape(str(exc))}")
        sys.exit(2 if isinstance(exc, ConfigError) else 1)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except typer.Abort:
        sys.exit(130)
    except typer.exceptions.TyperException as exc:  # usage errors (unknown option, bad value)
        err.print(f"[red]Usage error[/red]: {escape(exc.format_message())}")
        sys.exit(exc.exit_code)
    except BrokenPipeError:  # `specfrontier runs | head -1`: the reader has what it wanted
        _detach_stdout()
        sys.exit(141)  # 128 + SIGPIPE, what a shell reports for a tool killed by a closed pipe
    sys.exit(code if isinstance(code, int) else 0)


__all__ = ["app", "main"]
