"""The Ray executor's parts that need no cluster: refusals before anything is launched or written, the
recording store a Ray task writes to, and the driver's handling of a lost task at each moment a node can die,
with a stand-in for Ray's task stream (tests/integration/test_ray_sweep.py runs a real local cluster)."""

from __future__ import annotations

import sys
import types
from collections.abc import AsyncIterator, Awaitable
from pathlib import Path
from typing import Any

import pytest

from builders import Cli, steady_cell
from specfrontier.config.load import parse_config
from specfrontier.engines.registry import spec_of
from specfrontier.errors import ConfigError
from specfrontier.runs.distributed import RaySweep, RecordingStore, default_resources, settings_at_once
from specfrontier.runs.sweep import open_sweep


def _http_sim(store: Path) -> dict[str, object]:
    return {
        "engine": {"name": "sim", "face": "http"},
        "settings": [{"name": "no-spec"}, {"name": "s2", "algorithm": "EAGLE3", "num_steps": 2}],
        "concurrency": [1],
        "store": str(store),
        "executor": {"kind": "ray"},
    }


def test_the_virtual_simulator_is_refused_on_ray_with_the_fix(tmp_path: Path) -> None:
    data = {"engine": {"name": "sim"}, "store": str(tmp_path / "v.db"), "executor": {"kind": "ray"}}
    with pytest.raises(ConfigError, match=r"executor.kind = 'ray' with engine 'sim'.*fix: use executor.kind: local"):
        open_sweep(parse_config(data), None, resume=None)
    assert not (tmp_path / "v.db").exists()


def test_a_missing_ray_is_refused_before_a_store_is_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` now raises ImportError
    with pytest.raises(ConfigError, match=r"Ray is not installed; fix: pip install 'specfrontier\[ray\]'"):
        open_sweep(parse_config(_http_sim(tmp_path / "r.db")), None, resume=None)
    assert not (tmp_path / "r.db").exists()


def test_the_recording_store_streams_writes_and_answers_from_the_driver_snapshot(tmp_path: Path) -> None:
    done = {("s2", "synthetic", 1, 0)}
    recorder = RecordingStore(tmp_path / "x.db", done, set())
    assert recorder.done_cells("run") == done and recorder.done_open_cells("run") == set()
    recorder.update_setting("run", "s2", status="running", command=["serve", "--port", "1"])
    recorder.record_cell("run", setting_id="s2", workload="synthetic", concurrency=4, repeat=0, requests=[])
    assert recorder.sink.get_nowait() == (
        "update_setting",
        {"setting_id": "s2", "status": "running", "command": ["serve", "--port", "1"]},
    )
    kind, cell = recorder.sink.get_nowait()
    assert kind == "record_cell" and cell["concurrency"] == 4 and cell["setting_id"] == "s2"
    assert recorder.sink.empty()


def test_cli_executor_options(tmp_path: Path, cli: Cli) -> None:
    db = str(tmp_path / "c.db")
    code, _, err = cli("tune", "--engine", "sim", "--executor", "ray", "--store", db)
    assert code == 2 and "this run is in-process" in err and "fix:" in err
    code, _, err = cli("tune", "--executor", "mpi", "--store", db)
    assert code == 2 and "--executor" in err and "'mpi'" in err
    code, _, err = cli("tune", "--resume", "r1", "--executor", "ray", "--store", db)
    assert code == 2 and "a resumed run keeps its stored executor" in err
    assert not Path(db).exists()


@pytest.mark.parametrize(
    ("engine", "gpus"),
    [
        ({"name": "sglang", "model_path": "/m", "tp_size": 4}, 4),
        ({"name": "vllm", "model": "/m", "tensor_parallel_size": 2}, 2),
        ({"name": "trtllm", "model": "/m", "speculative_model": "/d", "tp_size": 8}, 8),
        ({"name": "sim", "face": "http"}, 0),
        ({}, 0),  # llama.cpp, the default engine: CPU
    ],
)
def test_a_setting_holds_the_engines_gpus_per_server(engine: dict[str, object], gpus: int) -> None:
    config = parse_config({"engine": engine} if engine else {})
    adapter = spec_of(config).adapter(config.engine)
    expected = {"CPU": 1.0, "GPU": float(gpus)} if gpus else {"CPU": 1.0}
    assert default_resources(adapter) == expected


def test_settings_at_once_is_what_the_cluster_holds_of_the_scarcest_resource() -> None:
    cluster = {"CPU": 64.0, "GPU": 32.0, "memory": 1e12}
    assert settings_at_once(cluster, {"CPU": 1.0, "GPU": 4.0}) == 8
    assert settings_at_once(cluster, {"CPU": 16.0, "GPU": 1.0}) == 4  # CPUs run out first
    assert settings_at_once(cluster, {"slot": 1.0}) == 1  # nowhere yet: one waits in Ray's queue


class _RayError(Exception):
    """Ray's base error (a lost node or worker)."""


class _RayTaskError(_RayError):
    """An error the setting raised on its worker."""


FAKE_RAY = types.SimpleNamespace(exceptions=types.SimpleNamespace(RayError=_RayError, RayTaskError=_RayTaskError))


class _Launches:
    """Ray's `task.remote` for `RaySweep._drive`: launch i streams `scripts[i]`'s messages, then raises a
    lost node (`_RayError`) when the script ends in None; the cells each launch was told are done are kept."""

    def __init__(self, *scripts: list[tuple[str, Any] | None]) -> None:
        self.scripts = list(scripts)
        self.told_done: list[set[tuple[str, str, int, int]]] = []

    def remote(self, *args: Any) -> AsyncIterator[Awaitable[tuple[str, Any]]]:
        self.told_done.append(set(args[5]))
        return self._stream(self.scripts[len(self.told_done) - 1])

    async def _stream(self, script: list[tuple[str, Any] | None]) -> AsyncIterator[Awaitable[tuple[str, Any]]]:
        for message in script:
            if message is None:
                raise _RayError("Task failed because the node it was running on is dead or unavailable.")
            yield self._ready(message)

    @staticmethod
    async def _ready(message: tuple[str, Any]) -> tuple[str, Any]:
        return message


def _node(node_id: str) -> tuple[str, Any]:
    return ("node", {"node_id": node_id, "accelerators": {}, "gpus": []})


def _cell(sweep: RaySweep, setting: str, c: int) -> tuple[str, Any]:
    cell = {"setting_id": setting, "workload": sweep.workloads[0].key, "concurrency": c, "repeat": 0}
    return ("record_cell", {**cell, "requests": steady_cell(c, 100), "counters": None, "acceptance_source": None})


def _ray_sweep(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[RaySweep, str]:
    monkeypatch.setitem(sys.modules, "ray", FAKE_RAY)  # what `prepare` imports: no Ray needed here
    data = {
        **_http_sim(tmp_path / "k.db"),
        "concurrency": [1, 2, 4],
        "repeats": 1,
        "executor": {"kind": "ray", "max_attempts": 3},
    }
    sweep, run_id = open_sweep(parse_config(data), None, resume=None)
    assert isinstance(sweep, RaySweep)
    sweep._missing_count, sweep._failed = 0, []  # what `run` starts from before it drives the settings
    return sweep, run_id


def _stored(sweep: RaySweep, run_id: str) -> list[tuple[str, int]]:
    rows = sweep.store._db.execute("SELECT setting_id, concurrency FROM cell WHERE run_id=?", (run_id,)).fetchall()
    return sorted((r[0], r[1]) for r in rows)  # every stored row, duplicates included


async def test_a_node_lost_mid_setting_launches_it_again_for_its_unfinished_cells_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sweep, run_id = _ray_sweep(tmp_path, monkeypatch)
    s2 = next(s for s in sweep.config.all_settings() if s.name == "s2")
    marked_done = ("update_setting", {"setting_id": "s2", "status": "done"})
    launches = _Launches(
        [_node("a"), _cell(sweep, "s2", 1), None],
        [_node("b"), _cell(sweep, "s2", 2), _cell(sweep, "s2", 4), marked_done, ("finished", (0, []))],
    )
    await sweep._drive(FAKE_RAY, launches, run_id, s2)
    assert _stored(sweep, run_id) == [("s2", 1), ("s2", 2), ("s2", 4)]
    assert [len(told) for told in launches.told_done] == [0, 1]  # the second launch skips the stored cell
    environment = sweep.store.run(run_id).environment
    assert environment["lost:s2:1"].startswith("attempt 1 of 3, 2 cell(s) not stored: _RayError: Task failed")
    assert environment["node:s2:1"]["node_id"] == "a" and environment["node:s2:2"]["node_id"] == "b"
    assert "lost:s2:2" not in environment and sweep.attempts["s2"] == 2


async def test_a_node_lost_after_its_last_cell_reached_the_driver_launches_nothing_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The race of a loaded host: the driver learns of a setting's first cell late and its node dies when
    every cell has reached the driver but before the task ended (the server being stopped): the loss is
    recorded with nothing left to measure, the setting is done, and there is no second launch."""
    sweep, run_id = _ray_sweep(tmp_path, monkeypatch)
    s2 = next(s for s in sweep.config.all_settings() if s.name == "s2")
    launches = _Launches([_node("a"), _cell(sweep, "s2", 1), _cell(sweep, "s2", 2), _cell(sweep, "s2", 4), None])
    await sweep._drive(FAKE_RAY, launches, run_id, s2)
    assert len(launches.told_done) == 1 and _stored(sweep, run_id) == [("s2", 1), ("s2", 2), ("s2", 4)]
    environment = sweep.store.run(run_id).environment
    assert environment["lost:s2:1"].startswith("attempt 1 of 3, 0 cell(s) not stored: _RayError")
    assert "node:s2:2" not in environment
    assert {r.name: r.status for r in sweep.store.settings(run_id)}["s2"] == "done"  # its own "done" was lost
    assert sweep._missing_count == 0 and not sweep._failed


async def test_a_node_lost_after_the_setting_finished_is_no_loss_of_the_setting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sweep, run_id = _ray_sweep(tmp_path, monkeypatch)
    s2 = next(s for s in sweep.config.all_settings() if s.name == "s2")
    cells = [_cell(sweep, "s2", c) for c in (1, 2, 4)]
    launches = _Launches([_node("a"), *cells, ("finished", (0, [])), None])
    await sweep._drive(FAKE_RAY, launches, run_id, s2)
    assert len(launches.told_done) == 1 and _stored(sweep, run_id) == [("s2", 1), ("s2", 2), ("s2", 4)]
    assert not any(k.startswith("lost:") for k in sweep.store.run(run_id).environment)


async def test_a_setting_whose_every_launch_loses_its_node_fails_with_its_unfinished_cells(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sweep, run_id = _ray_sweep(tmp_path, monkeypatch)
    s2 = next(s for s in sweep.config.all_settings() if s.name == "s2")
    launches = _Launches([_node("a"), _cell(sweep, "s2", 1), None], [_node("b"), None], [_node("c"), None])
    await sweep._drive(FAKE_RAY, launches, run_id, s2)
    environment = sweep.store.run(run_id).environment
    lost = [environment[f"lost:s2:{n}"].split(":")[0] for n in (1, 2, 3)]
    assert lost == [f"attempt {n} of 3, 2 cell(s) not stored" for n in (1, 2, 3)]
    assert [environment[f"node:s2:{n}"]["node_id"] for n in (1, 2, 3)] == ["a", "b", "c"]
    assert sweep._missing_count == 2 and sweep._failed[0][0] == "s2"
    assert {r.name: r.status for r in sweep.store.settings(run_id)}["s2"] == "failed"


def test_a_setting_left_unfinished_is_settled_only_once_every_repeat_of_its_levels_is_stored(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`Sweep._settle` (local and Ray sweeps alike): a setting left `running` is marked done on resume only when
    nothing of it is missing; with a repeat still to measure (an interleaved round) it stays as it is."""
    monkeypatch.setitem(sys.modules, "ray", FAKE_RAY)
    data = {**_http_sim(tmp_path / "r.db"), "concurrency": [1, 2], "repeats": 2, "executor": {"kind": "ray"}}
    sweep, run_id = open_sweep(parse_config(data), None, resume=None)
    s2 = next(s for s in sweep.config.all_settings() if s.name == "s2")
    sweep.store.update_setting(run_id, "s2", status="running")

    def status() -> str:
        return {r.name: r.status for r in sweep.store.settings(run_id)}["s2"]

    for c in (1, 2):
        kind, payload = _cell(sweep, "s2", c)
        sweep._apply(run_id, s2, kind, payload, 1)
    sweep._settle(run_id, s2)
    assert status() == "running"  # repeat 1 is missing at both levels
    kind, payload = _cell(sweep, "s2", 1)
    sweep._apply(run_id, s2, kind, {**payload, "repeat": 1}, 1)
    sweep._settle(run_id, s2)
    assert status() == "running"  # C = 2 of repeat 1 still missing
    sweep._settle(run_id, s2, levels=[1])
    assert status() == "done"  # a search that asked for C = 1 alone has it all
    sweep.store.update_setting(run_id, "s2", status="failed", error="server exited")
    sweep._settle(run_id, s2, levels=[1])
    assert status() == "failed"  # a failure is kept
