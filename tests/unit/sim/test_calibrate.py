"""calibrate: recovering a profile from its own predictions, capacity fitting, the report text."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specfrontier.errors import ConfigError
from specfrontier.sim import (
    CalibrationCell,
    Measurements,
    SimProfile,
    calibrate_main,
    capacity_law,
    load_profile,
    predict_table,
    render_table,
)
from specfrontier.sim.calibrate import ACCEPTANCE, calibrate, fit_profile_capacity, with_parameters

SEED = "seed-qwen3.5-122b-a10b"
CELLS = [(s, 1) for s in (1, 2, 3, 4)] + [(s, 4) for s in (1, 2, 3, 4)] + [(s, c) for s in (3, 4) for c in (16, 32, 64)]


def _own_measurements(profile: SimProfile) -> Measurements:
    """The profile's own predictions for the seed's published cells, as if they had been measured."""
    template = Measurements(
        tuple(CalibrationCell(s, c, 1.0 if c <= 4 else None, 1.0 if c > 4 else None) for s, c in CELLS),
        ((1, 26), (2, 21), (3, 17)),
    )
    predicted = {(r.steps, r.concurrency): r.predicted for r in predict_table(profile, template).rows}
    cells = tuple(
        CalibrationCell(s, c, predicted[(s, c)] if c <= 4 else None, predicted[(s, c)] if c > 4 else None)
        for s, c in CELLS
    )
    return Measurements(cells, template.max_running_requests)


@pytest.mark.slow
def test_fitting_a_profile_to_its_own_predictions_recovers_the_table() -> None:
    truth = load_profile(SEED)
    measured = _own_measurements(truth)
    start = with_parameters(
        truth,
        {
            "cycle.base_ms": truth.cycle.base_ms * 1.2,
            "cycle.draft_token_ms": truth.cycle.draft_token_ms * 0.6,
            "cycle.compute_token_ms": truth.cycle.compute_token_ms * 1.4,
            ACCEPTANCE: 1.3,
        },
        "synthetic",
    )
    before = predict_table(start, measured)
    assert before.max_abs_error_pct > 5  # the perturbation is large enough to matter
    fitted, table = calibrate(start, measured, multistart=4)
    assert table.max_abs_error_pct <= 1.0
    assert all(r.predicted == r.measured for r in table.rows if r.metric == "max_running_requests")
    assert fitted.workload("synthetic").acceptance_per_position[0] == pytest.approx(
        truth.workload("synthetic").acceptance_per_position[0], abs=0.02
    )


def test_capacity_fit_reproduces_every_report() -> None:
    profile = load_profile(SEED)
    off = profile.model_copy(update={"capacity": profile.capacity.model_copy(update={"state_slots": 60.0})})
    fitted = fit_profile_capacity(off, [(1, 26), (2, 21), (3, 17)])
    assert [capacity_law(fitted, s + 1) for s in (1, 2, 3)] == [26, 21, 17]
    assert fitted.capacity.slots_per_request == 2 and 105 <= fitted.capacity.state_slots <= 107


def test_unknown_fit_parameter_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"fit = 'cycle.warp_ms'.*fix:"):
        calibrate(load_profile(SEED), Measurements((CalibrationCell(1, 1, 120.0),)), fit=["cycle.warp_ms"])


def test_render_table_has_error_columns_and_summary_lines() -> None:
    profile = load_profile(SEED)
    table = predict_table(profile, Measurements((CalibrationCell(3, 1, 234.0, None),), ((3, 17),)))
    text = render_table(table)
    assert "measured" in text and "predicted" in text and "error %" in text
    assert "max_running_requests" in text
    assert "mean absolute error:" in text and "max absolute error:" in text


@pytest.mark.slow
def test_calibrate_main_reports_the_fit(tmp_path: Path) -> None:
    path = tmp_path / "cells.json"
    rows = [
        {"steps": 1, "concurrency": 1, "per_request_tok_s": 123},
        {"steps": 3, "concurrency": 1, "per_request_tok_s": 234},
        {"steps": 3, "concurrency": 32, "aggregate_tok_s": 1979, "max_running_requests": 17},
        {"steps": 4, "concurrency": 32, "aggregate_tok_s": 1773},
    ]
    path.write_text(json.dumps(rows), encoding="utf-8")
    text = calibrate_main(path, SEED)
    assert "model predictions" in text
    assert text.count("\n") >= 8
    lines = text.splitlines()
    assert lines[-2].startswith("mean absolute error:") and lines[-1].startswith("max absolute error:")


def test_calibrate_main_bad_inputs_raise_config_error(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('[{"steps": "x", "concurrency": 1, "per_request_tok_s": 1}]', encoding="utf-8")
    with pytest.raises(ConfigError, match=r"steps = 'x'.*fix:"):
        calibrate_main(bad, SEED)
    with pytest.raises(ConfigError, match="no such profile"):
        calibrate_main(bad, "nope")
    with pytest.raises(ConfigError, match="cannot read it"):
        calibrate_main(tmp_path / "missing.json", SEED)
