"""Drift control in the server sweep, against the simulator's HTTP face (real processes, real HTTP): settings
interleaved repeat by repeat, a level stopped by the sequential rule, the provisional answer, and the
config checks of drift_control / min_repeats / cell_lifetimes."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from builders import tagged_processes
from specfrontier.analysis import load_run
from specfrontier.analysis.drift import level_drifts
from specfrontier.config.load import parse_config
from specfrontier.errors import ConfigError
from specfrontier.runs.cell import CellDone
from specfrontier.runs.sweep import SweepEvents, open_sweep

pytestmark = pytest.mark.slow

TAG = f"SPECFRONTIER_DRIFT_TEST={uuid.uuid4().hex}"


def _ours() -> list[int]:
    return tagged_processes(TAG, b"")  # any process carrying the tag: the servers and any worker the test started


@pytest.fixture(autouse=True)
def _no_orphans(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    key, value = TAG.split("=")
    monkeypatch.setenv(key, value)
    yield
    assert not _ours(), "simulator processes left running"


def _config(store: Path, **extra: Any) -> dict[str, Any]:
    return {
        "engine": {"name": "sim", "face": "http", "time_scale": 8.0, "startup_timeout_s": 30},
        "workload": {"max_tokens": 24, "ignore_eos": True},
        "concurrency": [1],
        "repeats": 2,
        "rounds_per_cell": 1,
        "warmup_rounds": 0,
        "settings": [{"name": "no-spec"}, {"name": "steps4", "algorithm": "EAGLE3", "num_steps": 4}],
        "store": str(store),
        **extra,
    }


async def test_auto_interleaves_settings_repeat_by_repeat_on_a_cheap_relaunch(tmp_path: Path) -> None:
    starts: list[str] = []
    events = SweepEvents(on_setting_start=lambda setting, argv: starts.append(setting.name))
    sweep, run_id = open_sweep(parse_config(_config(tmp_path / "s.db")), None, resume=None, events=events)
    await sweep.run(run_id)
    order = [(row.setting_id, row.repeat) for row in sorted(sweep.store.cells(run_id), key=lambda r: r.cell_id)]
    assert order == [("no-spec", 0), ("steps4", 0), ("no-spec", 1), ("steps4", 1)]
    assert starts == ["no-spec", "steps4", "no-spec", "steps4"]  # one launch per setting and repeat
    data = load_run(sweep.store, run_id)
    assert data.run.environment["drift_control"] == "interleave"
    (drift,) = level_drifts(data)
    assert drift.settings == 2 and drift.repeats == 2


async def test_off_measures_every_repeat_of_a_setting_on_one_launch(tmp_path: Path) -> None:
    starts: list[str] = []
    events = SweepEvents(on_setting_start=lambda setting, argv: starts.append(setting.name))
    cfg = parse_config(_config(tmp_path / "s.db", drift_control="off"))
    sweep, run_id = open_sweep(cfg, None, resume=None, events=events)
    await sweep.run(run_id)
    order = [(row.setting_id, row.repeat) for row in sorted(sweep.store.cells(run_id), key=lambda r: r.cell_id)]
    assert order == [("no-spec", 0), ("no-spec", 1), ("steps4", 0), ("steps4", 1)]
    assert starts == ["no-spec", "steps4"]
    assert level_drifts(load_run(sweep.store, run_id)) == []


async def test_a_settled_level_stops_after_min_repeats_and_the_answer_is_shown_early(tmp_path: Path) -> None:
    # steps4 is ~3.7x the baseline on the simulator: the ranges are far apart after 2 repeats
    answers: list[list[str]] = []
    dropped: list[int] = []
    events = SweepEvents(on_provisional=answers.append, on_cells_dropped=dropped.append)
    cfg = parse_config(_config(tmp_path / "s.db", repeats=3, min_repeats=2, concurrency=[1, 2]))
    sweep, run_id = open_sweep(cfg, None, resume=None, events=events)
    outcome = await sweep.run(run_id)
    assert outcome.status == "done"
    data = load_run(sweep.store, run_id)
    assert {c.repeats for c in data.cells} == {2}
    assert data.incomplete_cells() == []
    assert answers and any("steps4" in line for line in answers[0])
    assert dropped == [2 * 2]  # the third repeat of 2 settings at 2 levels


async def test_resume_of_an_interrupted_interleaved_run_measures_every_setting_s_later_rounds(tmp_path: Path) -> None:
    # Interrupted in round 2 after steps4 was stored as done in round 1: resume must still measure its repeat 2.
    stored: list[tuple[str, int]] = []

    def interrupt_after_three(done: CellDone) -> None:
        stored.append((done.setting, done.repeat))
        if len(stored) == 3:
            raise asyncio.CancelledError

    events = SweepEvents(on_cell_done=interrupt_after_three)
    sweep, run_id = open_sweep(parse_config(_config(tmp_path / "s.db")), None, resume=None, events=events)
    with pytest.raises(asyncio.CancelledError):
        await sweep.run(run_id)
    assert stored == [("no-spec", 0), ("steps4", 0), ("no-spec", 1)]
    sweep.store.close()
    resumed, same = open_sweep(None, tmp_path / "s.db", resume=run_id)
    outcome = await resumed.run(same)
    assert outcome.status == "done"
    keys = sorted((row.setting_id, row.repeat) for row in resumed.store.cells(run_id))
    assert keys == [("no-spec", 0), ("no-spec", 1), ("steps4", 0), ("steps4", 1)]


def test_min_repeats_above_repeats_is_refused_in_one_line(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"min_repeats = 4: above repeats = 3; fix: "):
        parse_config(_config(tmp_path / "s.db", repeats=3, min_repeats=4))


def test_min_repeats_without_interleaving_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"min_repeats: .* drift_control is 'off'; fix: set drift_control"):
        parse_config(_config(tmp_path / "s.db", drift_control="off", min_repeats=2))


def test_interleave_with_a_search_that_reads_results_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"drift_control = 'interleave': search.strategy = 'adaptive'"):
        parse_config(_config(tmp_path / "s.db", drift_control="interleave", search={"strategy": "adaptive"}))


def test_an_unknown_drift_control_and_a_too_small_cell_lifetimes_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"drift_control = 'sometimes'.*fix: use one of the allowed values"):
        parse_config(_config(tmp_path / "s.db", drift_control="sometimes"))
    with pytest.raises(ConfigError, match=r"cell_lifetimes = 2.*fix: use a larger value"):
        parse_config(_config(tmp_path / "s.db", cell_lifetimes=2))
