"""The Ray executor's parts that need no cluster: refusals before anything is launched or written, and the
recording store a Ray task writes to (tests/integration/test_ray_sweep.py runs a real local cluster)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from builders import Cli
from specfrontier.config.load import parse_config
from specfrontier.engines.registry import spec_of
from specfrontier.errors import ConfigError
from specfrontier.runs.distributed import RecordingStore, default_resources, settings_at_once
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
