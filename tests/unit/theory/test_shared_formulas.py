"""The formulas the simulator and the fitted model share, written once in `theory/` (issue 32).

Each test pins one formula and that both of its users reach the same number through it, so a copy that
drifts from the theory in `sim/` or `perfmodel/` shows here."""

from __future__ import annotations

import pytest

from specfrontier.perfmodel.cycle import features
from specfrontier.perfmodel.types import SettingParams
from specfrontier.sim.acceptance import scaled_rates
from specfrontier.sim.calibrate import ACCEPTANCE, with_parameters
from specfrontier.sim.profile import load_profile
from specfrontier.theory.acceptance import MAX_RATE, scaled_miss_rate
from specfrontier.theory.capacity import S0_GRID, hybrid_state_capacity, solve_hybrid_state_law
from specfrontier.theory.cycle import cycle_time_ms, draft_terms, request_terms, speculation_terms
from specfrontier.theory.throughput import (
    cycle_ms_from_aggregate,
    cycle_ms_from_rate,
    per_request_tok_s,
    running_requests,
)


def test_the_cycle_time_is_its_columns_weighed_by_the_costs() -> None:
    """theory.cycle.cycle_time_ms and the fitted model's design row use the same columns: a row weighed with the
    profile's costs is the simulator's cycle time."""
    costs = load_profile("seed-qwen3.5-122b-a10b").cycle.model_copy(update={"expert_ms": 0.0, "compute_token_ms": 0.0})
    params = SettingParams(steps=3, topk=2, draft_tokens=6, family="eagle3")
    row = features("dense", None, ["eagle3"], 5, params)
    # the speculation term carries the simulator's per-cycle overhead (its per-request share is 0 there)
    coefficients = [
        costs.base_ms, costs.request_ms, costs.spec_overhead_ms, 0.0, costs.draft_step_ms, costs.draft_token_ms,
        costs.verify_token_ms,
    ]  # fmt: skip
    expected = cycle_time_ms(costs, 5, True, 3, 2, 6, 1, 1)
    assert float(row @ coefficients) == pytest.approx(expected)
    assert request_terms(5) == [1.0, 5] and draft_terms(3, 5, 2) == [3.0, 30] and speculation_terms(5) == [1.0, 5]


def test_a_measured_rate_reads_back_to_the_cycle_time_that_predicts_it() -> None:
    tau, cycle = 2.6, 23.5
    v = per_request_tok_s(tau, cycle)
    assert cycle_ms_from_rate(tau, v) == pytest.approx(cycle)
    assert cycle_ms_from_aggregate(4, tau, 4 * v) == pytest.approx(cycle)


def test_running_requests_is_one_at_least_under_a_cap_and_c_without_one() -> None:
    assert running_requests(64, 17) == 17 and running_requests(8, 17) == 8
    assert running_requests(8, 0) == 1 and running_requests(8, None) == 8


def test_the_miss_rate_scaling_is_the_same_for_the_spread_and_the_calibration() -> None:
    assert scaled_miss_rate(0.8, 0.5) == pytest.approx(0.9)
    assert scaled_miss_rate(0.8, 6.0) == 0.0 and scaled_miss_rate(0.99999, 0.1) == MAX_RATE
    assert scaled_rates([0.0, 0.8], 0.5) == [0.0, scaled_miss_rate(0.8, 0.5)]  # a mismatched drafter stays 0
    profile = load_profile("seed-qwen3.5-122b-a10b")
    base = profile.workload("synthetic").acceptance_per_position
    scaled = with_parameters(profile, {ACCEPTANCE: 1.5}, "synthetic").workload("synthetic")
    assert list(scaled.acceptance_per_position) == [scaled_miss_rate(a, 1.5) for a in base]


def test_one_s0_grid_solves_a_law_beyond_s0_8() -> None:
    """sim/calibrate.py searched S0 in 0..8 while perfmodel searched 0..16; a law with S0 = 12 is now
    solved by both (the grid is theory.capacity.S0_GRID)."""
    readings = [(d, hybrid_state_capacity(960.0, 12.0, d)) for d in (2, 4, 8)]
    solved = solve_hybrid_state_law(readings, S0_GRID)
    assert solved is not None
    m, s0 = solved
    assert all(hybrid_state_capacity(m, s0, d) == cap for d, cap in readings)
    assert solve_hybrid_state_law(readings, [x / 2 for x in range(17)]) is None  # the old 0..8 grid had none
    assert S0_GRID[0] == 0.0 and S0_GRID[-1] == 16.0
