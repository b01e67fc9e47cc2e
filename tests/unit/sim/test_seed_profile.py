"""The seed profile against the seed's published cells (issue 3 "Done when" bounds).

These check the MODEL's predictions against shared/data/seed_frontier.json, whose content is copied
below so the test does not depend on where shared/ lies."""

from __future__ import annotations

import pytest

from specfrontier.sim import (
    CalibrationTable,
    GridCell,
    SimProfile,
    best_steps,
    load_profile,
    parse_measurements,
    predict_table,
    run_grid,
)

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


@pytest.fixture(scope="module")
def profile() -> SimProfile:
    return load_profile("seed-qwen3.5-122b-a10b")


@pytest.fixture(scope="module")
def table(profile: SimProfile) -> CalibrationTable:
    return predict_table(profile, parse_measurements(SEED_FRONTIER, source="seed"))


@pytest.fixture(scope="module")
def grid(profile: SimProfile) -> list[GridCell]:
    return run_grid(profile)


def test_published_cells_within_bounds(table: CalibrationTable) -> None:
    throughput = [r for r in table.rows if r.metric != "max_running_requests"]
    assert len(throughput) == 14
    assert table.mean_abs_error_pct <= 4.0
    assert table.max_abs_error_pct <= 10.0


def test_capacity_matches_the_reported_max_running_requests(table: CalibrationTable, grid: list[GridCell]) -> None:
    capacity_rows = {r.steps: r.predicted for r in table.rows if r.metric == "max_running_requests"}
    assert capacity_rows == {1: 26, 2: 21, 3: 17}
    assert {c.steps: c.capacity for c in grid} == {1: 26, 2: 21, 3: 17, 4: 15, 5: 13}


def test_steps4_is_best_of_the_published_steps_at_low_concurrency(grid: list[GridCell]) -> None:
    published = [c for c in grid if c.steps <= 4]
    assert best_steps(published, 1) == 4
    assert best_steps(published, 4) == 4


def test_steps3_beats_steps4_at_high_concurrency(grid: list[GridCell]) -> None:
    agg = {(c.steps, c.concurrency): c.aggregate_tok_s for c in grid}
    assert agg[(3, 32)] > agg[(4, 32)]
    assert agg[(3, 64)] > agg[(4, 64)]


def test_grid_covers_steps_1_to_5_and_acceptance_is_high(grid: list[GridCell]) -> None:
    assert sorted({(c.steps, c.concurrency) for c in grid}) == [
        (s, c) for s in (1, 2, 3, 4, 5) for c in (1, 4, 16, 32, 64)
    ]
    for cell in grid:
        assert cell.per_request_tok_s_p50 > 0 and cell.aggregate_tok_s > 0
        assert cell.acceptance_length is not None and 1 < cell.acceptance_length <= cell.steps + 1
