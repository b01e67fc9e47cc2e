"""`specfrontier recommend RUN --traffic FILE`: the setting, schedule and replica count for a load profile."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from specfrontier.cli.app import SLO_HELP, StoreOption, _open_existing, app, console, run_id_value

TRAFFIC_HELP = (
    "Load profile: YAML/CSV histogram (concurrency -> share of time), CSV time series of running requests or "
    "request rates, or Prometheus query_range JSON of vllm:num_requests_running / sglang:num_running_reqs "
    "(docs/traffic.md)."
)
PEAK_HELP = "Peak demand to size replicas for, e.g. 64users or 12rps."


@app.command()
def recommend(
    run_id: Annotated[
        str, typer.Argument(help="Run id (a closed-loop run; see `specfrontier runs`).", callback=run_id_value)
    ],
    traffic: Annotated[Path, typer.Option("--traffic", help=TRAFFIC_HELP)],
    slo: Annotated[str | None, typer.Option("--slo", help=SLO_HELP)] = None,
    peak: Annotated[str | None, typer.Option("--peak", help=PEAK_HELP)] = None,
    workload: Annotated[
        str | None, typer.Option("--workload", help="A run of several workloads: the one the profile's traffic is.")
    ] = None,
    store: StoreOption = Path("specfrontier.db"),
) -> None:
    """The best static setting for a day of traffic, the schedule's gain over it, and replicas for a peak."""
    from specfrontier.metrics.slo import parse_slo
    from specfrontier.report.traffic import traffic_lines
    from specfrontier.traffic import parse_peak, traffic_answer

    slos = parse_slo(slo)
    demand = parse_peak(peak)
    answer = traffic_answer(_open_existing(store, read_only=True), run_id, traffic, slos, demand, workload)
    lines = traffic_lines(answer)
    console.print(f"[bold]{escape(lines[0])}[/bold]")
    for line in lines[1:]:
        console.print(f"  {escape(line)}", soft_wrap=True)
