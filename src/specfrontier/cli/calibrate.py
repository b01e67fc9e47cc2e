"""`specfrontier calibrate`: fit a simulator profile to measured cells."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from specfrontier.cli.app import (
    app,
)


@app.command()
def calibrate(
    measurements: Annotated[Path, typer.Argument(help="Measured cells: the seed JSON shape or a list of cells.")],
    profile: Annotated[str, typer.Option("--profile", help="Simulator profile to fit.")] = "seed-qwen3.5-122b-a10b",
) -> None:
    """Fit a simulator profile to measured cells and print the per-cell error table."""
    from specfrontier.sim.calibrate import calibrate_main

    sys.stdout.write(calibrate_main(measurements, profile) + "\n")
