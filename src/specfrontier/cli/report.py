"""`specfrontier report` and `specfrontier compare`: a stored run, or two side by side (read-only)."""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from specfrontier.cli.app import (
    SLO_HELP,
    StoreOption,
    _open_existing,
    app,
    console,
    run_id_value,
)
from specfrontier.commands import command, store_args
from specfrontier.errors import ConfigError


class ReportFormat(StrEnum):
    terminal = "terminal"
    markdown = "markdown"
    json = "json"
    csv = "csv"
    html = "html"


@app.command()
def report(
    run_id: Annotated[str, typer.Argument(help="Run id (see `specfrontier runs`).", callback=run_id_value)],
    store: StoreOption = Path("specfrontier.db"),
    fmt: Annotated[ReportFormat, typer.Option("--format", "-f", help="Output format.")] = ReportFormat.terminal,
    output: Annotated[Path | None, typer.Option("--output", "-o", help="Write to a file.")] = None,
    slo: Annotated[str | None, typer.Option("--slo", help=SLO_HELP)] = None,
    traffic: Annotated[
        Path | None, typer.Option("--traffic", help="Add the answer for this load profile (see `recommend`).")
    ] = None,
) -> None:
    """Print the tables, crossovers and recommendation of a stored run (html: a self-contained page)."""
    from specfrontier.cli.render import run_report
    from specfrontier.metrics.slo import parse_slo

    slos = parse_slo(slo)
    if traffic is not None and fmt not in (ReportFormat.terminal, ReportFormat.markdown, ReportFormat.html):
        raise ConfigError(
            f"--traffic with --format {fmt.value}: the traffic answer is drawn in terminal, markdown and html; "
            f"fix: `specfrontier recommend {run_id} --traffic {traffic}` for it alone"
        )
    opened = _open_existing(store, read_only=True)
    if opened.imported_cells(run_id):
        raise ConfigError(
            f"run = {run_id!r}: imported figures, no stored requests to report; "
            f"fix: `{command('plan', run_id, *store_args(store))}`"
        )
    run_report(opened, run_id, fmt.value, output, console, slos, traffic)


@app.command()
def compare(
    run_a: Annotated[str, typer.Argument(help="Run A (e.g. the best case).", callback=run_id_value)],
    run_b: Annotated[str, typer.Argument(help="Run B (e.g. production sampling).", callback=run_id_value)],
    store: StoreOption = Path("specfrontier.db"),
    fmt: Annotated[str, typer.Option("--format", "-f", help="terminal or html.")] = "terminal",
    output: Annotated[Path | None, typer.Option("--output", "-o", help="HTML: the file to write.")] = None,
) -> None:
    """Compare two runs: acceptance, aggregate tok/s per cell, and where the recommendation changes."""
    from specfrontier.analysis import load_run
    from specfrontier.analysis.compare import compare_runs
    from specfrontier.cli.render import print_comparison, write_compare_html

    if fmt not in ("terminal", "html"):
        raise ConfigError(f"--format = {fmt!r}: compare draws terminal or html; fix: pick one of them")
    opened = _open_existing(store, read_only=True)
    cmp = compare_runs(load_run(opened, run_a), load_run(opened, run_b))
    if fmt == "html":
        write_compare_html(cmp, output or store.with_name(f"{store.stem}-{run_a}-vs-{run_b}.html"), console)
    else:
        print_comparison(cmp)
