"""`specfrontier bench` behind the thin wrapper in `cli`: run, store, and print the same report as `tune`."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Callable

import typer
from rich.console import Console
from rich.markup import escape

from specfrontier.analysis import load_run
from specfrontier.bench import BenchOptions, open_bench
from specfrontier.errors import EngineError
from specfrontier.report import print_report
from specfrontier.store import Store
from specfrontier.sweep import CellDone


def run_bench(
    options: BenchOptions, console: Console, err: Console, on_cell_done: Callable[[CellDone], None] | None
) -> None:
    """Measure the running server at `options.url`; Ctrl-C/SIGTERM stop it cleanly (finished cells kept)."""

    async def main() -> tuple[str, str, EngineError | None]:
        bench, run_id = await open_bench(options)
        bench.on_cell_done = on_cell_done
        facts = bench.facts
        if on_cell_done is not None:
            capacity = facts.capacity.max_running_requests if facts.capacity else "unknown"
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
        err.print(f"interrupted: finished cells of run {run_id} are stored in {options.store} (bench does not resume)")
        raise typer.Exit(130)
    if failure is not None and status == "failed":
        raise failure  # no cell stored: the one line is all there is to say (exit 1)
    print_report(load_run(Store(options.store, read_only=True), run_id), console)
    console.print(
        f"\nstored as run {run_id} in {escape(str(options.store))}; "
        f"again with: specfrontier report {run_id} --store {escape(str(options.store))}"
    )
    if failure is not None:
        err.print(
            f"[yellow]INCOMPLETE: {escape(str(failure).splitlines()[0])}; the cells above were measured before it "
            "(bench does not resume: run it again once the server is fixed)[/yellow]"
        )
        raise typer.Exit(3)


__all__ = ["run_bench"]
