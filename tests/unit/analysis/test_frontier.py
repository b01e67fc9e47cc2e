"""Pareto frontier, crossover map and acceptance by workload on hand-built runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from html_runs import HOSTILE_SETTING, WORKLOADS, build_run
from specfrontier.analysis import load_run
from specfrontier.analysis.frontier import (
    acceptance_by_workload,
    crossover_map,
    frontier_points,
    gpu_count,
    workload_name,
    workload_temperature,
)
from specfrontier.analysis.summary import RunData


@pytest.fixture
def data(html_run_data: RunData) -> RunData:
    return html_run_data


def test_frontier_points_are_not_dominated_and_the_rest_are(data: RunData) -> None:
    points = frontier_points(data)
    assert len(points) == 18
    for p in points:
        same = [o for o in points if o.workload == p.workload and o is not p]
        dominated = any(
            o.per_user_tok_s >= p.per_user_tok_s
            and o.aggregate_tok_s >= p.aggregate_tok_s
            and (o.per_user_tok_s, o.aggregate_tok_s) != (p.per_user_tok_s, p.aggregate_tok_s)
            for o in same
        )
        assert p.on_frontier is not dominated
    # the fastest cell per user is always on the frontier, and so is the highest aggregate one
    for w in WORKLOADS:
        mine = [p for p in points if p.workload == w]
        assert max(mine, key=lambda p: p.per_user_tok_s).on_frontier
        assert max(mine, key=lambda p: p.aggregate_tok_s).on_frontier
    assert gpu_count(data) is None  # not stated: aggregate stays per server


def test_crossover_map_has_one_best_per_workload_and_level(data: RunData) -> None:
    entries = crossover_map(data)
    assert {(e.workload, e.level) for e in entries} == {(w, c) for w in WORKLOADS for c in (1, 2, 4)}
    for e in entries:
        best = max(
            (c for c in data.cells if c.workload == e.workload and c.level == e.level),
            key=lambda c: c.aggregate_tok_s.median or 0.0,
        )
        assert e.setting == best.setting


def test_acceptance_pooled_per_setting_and_workload(data: RunData) -> None:
    rows = acceptance_by_workload(data)
    assert [(r.setting, r.workload, r.temperature) for r in rows] == [
        (HOSTILE_SETTING, "builtin:cpu-mix", "0.0"),
        (HOSTILE_SETTING, "chat.jsonl", "0.7"),
        ("draft-4", "builtin:cpu-mix", "0.0"),
        ("draft-4", "chat.jsonl", "0.7"),
    ]
    assert rows[0].length == pytest.approx(1 + 60 / 40) and rows[0].rate == pytest.approx(0.6)
    assert rows[1].length == pytest.approx(1 + 40 / 40) and rows[1].rate == pytest.approx(0.4)


def test_workload_label_parts() -> None:
    assert workload_name("builtin:cpu-mix|t=0.0|max=48") == "builtin:cpu-mix"
    assert workload_temperature("builtin:cpu-mix|t=0.7|max=48") == "0.7"
    assert workload_temperature("plain") == "?"
    assert workload_name("chat@t0.6") == "chat" and workload_temperature("chat@t0.6") == "0.6"
    assert workload_temperature("synthetic@synthetic-greedy") == "0" and workload_temperature("x@greedy") == "0"


def test_gpu_count_from_environment_or_a_single_tensor_parallel_size(tmp_path: Path) -> None:
    from dataclasses import replace

    store, run_id = build_run(tmp_path / "s.db")
    data = load_run(store, run_id)
    store.close()
    with_env = replace(data, run=replace(data.run, environment={"gpu_count": 4}))
    assert gpu_count(with_env) == 4
    tp = replace(data, settings=tuple(replace(s, params={"tp_size": 2}) for s in data.settings))
    assert gpu_count(tp) == 2
    base = {p.setting: p.aggregate_tok_s for p in frontier_points(data) if p.level == 4}
    halved = {p.setting: p.aggregate_tok_s for p in frontier_points(tp) if p.level == 4}
    assert all(halved[k] == pytest.approx(v / 2) for k, v in base.items())
