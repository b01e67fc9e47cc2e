"""benchmarks/search_real_space.py replays a search on a stored grid run: a proposed setting is "measured" by
copying its stored cells. The replay must make the choices a live search makes (checked against the
simulator's own sweep, whose cells are deterministic), and on the committed llama.cpp fixture it must read
only the fixture's cells, every repeat of them, and nothing else."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

from specfrontier.config import WorkloadConfig
from specfrontier.config.search import SearchConfig
from specfrontier.engines.sglang import SGLangSetting
from specfrontier.engines.sim import SimEngine, SimTuneConfig
from specfrontier.runs.virtual_sweep import VirtualSweep
from specfrontier.search.observe import observe
from specfrontier.store import Store

BENCH = Path(__file__).resolve().parents[3] / "benchmarks"


@pytest.fixture
def bench(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """benchmarks/search_real_space.py (benchmarks/ is not a package; it imports its sibling search_cost)."""
    monkeypatch.syspath_prepend(str(BENCH))
    spec = importlib.util.spec_from_file_location("search_real_space", BENCH / "search_real_space.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)
    spec.loader.exec_module(module)
    return module


def _sim_config(search: SearchConfig) -> SimTuneConfig:
    """A small 2-D simulator space (chain depth x topk), deterministic per setting, level and repeat."""
    settings = [SGLangSetting(name="no-spec")]
    settings += [SGLangSetting(name=f"s{s}k1", algorithm="EAGLE3", num_steps=s, eagle_topk=1) for s in (1, 2, 3, 4)]
    settings += [
        SGLangSetting(name=f"s{s}k4d8", algorithm="EAGLE3", num_steps=s, eagle_topk=4, num_draft_tokens=8)
        for s in (2, 3, 4)
    ]
    return SimTuneConfig(
        engine=SimEngine(workload_class="synthetic", min_requests=8),
        settings=tuple(settings),
        concurrency=(1, 16),
        repeats=2,
        rounds_per_cell=1,
        workload=WorkloadConfig(max_tokens=64, temperature=0.0, ignore_eos=True),
        search=search,
    )


def _sweep(store: Store, config: SimTuneConfig) -> tuple[str, VirtualSweep]:
    sweep = VirtualSweep(config)
    sweep.attach(store)
    run_id = sweep.new_run()
    sweep.run_sync(run_id)
    return run_id, sweep


@pytest.mark.slow
@pytest.mark.parametrize("strategy", ["guided", "adaptive"])
def test_replay_makes_the_choices_of_a_live_search(bench: ModuleType, tmp_path: Path, strategy: str) -> None:
    store = Store(tmp_path / "sim.db")
    grid_id, _ = _sweep(store, _sim_config(SearchConfig()))
    search = SearchConfig(strategy=strategy, max_depth=4)  # type: ignore[arg-type]
    live_id, live = _sweep(store, _sim_config(search))
    replay = bench.FixtureSweep(store, grid_id).replay(Store(tmp_path / "replay.db"), search)
    assert live.planner is not None
    assert replay.planner.trace == live.planner.trace
    assert replay.planner.stop_reason == live.planner.stop_reason
    assert replay.outside == ()
    live_obs, replay_obs = observe(store, live_id), observe(Store(tmp_path / "replay.db"), replay.run_id)
    assert replay_obs.figures == live_obs.figures
    assert replay_obs.launches == live_obs.launches <= observe(store, grid_id).launches
