"""The seed profile against the seed's published cells, on the simulated run itself (issue 15).

`tune --engine sim`'s default run (`seed_sim_config`) is made here through the same runner into a real
store and read back as the report reads it; its figures are compared with shared/data/seed_frontier.json,
whose content is copied below so the test does not depend on where shared/ lies. `calibrate`'s table
must be that run, figure for figure: one computation behind both. These are MODEL predictions."""

from __future__ import annotations

from pathlib import Path

import pytest

from specfrontier.analysis.summary import RunData, load_run
from specfrontier.engines.sim import seed_sim_config
from specfrontier.runs.virtual_sweep import VirtualSweep
from specfrontier.sim import CalibrationTable, load_profile, parse_measurements, predict_table
from specfrontier.store import Store

SEED_FRONTIER = {
    "per_request_tok_s": {
        "1": {"1": 123, "4": 119},
        "2": {"1": 186, "4": 162},
        "3": {"1": 234, "4": 200},
        "4": {"1": 277, "4": 236},
    },
    "aggregate_tok_s": {"3": {"16": 1733, "32": 1979, "64": 1914}, "4": {"16": 1596, "32": 1773, "64": 1817}},
    "max_running_requests": {"1": 26, "2": 21, "3": 17},
}
METRICS = {"per_request_tok_s": "per_request_tok_s_p50", "aggregate_tok_s": "aggregate_tok_s"}


@pytest.fixture(scope="module")
def seed_run(tmp_path_factory: pytest.TempPathFactory) -> RunData:
    """`specfrontier tune --engine sim` without a config: the seed's grid on the seed profile."""
    config = seed_sim_config().model_copy(update={"store": tmp_path_factory.mktemp("seed") / "s.db"})
    sweep = VirtualSweep(config)
    sweep.attach(Store(Path(config.store)))
    run_id = sweep.new_run()
    sweep.run_sync(run_id)
    return load_run(sweep.store, run_id)


def _published(run: RunData) -> list[tuple[str, float, float]]:
    """(label, published, the run's figure) for every published tok/s cell."""
    out = []
    for metric, figure in METRICS.items():
        for steps, row in SEED_FRONTIER[metric].items():  # type: ignore[attr-defined]
            for c, value in row.items():
                cell = run.cell(f"steps{steps}", int(c))
                assert cell is not None and run.is_evidence(cell)
                got = cell.figure(figure).median
                assert got is not None
                out.append((f"steps{steps} C={c} {metric}", float(value), got))
    return out


@pytest.mark.slow
def test_the_simulated_seed_run_is_within_the_bounds(seed_run: RunData) -> None:
    cells = _published(seed_run)
    errors = {label: 100 * abs(got - value) / value for label, value, got in cells}
    assert len(errors) == 14
    assert sum(errors.values()) / len(errors) <= 4.0, errors
    assert max(errors.values()) <= 10.0, errors
    # Every cell is evidence: a steady state at every level, nothing flagged.
    assert all(seed_run.is_evidence(c) for c in seed_run.cells)


@pytest.mark.slow
def test_capacity_is_the_reported_max_running_requests(seed_run: RunData) -> None:
    capacity = {name: seed_run.setting(name).capacity for name in seed_run.measured_settings()}
    assert {k: capacity[k] for k in ("steps1", "steps2", "steps3")} == {"steps1": 26, "steps2": 21, "steps3": 17}
    assert capacity["steps4"] == 15 and capacity["steps5"] == 13  # the fitted law's predictions (unpublished)


@pytest.mark.slow
def test_calibrate_prints_what_the_run_produces(seed_run: RunData) -> None:
    table: CalibrationTable = predict_table(
        load_profile("seed-qwen3.5-122b-a10b"), parse_measurements(SEED_FRONTIER, source="seed")
    )
    predicted = {
        (r.steps, r.concurrency, r.metric): r.predicted for r in table.rows if r.metric != "max_running_requests"
    }
    for metric, figure in METRICS.items():
        for steps, row in SEED_FRONTIER[metric].items():  # type: ignore[attr-defined]
            for c in row:
                cell = seed_run.cell(f"steps{steps}", int(c))
                assert cell is not None
                assert predicted[(int(steps), int(c), metric)] == pytest.approx(cell.figure(figure).median, rel=1e-9)
    assert table.mean_abs_error_pct <= 4.0 and table.max_abs_error_pct <= 10.0


@pytest.mark.slow
def test_the_seed_shape_holds_steps4_low_load_steps3_high_load(seed_run: RunData) -> None:
    def fig(steps: int, c: int, name: str) -> float:
        cell = seed_run.cell(f"steps{steps}", c)
        assert cell is not None and cell.figure(name).median is not None
        return float(cell.figure(name).median or 0.0)

    for c in (1, 4):
        per_request = {s: fig(s, c, "per_request_tok_s_p50") for s in (1, 2, 3, 4)}
        assert max(per_request, key=per_request.__getitem__) == 4
    for c in (32, 64):
        assert fig(3, c, "aggregate_tok_s") > fig(4, c, "aggregate_tok_s")
    for name in seed_run.measured_settings():
        if name == "no-spec":
            continue
        tau = seed_run.cell(name, 1).acceptance_length  # type: ignore[union-attr]
        assert tau is not None and 1 < tau <= int(name.removeprefix("steps")) + 1
