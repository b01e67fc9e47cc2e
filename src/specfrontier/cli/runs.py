"""`specfrontier runs`: the runs of a store (read-only)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer

from specfrontier.cli.app import (
    StoreOption,
    _open_existing,
    app,
    console,
)


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
