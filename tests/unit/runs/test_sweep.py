"""The server sweep against the simulator's HTTP face: the SGLang adapter end to end, and faults.

The face is a real subprocess speaking SGLang's interface, so these tests exercise launch, readiness,
capacity read-back, per-request acceptance, time scaling and failure handling without a GPU.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from builders import DATA, SimFace
from specfrontier.analysis import load_run
from specfrontier.metrics.counters import PER_REQUEST_EXACT_SOURCE
from specfrontier.metrics.window import cell_metrics
from specfrontier.sim import load_profile
from specfrontier.sim.setting import SimSetting
from specfrontier.sim.virtual import simulate_cell

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("no_orphans")]


def _config(store: Path, settings: list[dict[str, Any]], **overrides: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "engine": {"name": "sim", "face": "http", "time_scale": 2.0, "startup_timeout_s": 20},
        "workload": {"max_tokens": 128, "ignore_eos": True},
        "concurrency": [1, 4],
        "repeats": 1,
        "rounds_per_cell": 4,
        "settings": settings,
        "store": str(store),
    }
    data.update(overrides)
    return data


async def test_sglang_adapter_against_the_face_reads_capacity_acceptance_and_simulated_time(
    tmp_path: Path, sim_face: SimFace
) -> None:
    store, run_id = await sim_face.sweep(
        _config(tmp_path / "s.db", [{"name": "no-spec"}, {"name": "steps3", "algorithm": "EAGLE3", "num_steps": 3}])
    )
    data = load_run(store, run_id)
    assert data.run.status == "done"
    assert data.run.environment["simulated"] is True and data.run.environment["time_scale"] == 2.0
    assert data.run.environment["client_keep_alive"] is True  # the simulator keeps connections alive
    steps3 = data.setting("steps3")
    assert steps3.capacity == 17  # the capacity law, read back from /server_info
    assert "reset the unset --max-running-requests to 48" in (steps3.capacity_source or "")
    cell = data.cell("steps3", 1)
    assert cell is not None and cell.acceptance_source == PER_REQUEST_EXACT_SOURCE
    assert cell.acceptance_length is not None and cell.acceptance_length > 2.5
    # Per-request decode speed in simulated time agrees with the virtual-time face on the same setting.
    virtual = cell_metrics(
        simulate_cell(
            load_profile("seed-qwen3.5-122b-a10b"),
            SimSetting(algorithm="EAGLE3", num_steps=3, eagle_topk=1),
            concurrency=1,
            num_requests=8,
            workload="synthetic",
            temperature=0.0,
            ignore_eos=True,
            input_tokens=40,
            max_tokens=128,
        )
    )
    measured = cell.per_request_tok_s_p50.median
    assert measured is not None and virtual.per_request_tok_s_p50 is not None
    assert measured == pytest.approx(virtual.per_request_tok_s_p50, rel=0.08)


async def test_start_failures_are_recorded_with_log_tail_and_the_sweep_continues(
    tmp_path: Path, sim_face: SimFace
) -> None:
    settings = [
        {"name": "no-spec"},
        {"name": "fails", "algorithm": "EAGLE3", "num_steps": 2, "extra_args": ["--fail-at-start"]},
        {"name": "oom", "algorithm": "EAGLE3", "num_steps": 1, "max_running_requests": 40,
         "extra_args": ["--oom-above", "10"]},
        {"name": "hangs", "extra_args": ["--hang"]},
    ]  # fmt: skip
    data = _config(tmp_path / "s.db", settings, concurrency=[1])
    data["engine"]["startup_timeout_s"] = 10  # the hang costs this much; a loaded CPU needs ~5 s to start a face
    store, run_id = await sim_face.sweep(data)
    rows = {s.name: s for s in store.settings(run_id)}
    assert rows["no-spec"].status == "done"
    assert rows["fails"].status == "failed" and "exited with status 1" in (rows["fails"].error or "")
    assert "out of memory" in (rows["oom"].log_tail or "").lower()
    assert rows["hangs"].status == "failed" and "not ready" in (rows["hangs"].error or "")
    assert {c.setting_id for c in store.cells(run_id)} == {"no-spec"}


async def test_a_crash_mid_sweep_keeps_finished_cells(tmp_path: Path, sim_face: SimFace) -> None:
    # The first request, 4 warmup requests and 4 at C=1 finish before the crash, which comes with the first
    # answer at C=4 (a crash with the 9th answer raced the sweep's storing of the C=1 cell on a loaded host).
    settings = [{"name": "crashes", "extra_args": ["--crash-after", "10"]}]
    store, run_id = await sim_face.sweep(_config(tmp_path / "s.db", settings))
    row = store.settings(run_id)[0]
    assert row.status == "failed" and "during the cell C=4" in (row.error or "")
    assert [(c.setting_id, c.concurrency) for c in store.cells(run_id)] == [("crashes", 1)]


async def test_open_loop_cells_are_keyed_by_rate_and_the_first_request_is_stored(
    tmp_path: Path, sim_face: SimFace
) -> None:
    load = {"mode": "open", "rates": [4.0, 8.0], "requests": 16, "warmup_s": 0.3, "seed": 5}
    data = _config(tmp_path / "s.db", [{"name": "no-spec"}], load=load, repeats=2)
    store, run_id = await sim_face.sweep(data)
    cells = store.cells(run_id)
    assert sorted((c.request_rate, c.repeat) for c in cells) == [(4.0, 0), (4.0, 1), (8.0, 0), (8.0, 1)]
    assert {c.load_mode for c in cells} == {"open"} and {c.concurrency for c in cells} == {0}
    for c in cells:
        assert c.load is not None and c.load["sent"] == 16
        assert 0 < c.load["measured"] == len(c.requests) < 16  # warmup requests were sent, not stored
        assert c.load["achieved_rate"] == pytest.approx(c.request_rate, rel=0.5)
    setting = store.settings(run_id)[0]
    assert setting.first_ttft_ms is not None and setting.first_e2e_ms is not None
    assert setting.first_e2e_ms >= setting.first_ttft_ms > 0
    report = load_run(store, run_id)
    assert report.open_loop and report.concurrency_levels == (4.0, 8.0)
    assert report.cell("no-spec", 8.0) is not None
    assert all(len(c.slices) == 2 for c in report.cells)
    # Resume finds nothing missing: open cells are recognised as done by their rate.
    sweep, _ = sim_face.open(data)
    assert sweep._missing(run_id, sweep.config.settings[0]) == []


async def test_the_engine_warnings_about_speed_go_into_the_run_environment_and_the_report(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sim_face: SimFace
) -> None:
    import io

    from rich.console import Console

    from specfrontier.engines.vllm import performance_warnings
    from specfrontier.report import print_report
    from specfrontier.store import ENGINE_WARNINGS_KEY

    recorded = (DATA / "vllm_server_log.txt").read_text(encoding="utf-8")
    seen: list[str] = []

    def warnings_in(log: str) -> tuple[str, ...]:  # the face's log has none: read vLLM's recorded one with it
        seen.append(log)
        return performance_warnings(log + recorded)

    data = _config(tmp_path / "s.db", [{"name": "no-spec"}, {"name": "steps2", "algorithm": "EAGLE3", "num_steps": 2}])
    sweep, run_id = sim_face.open(data)
    monkeypatch.setattr(type(sweep.adapter), "performance_warnings", staticmethod(warnings_in))
    await sweep.run(run_id)
    run = load_run(sweep.store, run_id)
    stored = run.run.environment[ENGINE_WARNINGS_KEY]
    assert list(stored) == ["no-spec", "steps2"] and len(seen) == 2 and all(seen)  # each setting's own log, read
    assert any(w.startswith("Speculative decoding on CPU without Intel OpenMP") for w in stored["steps2"])
    out = io.StringIO()
    print_report(run, Console(file=out, width=400))
    said = "engine warned (no-spec, steps2): Speculative decoding on CPU without Intel OpenMP in LD_PRELOAD"
    assert said in out.getvalue()
    from specfrontier.report import report_markdown
    from specfrontier.report.html import report_html

    assert said in report_markdown(run) and said in report_html(run)  # every format says it, not only the terminal


async def test_each_launch_records_the_variables_its_server_got(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sim_face: SimFace
) -> None:
    """The launch environment (`EngineAdapter.environment`, handed to the server process) is stored per
    setting: a deployable command prints it, not what the options would give later."""
    from specfrontier.store import LAUNCH_ENVIRONMENT_KEY

    data = _config(tmp_path / "s.db", [{"name": "no-spec"}, {"name": "steps2", "algorithm": "EAGLE3", "num_steps": 2}])
    sweep, run_id = sim_face.open(data)
    monkeypatch.setattr(type(sweep.adapter), "environment", lambda self: {"SPECFRONTIER_TEST_VAR": "7"})
    await sweep.run(run_id)
    stored = load_run(sweep.store, run_id).run.environment[LAUNCH_ENVIRONMENT_KEY]
    assert stored == {"no-spec": {"SPECFRONTIER_TEST_VAR": "7"}, "steps2": {"SPECFRONTIER_TEST_VAR": "7"}}
