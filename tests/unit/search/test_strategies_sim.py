"""Search strategies and the budget, run on the virtual simulator (a model: fast and deterministic)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from specfrontier.cli import main
from specfrontier.config import WorkloadConfig
from specfrontier.config.load import parse_config
from specfrontier.config.search import SearchConfig
from specfrontier.engines.sglang import SGLangSetting
from specfrontier.engines.sim import SimEngine, SimTuneConfig
from specfrontier.errors import ConfigError
from specfrontier.runs.virtual_sweep import VirtualSweep
from specfrontier.search.observe import observe
from specfrontier.store import Store


def _config(
    search: SearchConfig, steps: tuple[int, ...] = (1, 2, 3), concurrency: tuple[int, ...] = (1, 64)
) -> SimTuneConfig:
    settings = [SGLangSetting(name="no-spec")]
    settings += [SGLangSetting(name=f"steps{s}", algorithm="EAGLE3", num_steps=s, eagle_topk=1) for s in steps]
    return SimTuneConfig(
        engine=SimEngine(min_requests=8),
        settings=tuple(settings),
        concurrency=concurrency,
        repeats=2,
        rounds_per_cell=1,
        warmup_rounds=0,
        workload=WorkloadConfig(max_tokens=128, temperature=0.0, ignore_eos=True),
        search=search,
    )


def _run(tmp_path: Path, config: SimTuneConfig, name: str = "s.db") -> VirtualSweep:
    sweep = VirtualSweep(config)
    sweep.attach(Store(tmp_path / name))
    sweep.run_sync(sweep.new_run())
    return sweep


def _measured(sweep: VirtualSweep) -> list[str]:
    run_id = sweep.store.runs()[0].run_id
    return [s.name for s in sweep.store.settings(run_id) if s.status == "done"]


def test_grid_measures_every_listed_setting_in_order(tmp_path: Path) -> None:
    sweep = _run(tmp_path, _config(SearchConfig()))
    assert _measured(sweep) == ["no-spec", "steps1", "steps2", "steps3"]
    assert sweep.planner is not None and sweep.planner.stop_reason == "grid: all 4 listed settings measured"


def test_adaptive_goes_deeper_while_one_user_still_gains(tmp_path: Path) -> None:
    # At C=1 with the seed's greedy ignore_eos acceptance (0.93 per position) every step pays off.
    sweep = _run(tmp_path, _config(SearchConfig(strategy="adaptive", target_concurrency=(1,), max_depth=5)))
    assert _measured(sweep) == ["no-spec", "steps1", "steps2", "steps3", "steps4", "steps5"]
    assert sweep.planner is not None
    assert "max_depth = 5 is reached" in (sweep.planner.stop_reason or "")
    run_id = sweep.store.runs()[0].run_id
    added = next(s for s in sweep.store.settings(run_id) if s.name == "steps5")
    assert added.params["num_steps"] == 5 and added.command is not None and "5" in added.command
    obs = observe(sweep.store, run_id)
    per_user = [obs.figure(f"steps{s}", 1, "aggregate_tok_s") for s in range(1, 6)]
    medians = [f.median for f in per_user if f is not None and f.median is not None]
    assert medians == sorted(medians) and len(medians) == 5  # each depth measured faster at C=1


def test_adaptive_stops_at_the_first_depth_that_gains_nothing_at_high_load(tmp_path: Path) -> None:
    # At C=64 the capacity lost to speculation (48 slots and fewer) outweighs the longer accepted runs.
    sweep = _run(tmp_path, _config(SearchConfig(strategy="adaptive", target_concurrency=(64,))))
    measured = _measured(sweep)
    assert measured[0] == "no-spec" and "steps3" not in measured
    assert sweep.planner is not None
    assert "gained no more than the noise" in (sweep.planner.stop_reason or "")
    run_id = sweep.store.runs()[0].run_id
    assert {s.name for s in sweep.store.settings(run_id)} == set(measured)  # unmeasured ones are not registered


def test_budget_in_launches_stops_before_the_next_launch(tmp_path: Path) -> None:
    sweep = _run(tmp_path, _config(SearchConfig(max_launches=2)))
    assert _measured(sweep) == ["no-spec", "steps1"]
    assert sweep.planner is not None
    assert (sweep.planner.stop_reason or "").startswith("budget: search.max_launches = 2 launches used; steps2")
    run_id = sweep.store.runs()[0].run_id
    pending = [s.name for s in sweep.store.settings(run_id) if s.status == "pending"]
    assert pending == ["steps2", "steps3"]  # grid registered them; the report shows them as not measured


def test_budget_in_engine_seconds_counts_the_stored_windows(tmp_path: Path) -> None:
    one = _run(tmp_path, _config(SearchConfig(max_launches=1)), "one.db")
    spent = observe(one.store, one.store.runs()[0].run_id).engine_s
    assert spent > 0
    # The first launch is always allowed; the second would need about as much again, beyond 1.5x.
    sweep = _run(tmp_path, _config(SearchConfig(max_engine_s=spent * 1.5)), "two.db")
    assert _measured(sweep) == ["no-spec"]
    assert sweep.planner is not None and "search.max_engine_s" in (sweep.planner.stop_reason or "")


def test_resumed_search_makes_the_same_choices_and_measures_nothing_twice(tmp_path: Path) -> None:
    config = _config(SearchConfig(strategy="adaptive", target_concurrency=(64,)))
    sweep = _run(tmp_path, config)
    run_id = sweep.store.runs()[0].run_id
    cells = len(sweep.store.cells(run_id))
    again = VirtualSweep(parse_config(sweep.store.run(run_id).config))  # the stored config, as --resume does
    again.attach(sweep.store)
    again.run_sync(run_id)
    assert len(sweep.store.cells(run_id)) == cells
    assert again.planner is not None and sweep.planner is not None
    assert again.planner.stop_reason == sweep.planner.stop_reason


def test_search_config_errors_name_the_field_and_the_fix() -> None:
    with pytest.raises(ConfigError, match=r"search.target_concurrency = 8: not a measured level; fix:"):
        parse_config({"engine": {"name": "sim"}, "concurrency": [1, 4], "search": {"target_concurrency": [8]}})
    with pytest.raises(ConfigError, match=r"search.strategy = 'adaptive'.*load.mode is open; fix:"):
        parse_config(
            {
                "engine": {"name": "sim", "face": "http"},
                "search": {"strategy": "adaptive"},
                "load": {"mode": "open", "rates": [1.0], "requests": 4},
            }
        )
    with pytest.raises(ConfigError, match=r"search.max_launches = 0"):
        parse_config({"engine": {"name": "sim"}, "search": {"max_launches": 0}})


def test_cli_search_option_is_checked_and_the_trace_printed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(sys, "argv", ["specfrontier", "tune", "--engine", "sim", "--search", "bogus"])
    with pytest.raises(SystemExit) as exit_info:
        main()
    assert exit_info.value.code == 2
    assert "--search" in capsys.readouterr().err
    config = tmp_path / "c.yaml"
    config.write_text(
        "engine: {name: sim, min_requests: 8}\nconcurrency: [1, 64]\nrepeats: 1\nrounds_per_cell: 1\n"
        "warmup_rounds: 0\nworkload: {max_tokens: 64, ignore_eos: true}\n",
        encoding="utf-8",
    )
    argv = ["specfrontier", "tune", "-c", str(config), "--search", "adaptive", "--max-launches", "3"]
    monkeypatch.setattr(sys, "argv", [*argv, "--store", str(tmp_path / "x.db"), "--quiet"])
    with pytest.raises(SystemExit) as exit_info:
        main()
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert "Search (adaptive): 3 setting(s) launched" in out
    assert "stopped: budget: search.max_launches = 3" in out


def _wide(search: SearchConfig) -> SimTuneConfig:
    return _config(search, steps=tuple(range(1, 7)), concurrency=(1, 16, 64))


def test_guided_measures_a_design_then_where_the_model_points(tmp_path: Path) -> None:
    search = SearchConfig(strategy="guided", target_concurrency=(16,))
    sweep = _run(tmp_path, _wide(search))
    assert sweep.planner is not None
    trace = sweep.planner.trace
    assert [line.split(":")[0] for line in trace[:3]] == ["no-spec", "steps1", "steps6"]
    assert all("design" in line for line in trace[:3])
    assert "confirmed within the noise at C=16" in (sweep.planner.stop_reason or "")
    run_id = sweep.store.runs()[0].run_id
    cells = sweep.store.cells(run_id)
    assert {c.concurrency for c in cells} == {16}  # only the target level is measured
    assert len({c.setting_id for c in cells}) < 7  # fewer launches than the grid
    # Its answer is the grid's best at C=16 (same seeds, so the same cells).
    grid = _run(tmp_path, _wide(SearchConfig()), "grid.db")
    truth = observe(grid.store, grid.store.runs()[0].run_id)
    got = observe(sweep.store, run_id)
    values = {n: f.median for n in truth.status if (f := truth.figure(n, 16, "aggregate_tok_s")) and f.median}
    measured = {n: f.median for n in got.status if (f := got.figure(n, 16, "aggregate_tok_s")) and f.median}
    best, pick = max(values, key=lambda n: values[n]), max(measured, key=lambda n: measured[n])
    assert values[pick] >= values[best] * 0.98


def test_guided_falls_back_to_neighbours_when_the_model_cannot_be_fitted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse(cells: object) -> object:
        raise ConfigError("model: 2 cells: too few to fit; fix: measure more cells")

    monkeypatch.setattr("specfrontier.search.guided.fit_model", refuse)
    config = _config(SearchConfig(strategy="guided", target_concurrency=(1,), max_depth=3), steps=(2,))
    sweep = _run(tmp_path, config)
    assert sweep.planner is not None
    # Design: the baseline and steps2; then the depth dimension is explored (its ladder extends upward from
    # the one listed depth), unranked without a model; steps3 wins at C=1 and its moves are measured.
    assert _measured(sweep) == ["no-spec", "steps2", "steps3"]
    assert "explore num_steps: no value but 2 measured yet" in sweep.planner.trace[2]
    stop = sweep.planner.stop_reason or ""
    assert stop.startswith("confirmed within the noise at C=1: steps3") and "could not be fitted" in stop


def _trees(search: SearchConfig) -> SimTuneConfig:
    """A space of trees only (no chain listed): steps 2-3 x topk 2, 4 x draft tokens 4, 8 within the bound."""
    trees = [
        SGLangSetting(name=f"s{s}k{k}d{d}", algorithm="EAGLE3", num_steps=s, eagle_topk=k, num_draft_tokens=d)
        for s in (2, 3)
        for k in (2, 4)
        for d in (4, 8)
        if d <= s * k + 1
    ]
    return _config(search).model_copy(update={"settings": (SGLangSetting(name="no-spec"), *trees)})


def test_guided_on_a_space_of_trees_measures_trees_and_names_the_dimensions_explored(tmp_path: Path) -> None:
    # Issue 28: with only trees listed, guided used to launch the baseline alone and stop "confirmed".
    sweep = _run(tmp_path, _trees(SearchConfig(strategy="guided", target_concurrency=(1,), max_depth=3)))
    measured = _measured(sweep)
    assert measured[0] == "no-spec" and len(measured) >= 3
    assert sweep.planner is not None
    stop = sweep.planner.stop_reason or ""
    assert stop.startswith("confirmed within the noise at C=1: s")  # a tree, measured, is the answer
    assert "explored: num_steps 2,3 of 2,3; eagle_topk " in stop
    assert sweep.planner.explored is not None and sweep.planner.explored.startswith("num_steps 2,3 of 2,3; eagle_topk")
    for line in sweep.planner.trace[1:]:
        assert line.split(": ", 1)[1].startswith(("design: covers the space's dimensions", "move along", "the model"))


def test_adaptive_extends_depth_within_each_tree_family_when_asked(tmp_path: Path) -> None:
    search = SearchConfig(strategy="adaptive", target_concurrency=(1,), max_depth=4, extend_depth="all")
    sweep = _run(tmp_path, _trees(search))
    measured = _measured(sweep)
    assert measured[0] == "no-spec"
    # Each (topk, draft tokens) family is walked from its shallowest listed depth; at C=1 depth pays, so
    # the families go deeper than listed (an extension keeps topk and draft tokens: `<name>-d4`).
    assert {"s2k2d4", "s2k4d4", "s2k4d8"} <= set(measured)
    assert any(name.endswith("-d4") for name in measured)
    run_id = sweep.store.runs()[0].run_id
    added = {s.name: s.params for s in sweep.store.settings(run_id) if s.name.endswith("-d4")}
    assert all(p["num_steps"] == 4 and p["eagle_topk"] in (2, 4) for p in added.values())
    # by default (search.extend_depth: chains) trees stay inside the listed settings
    listed = _run(tmp_path, _trees(SearchConfig(strategy="adaptive", target_concurrency=(1,), max_depth=4)), "l.db")
    assert not any(name.endswith("-d4") for name in _measured(listed))


def test_budget_counts_settings_handed_out_before_they_report_their_start(tmp_path: Path) -> None:
    """Settings measured side by side (Ray) are asked for before their workers mark them running: the
    planner counts what it has handed out, so asking again and again never exceeds max_launches."""
    from specfrontier.search.planner import SearchPlanner

    config = _config(SearchConfig(max_launches=2))
    sweep = VirtualSweep(config)
    sweep.attach(Store(tmp_path / "s.db"))
    run_id = sweep.new_run()
    planner = SearchPlanner(config, sweep.store, run_id)
    handed_out = []
    while (setting := planner.next_setting()) is not None:  # nothing is launched: no status is written
        handed_out.append(setting.name)
    assert handed_out == ["no-spec", "steps1"]
    assert (planner.stop_reason or "").startswith("budget: search.max_launches = 2 launches used; steps2")
