"""Drift control in the server sweep, against the simulator's HTTP face (real processes, real HTTP): settings
interleaved repeat by repeat, a level stopped by the sequential rule, the provisional answer, and the
config checks of drift_control / min_repeats / cell_lifetimes."""

from __future__ import annotations

import asyncio
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from builders import tagged_processes
from specfrontier.analysis import load_run
from specfrontier.analysis.drift import drift_lines, level_drifts
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
        "max_client_lag_share": 1.0,  # ~50 ms requests: a busy host's client lag must not decide these cases
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


# -- drift on an engine whose relaunch is expensive: the end-of-run reference (issue 39, item 10) --------------


def _sglang_python(tmp_path: Path, *, fail_launch: int | None = None) -> Path:
    """A stand-in for "a Python that has SGLang": `-m sglang.launch_server ARGS` runs the simulator's HTTP face
    with SGLang's flags, so the run is configured as SGLang (a relaunch that is not cheap) and launched, read
    and measured by SGLang's adapter. `fail_launch`: that launch (1, 2, ...) exits at once instead."""
    count = tmp_path / "launches"
    script = tmp_path / "python"
    fail = "" if fail_launch is None else f'[ "$n" -eq {fail_launch} ] && echo "fatal: injected" >&2 && exit 1\n'
    script.write_text(
        "#!/bin/sh\n"
        "shift 2\nn=0\n"  # -m sglang.launch_server
        'case " $* " in *" --help "*) ;; *) n=$(( $(cat ' + str(count) + " 2>/dev/null || echo 0) + 1 )); "
        "echo $n > " + str(count) + ";;\nesac\n"
        f"{fail}"
        f'exec {sys.executable} -m specfrontier.sim.serve --time-scale 8 "$@"\n'
    )
    script.chmod(0o755)
    return script


def _sglang_config(tmp_path: Path, python: Path) -> dict[str, Any]:
    """The sweep of `_config` at C = 1 and 2 (cells sized for a steady state), configured as SGLang."""
    engine = {"name": "sglang", "model_path": "sim", "python": str(python), "startup_timeout_s": 30}
    data = _config(tmp_path / "s.db", concurrency=[1, 2], cell_lifetimes=8, warmup_rounds=1, client_workers=1)
    return data | {"engine": engine}


async def test_auto_on_a_slow_relaunch_engine_measures_an_end_of_run_reference(tmp_path: Path) -> None:
    starts: list[str] = []
    events = SweepEvents(on_setting_start=lambda setting, argv: starts.append(setting.name))
    cfg = parse_config(_sglang_config(tmp_path, _sglang_python(tmp_path)))
    sweep, run_id = open_sweep(cfg, None, resume=None, events=events)
    outcome = await sweep.run(run_id)
    assert outcome.status == "done" and outcome.exit_code == 0 and outcome.cells == 8  # the reference is no cell
    assert starts == ["no-spec", "steps4", "no-spec"]  # one launch per setting, then the reference
    order = [(row.setting_id, row.repeat) for row in sweep.store.cells(run_id)]
    assert order == [("no-spec", 0)] * 2 + [("no-spec", 1)] * 2 + [("steps4", 0)] * 2 + [("steps4", 1)] * 2
    reference = sweep.store.cells(run_id, reference=True)
    assert [(r.setting_id, r.concurrency, r.repeat) for r in reference] == [("no-spec", 1, -1), ("no-spec", 2, -1)]
    data = load_run(sweep.store, run_id)
    env = data.run.environment
    assert env["drift_control"] == "reference"
    facts = env["drift_reference"]
    assert facts["setting"] == "no-spec" and facts["cells"] == 2 and facts["error"] is None
    assert 0 < facts["startup_s"] < facts["seconds"]
    assert {c.repeats for c in data.cells} == {2}  # the reference is not a third repeat of no-spec
    no_spec = data.setting("no-spec")
    assert no_spec.status == "done" and no_spec.command is not None and "--port" in no_spec.command
    drifts = level_drifts(data)
    assert [d.level for d in drifts] == [1, 2] and all(d.reference == "no-spec" and d.settings == 1 for d in drifts)
    lines = drift_lines(data)
    assert lines[0].startswith("drift control: an end-of-run reference: no-spec measured once more, at every level")
    assert "cost: 1 more launch (ready in " in lines[0]
    assert lines[1].startswith("drift at C=1: ") and "no-spec's end-of-run reference vs its 2 repeat(s)" in lines[1]


async def test_a_reference_that_fails_to_launch_costs_the_drift_not_the_setting(tmp_path: Path) -> None:
    cfg = parse_config(_sglang_config(tmp_path, _sglang_python(tmp_path, fail_launch=3)))
    sweep, run_id = open_sweep(cfg, None, resume=None)
    outcome = await sweep.run(run_id)
    assert outcome.status == "done" and outcome.exit_code == 0 and outcome.failed_settings == ()
    data = load_run(sweep.store, run_id)
    assert all(s.status == "done" for s in data.settings)
    assert all("server failed" not in data.verdict(c) for c in data.cells)  # its cells stand as measured
    assert data.reference == () and level_drifts(data) == []
    lines = drift_lines(data)
    assert any(line.startswith("drift: not measured: the end-of-run reference failed: ") for line in lines), lines
