"""`specfrontier bench`: measure an already-running server (no launch, no stop)."""

from __future__ import annotations

import signal
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.markup import escape

from specfrontier.cli.app import (
    StoreOption,
    _events,
    app,
    console,
    err,
)
from specfrontier.commands import bench_again_command, report_command
from specfrontier.errors import EngineError
from specfrontier.store import Store

if TYPE_CHECKING:  # annotations only: each command imports what it runs when it runs (a light --help)
    from specfrontier.runs.bench import BenchOptions
    from specfrontier.runs.cell import CellDone


def run_bench(
    options: BenchOptions, console: Console, err: Console, on_cell_done: Callable[[CellDone], None] | None
) -> None:
    """Measure the running server at `options.url`; Ctrl-C/SIGTERM stop it cleanly (finished cells kept)."""
    import asyncio  # here, not at import: `--help` and `runs` start without it

    from specfrontier.analysis import load_run
    from specfrontier.report import print_report
    from specfrontier.runs.bench import open_bench

    async def main() -> tuple[str, str, EngineError | None]:
        bench, run_id = await open_bench(options)
        bench.on_cell_done = on_cell_done
        facts = bench.facts
        if on_cell_done is not None:
            capacity: object = facts.capacity.max_running_requests if facts.capacity else "unknown"
            if facts.capacity and not facts.running_limit_read:
                capacity = f"at most {capacity} until observed under load"
            console.print(
                f"run [bold]{run_id}[/bold]: {escape(facts.engine)} at {escape(options.root)}, model "
                f"{escape(str(facts.model))}, capacity {capacity} ({escape(facts.capacity_source)}) "
                f"-> store {escape(str(options.store))}"
            )
        task = asyncio.current_task()
        loop = asyncio.get_running_loop()
        if task is not None:
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.add_signal_handler(sig, task.cancel)
        try:
            await bench.run(run_id)
        except asyncio.CancelledError:
            return run_id, "interrupted", None
        except EngineError as exc:  # the server failed mid-run: the run says whether cells were stored
            return run_id, bench.store.run(run_id).status, exc
        return run_id, "done", None

    run_id, status, failure = asyncio.run(main())
    if status == "interrupted":
        err.print(
            f"interrupted: finished cells of run {run_id} are stored in {escape(str(options.store))} (bench does not "
            f"resume); report: {escape(report_command(run_id, options.store))}"
        )
        raise typer.Exit(130)
    if failure is not None and status == "failed":
        raise failure  # no cell stored: the one line is all there is to say (exit 1)
    data = load_run(Store(options.store, read_only=True), run_id)
    print_report(data, console)
    console.print(
        f"\nstored as run {run_id} in {escape(str(options.store))}; "
        f"again with: {escape(report_command(run_id, options.store))}",
        soft_wrap=True,  # one line, so the command can be pasted whole
    )
    reasons = data.not_evidence_lines()
    # The same evidence rule as tune (docs/reliability.md); a run cut short says INCOMPLETE below instead.
    if failure is None and data.cells and len(reasons) == len(data.cells):
        again = bench_again_command(data.run.config["bench"], options.store)
        more = f"; and {len(reasons) - 2} more" if len(reasons) > 2 else ""
        err.print(
            f"[red]NO EVIDENCE: all {len(reasons)} stored cell(s) are left out by the evidence rule "
            f"({escape('; '.join(reasons[:2]) + more)}); no setting is recommended; fix: remove the cause (see "
            f"'Evidence per cell' above), then run {escape(again)}[/red]",
            soft_wrap=True,
        )
        raise typer.Exit(1)
    if failure is not None:
        err.print(
            f"[yellow]INCOMPLETE: {escape(str(failure).splitlines()[0])}; the cells above were measured before it; "
            f"fix: bench does not resume: once the server is fixed, run "
            f"{escape(bench_again_command(data.run.config['bench'], options.store))}[/yellow]"
        )
        raise typer.Exit(3)


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
    cell_duration: Annotated[
        float | None,
        typer.Option(
            "--cell-duration",
            help="Closed loop: with --cell-lifetimes, the longest a cell sends (seconds); alone, how long every "
            "cell sends.",
        ),
    ] = None,
    cell_lifetimes: Annotated[
        float | None,
        typer.Option(
            "--cell-lifetimes",
            help="Closed loop: send each cell for this many measured request lifetimes (C = 1: half), as tune "
            "does, so every level has a steady state (default 8 unless --cell-duration is given alone).",
        ),
    ] = None,
    max_client_lag_share: Annotated[
        float | None,
        typer.Option(
            "--max-client-lag-share",
            help="Evidence rule: a cell whose client's event-loop lag p99 exceeded this share of the request "
            "lifetime (or 5 ms where that is more) could not keep up and is not evidence (default 0.02).",
        ),
    ] = None,
    request_timeout: Annotated[
        float,
        typer.Option(
            "--request-timeout",
            help="Seconds one request may take, send to end of stream (finite, at most 7200): a server that "
            "stops streaming fails the request then, and 3 in a row stop the run.",
        ),
    ] = 300.0,
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
    from specfrontier.runs.bench import BenchOptions, parse_client_workers, parse_levels

    levels = parse_levels(concurrency if concurrency or rate else "1,4", "--concurrency", int)
    options = BenchOptions(
        url, levels, parse_levels(rate, "--rate", float), burstiness, duration, requests, warmup_s, cooldown_s,
        max_in_flight, model=model, api=api, prompts=prompts, max_tokens=max_tokens, repeats=repeats,
        rounds_per_cell=rounds, cell_duration_s=cell_duration, cell_lifetimes=cell_lifetimes,
        max_client_lag_share=max_client_lag_share,
        request_timeout_s=request_timeout, store=store,
        client_workers=parse_client_workers(client_workers),
        keep_alive=keep_alive,
    )  # fmt: skip
    run_bench(options, console, err, None if quiet else _events(False).on_cell_done)
