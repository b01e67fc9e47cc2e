"""The search on the server sweep (launch per setting), against the simulator's HTTP face."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from specfrontier.config.load import parse_config
from specfrontier.runs.sweep import open_sweep

pytestmark = pytest.mark.slow


async def test_guided_on_the_server_sweep_measures_only_its_levels_within_the_budget(tmp_path: Path) -> None:
    data = {
        "engine": {"name": "sim", "face": "http", "time_scale": 4.0, "startup_timeout_s": 20},
        "workload": {"max_tokens": 64, "ignore_eos": True},
        "concurrency": [1, 4],
        "repeats": 1,
        "rounds_per_cell": 2,
        "settings": [{"name": "no-spec"}, {"name": "steps1", "algorithm": "EAGLE3", "num_steps": 1}],
        "search": {"strategy": "guided", "target_concurrency": [1], "max_launches": 2},
        "store": str(tmp_path / "s.db"),
    }
    sweep, run_id = open_sweep(parse_config(data), None, resume=None)
    await sweep.run(run_id)
    cells = sweep.store.cells(run_id)
    assert {c.concurrency for c in cells} == {1}  # the target level only
    assert sorted({c.setting_id for c in cells}) == ["no-spec", "steps1"]
    assert sweep.planner is not None
    stop = sweep.planner.stop_reason or ""
    assert re.match(r"budget: search.max_launches = 2 launches used; steps\d+ \(next: guided\) not launched", stop)
    assert [s.status for s in sweep.store.settings(run_id)] == ["done", "done"]
