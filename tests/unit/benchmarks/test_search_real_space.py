"""benchmarks/search_real_space.py replays a search on a stored grid run: a proposed setting is "measured" by
copying its stored cells. The replay must make the choices a live search makes (checked against the
simulator's own sweep, whose cells are deterministic), and on the committed llama.cpp fixture it must read
only the fixture's cells, every repeat of them, and nothing else."""

from __future__ import annotations

import dataclasses
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

from specfrontier.analysis import load_run
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


FIXTURES = ("llamacpp-ngram", "llamacpp-ngram-quiet")
"""The space measured on a shared, loaded machine and again on a quiet one (each folder's README)."""


def _fixture(name: str) -> tuple[Store, str]:
    store = Store(BENCH / "spaces" / name / "store.db", read_only=True)
    (run,) = store.runs()
    return store, run.run_id


@pytest.mark.parametrize("name", FIXTURES)
def test_the_fixture_is_a_real_three_dimensional_space_measured_with_repeats(name: str) -> None:
    store, run_id = _fixture(name)
    run = store.run(run_id)
    assert run.engine == "llamacpp" and run.environment["simulated"] is False and run.status == "done"
    settings = store.settings(run_id)
    speculative = [s.params for s in settings if s.speculative]
    assert len(settings) >= 13 and len(speculative) >= 12 and all(s.status == "done" for s in settings)
    assert {p["spec_type"] for p in speculative} == {"ngram-simple", "ngram-map-k", "ngram-map-k4v"}
    assert {p["ngram_size_n"] for p in speculative} == {2, 4} and {p["ngram_size_m"] for p in speculative} == {4, 8, 16}
    cells = {(c.setting_id, c.concurrency, c.repeat) for c in store.cells(run_id)}
    assert cells == {(s.name, c, r) for s in settings for c in (1, 2, 4) for r in range(3)}


def test_the_quiet_fixture_has_evidence_at_every_level() -> None:
    """Measured alone on the machine, every level holds evidence cells (the loaded run had none at C = 4),
    so a search's regret is judged at C = 4 too."""
    store, run_id = _fixture("llamacpp-ngram-quiet")
    data = load_run(store, run_id)
    for c in (1, 2, 4):
        evidence = [s for s in data.measured_settings() if (cell := data.cell(s, c)) and data.is_evidence(cell)]
        assert len(evidence) >= 12, c


@pytest.mark.slow
def test_a_grid_replay_of_the_fixture_reads_every_cell_as_stored(bench: ModuleType, tmp_path: Path) -> None:
    fixture, run_id = _fixture("llamacpp-ngram")
    store = Store(tmp_path / "replay.db")
    replay = bench.FixtureSweep(fixture, run_id).replay(store, SearchConfig())
    assert replay.outside == ()
    assert observe(store, replay.run_id).figures == observe(fixture, run_id).figures


@pytest.mark.slow
@pytest.mark.parametrize("name", FIXTURES)
def test_guided_on_the_fixture_measures_only_stored_cells_with_every_repeat(
    bench: ModuleType, tmp_path: Path, name: str
) -> None:
    fixture, run_id = _fixture(name)
    sweep = bench.FixtureSweep(fixture, run_id)
    assert sweep.deepest() == 16
    store = Store(tmp_path / "replay.db")
    replay = sweep.replay(store, SearchConfig(strategy="guided", max_depth=sweep.deepest()))
    assert replay.outside == () and replay.planner.stop_reason
    got, truth = observe(store, replay.run_id), observe(fixture, run_id)
    measured = {name for name in got.status if got.measured(name)}
    assert measured and got.launches == len(measured) <= truth.launches
    for key, figures in got.figures.items():
        assert figures == truth.figures[key]  # the replayed cell is the stored one, all three repeats
        assert figures["aggregate_tok_s"].n == 3
    # what the benchmark prints of a level: the fixture's best, the pick, the regret between them
    best, pick, gap = bench.regret(truth, got, 1, "aggregate_tok_s")
    assert pick in measured and 0.0 <= gap < 1.0 and (gap == 0.0) == (pick == best)


def test_a_level_with_no_evidence_cell_reads_nothing_to_find_not_a_regret(bench: ModuleType) -> None:
    # The loaded fixture's C = 4 cells are all "not evidence" (no steady state on the 2-core machine): there is no best
    # the report would rank there, so a search that picked anything at C = 4 has no regret to report.
    fixture, run_id = _fixture("llamacpp-ngram")
    truth, words = observe(fixture, run_id), bench.verdicts(fixture, run_id)
    assert bench.no_evidence_levels((1, 2, 4), words) == [4]
    baseline_only = dataclasses.replace(
        truth,
        figures={k: v for k, v in truth.figures.items() if k[0] == "baseline"},
        status={"baseline": "done"},
    )
    rows, worst, worst_evidence = bench._level_rows("search", truth, baseline_only, (1, 2, 4), words)
    assert bench.NO_EVIDENCE in rows[2] and "%" not in rows[2].split("|")[5]
    assert worst == max(bench.regret(truth, baseline_only, c, "aggregate_tok_s")[2] for c in (1, 2)) > 0
    assert worst_evidence > 0 and all(bench.NO_EVIDENCE not in row for row in rows[:2])
