"""The traffic answer for a stored run: the store's cells, their mean output lengths and the model, read
once (the entry point of `recommend` and of the report's traffic section)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from specfrontier.errors import ConfigError
from specfrontier.metrics.slo import Slo
from specfrontier.store import Store
from specfrontier.traffic.figures import Predictor
from specfrontier.traffic.profile import read_profile
from specfrontier.traffic.recommend import Peak, TrafficAnswer, fit_predictor, recommend_for


def traffic_answer(
    store: Store,
    run_id: str,
    profile_path: Path,
    slos: Sequence[Slo] = (),
    peak: Peak | None = None,
    workload: str | None = None,
) -> TrafficAnswer:
    """Read the profile first (a bad file fails before the run is read), then weigh the run's cells (of
    `workload`, which a run of several workloads must name: a profile is the traffic of one)."""
    from specfrontier.analysis import load_run
    from specfrontier.perfmodel.cells import output_tokens_by_cell

    profile = read_profile(profile_path)
    if store.imported_cells(run_id):
        raise ConfigError(
            f"run = {run_id!r}: imported figures, no stored requests to weigh (no SLO verdicts, no output lengths); "
            "fix: recommend from a measured or simulated run"
        )
    data = load_run(store, run_id, slos)
    if workload is not None and workload not in data.workloads:
        raise ConfigError(
            f"--workload = {workload!r}: not measured in run {run_id}; fix: one of {', '.join(data.workloads)}"
        )
    if workload is None and data.multi_workload:
        raise ConfigError(
            f"--workload: run {run_id} measured workloads {', '.join(data.workloads)} and a profile is the traffic of "
            f"one; fix: `specfrontier recommend {run_id} --traffic {profile_path} --workload {data.workloads[0]}`"
        )
    if workload is not None:
        data = data.for_workload(workload)
    output_tokens = output_tokens_by_cell(store.cells(run_id))

    def predictor() -> tuple[Predictor | None, str]:
        from specfrontier.perfmodel.plan import run_cells

        cells = run_cells(store, run_id)
        return fit_predictor(data, cells.cells, cells.rho)

    return recommend_for(data, profile, slos, output_tokens, predictor, peak)


__all__ = ["traffic_answer"]
