"""Search strategies and the budget, run on the virtual simulator (a model: fast and deterministic)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from specfrontier.cli import main
from specfrontier.config import SGLangSetting, SGLangTuneConfig, SimEngine, WorkloadConfig, parse_config
from specfrontier.config.search import SearchConfig
from specfrontier.errors import ConfigError
from specfrontier.search.observe import observe
from specfrontier.sim_sweep import VirtualSweep
from specfrontier.store import Store


def _config(search: SearchConfig, steps: tuple[int, ...] = (1, 2, 3)) -> SGLangTuneConfig:
    settings = [SGLangSetting(name="no-spec")]
    settings += [SGLangSetting(name=f"steps{s}", algorithm="EAGLE3", num_steps=s, eagle_topk=1) for s in steps]
    return SGLangTuneConfig(
        engine=SimEngine(min_requests=8),
        settings=tuple(settings),
        concurrency=(1, 64),
        repeats=2,
        rounds_per_cell=1,
        warmup_rounds=0,
        workload=WorkloadConfig(max_tokens=128, temperature=0.0, ignore_eos=True),
        search=search,
    )


def _run(tmp_path: Path, config: SGLangTuneConfig, name: str = "s.db") -> VirtualSweep:
    sweep = VirtualSweep(config)
    sweep.attach(Store(tmp_path / name))
    sweep.run(sweep.new_run())
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
    again.run(run_id)
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
