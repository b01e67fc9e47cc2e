"""`tune --engine sim`: a simulated run lands in the store like a real one and says it is simulated."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from builders import Cli
from specfrontier.analysis import load_run
from specfrontier.analysis.compare import compare_runs
from specfrontier.config.load import parse_config
from specfrontier.engines.sglang import SGLangSetting
from specfrontier.engines.sim import SimEngine, SimTuneConfig, seed_sim_config
from specfrontier.errors import ConfigError
from specfrontier.report import report_json, report_markdown
from specfrontier.report.compare import comparison_summary
from specfrontier.runs.virtual_sweep import VirtualSweep, sglang_command
from specfrontier.store import Store


def _small(**engine: object) -> SimTuneConfig:
    return SimTuneConfig(
        engine=SimEngine(**engine),  # type: ignore[arg-type]
        settings=(
            SGLangSetting(name="no-spec"),
            SGLangSetting(name="steps3", algorithm="EAGLE3", num_steps=3, eagle_topk=1),
        ),
        concurrency=(1, 4),
        repeats=2,
        rounds_per_cell=2,
    )


def test_virtual_run_is_stored_marked_simulated_and_deterministic(tmp_path: Path) -> None:
    results = []
    for name in ("a.db", "b.db"):
        sweep = VirtualSweep(_small())
        sweep.attach(Store(tmp_path / name))
        run_id = sweep.new_run()
        sweep.run_sync(run_id)
        results.append(load_run(sweep.store, run_id))
    first, second = results
    assert first.run.status == "done" and first.run.environment["simulated"] is True
    assert len(first.cells) == 2 * 2 and {c.repeats for c in first.cells} == {2}
    assert [c.aggregate_tok_s.median for c in first.cells] == [c.aggregate_tok_s.median for c in second.cells]
    spec = first.cell("steps3", 1)
    assert spec is not None and spec.acceptance_length is not None and spec.acceptance_length > 1
    steps3 = first.setting("steps3")
    assert steps3.capacity is not None and "model" in (steps3.capacity_source or "")
    assert steps3.command is not None and "--speculative-num-draft-tokens" in steps3.command
    assert report_json(first)["run"]["simulated"] is True
    assert "SIMULATED" in report_markdown(first)


def test_resume_skips_stored_cells(tmp_path: Path) -> None:
    sweep = VirtualSweep(_small())
    sweep.attach(Store(tmp_path / "s.db"))
    run_id = sweep.new_run()
    sweep.run_sync(run_id)
    before = len(sweep.store.cells(run_id))
    sweep.run_sync(run_id)  # everything is stored already: nothing is measured twice
    assert len(sweep.store.cells(run_id)) == before


def test_sglang_command_spells_the_resolved_chain() -> None:
    argv = sglang_command(
        SGLangSetting(name="s4", algorithm="EAGLE3", num_steps=4, eagle_topk=1, max_running_requests=15)
    )
    assert argv[:3] == ["python", "-m", "sglang.launch_server"]
    flags = dict(zip(argv[5::2], argv[6::2], strict=False))
    assert flags["--speculative-num-steps"] == "4"
    assert flags["--speculative-num-draft-tokens"] == "5"  # topk 1: steps + 1, as SGLang resolves it
    assert flags["--max-running-requests"] == "15"


def test_seed_default_is_the_seed_grid_extended_to_steps5() -> None:
    cfg = seed_sim_config()
    assert cfg.concurrency == (1, 4, 16, 32, 64)
    assert [s.num_steps for s in cfg.settings if s.speculative] == [1, 2, 3, 4, 5]
    assert cfg.workload.temperature == 0.0 and cfg.workload.ignore_eos


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ({"name": "x", "algorithm": "EAGLE3", "num_steps": 3, "eagle_topk": 1, "num_draft_tokens": 6}, "steps + 1"),
        ({"name": "x", "algorithm": "EAGLE3", "num_steps": 2, "eagle_topk": 2, "num_draft_tokens": 9}, "<= 7"),
        ({"name": "x", "algorithm": "EAGLE3", "eagle_topk": 2}, "fix: set num_steps"),
        ({"name": "x", "num_steps": 2}, "need a speculative algorithm"),
    ],
)
def test_sglang_constraints_are_checked_before_anything_runs(setting: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match="fix:") as info:
        parse_config({"engine": {"name": "sim"}, "settings": [{"name": "base"}, setting]})
    assert message in str(info.value)


def test_unknown_profile_is_refused_before_a_store_exists(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"seed-qwen3\.5-122b-a10b"):
        VirtualSweep(_small(profile="no-such-profile"))
    assert not list(tmp_path.iterdir())


def _sim_config(folder: Path, levels: str) -> Path:
    """A simulator config file at C = `levels` (no-spec and steps2, one repeat), in `folder`."""
    config = folder / "sim.yaml"
    config.write_text(
        f"engine: {{name: sim}}\nconcurrency: [{levels}]\nrepeats: 1\n"
        "settings:\n  - name: no-spec\n  - {name: steps2, algorithm: EAGLE3, num_steps: 2}\n"
    )
    return config


def test_cli_runs_the_simulator_and_reports_json(tmp_path: Path, cli: Cli) -> None:
    store = tmp_path / "s.db"
    code, out, _ = cli("tune", "--config", str(_sim_config(tmp_path, "1, 16")), "--store", str(store), "-q")
    assert code == 0
    assert "SIMULATED" in out
    runs = json.loads(cli("runs", "--json", "--store", str(store))[1])
    assert [(r["engine"], r["status"]) for r in runs] == [("sim", "done")]
    page = tmp_path / f"s-{runs[0]['id']}.html"  # tune writes the HTML report next to the store
    assert f"HTML report: {page}" in out.replace("\n", "")
    assert "SIMULATED" in page.read_text(encoding="utf-8")


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["tune", "--engine", "exllamav2"], "--engine = 'exllamav2': unknown engine"),
        (["tune", "--profile", "x"], "--profile = 'x' needs the simulator"),
        (["tune", "--engine", "sim", "--profile", "nope"], "nope"),
    ],
)
def test_cli_engine_and_profile_errors(argv: list[str], expected: str, cli: Cli) -> None:
    code, _, err = cli(*argv)
    assert code == 2
    assert expected in err


def _run(cfg: SimTuneConfig, store: Store) -> str:
    sweep = VirtualSweep(cfg)
    sweep.attach(store)
    run_id = sweep.new_run()
    sweep.run_sync(run_id)
    return run_id


def test_production_sampling_lowers_acceptance_and_the_comparison_says_what_changes(tmp_path: Path, cli: Cli) -> None:
    store = Store(tmp_path / "s.db")
    best = _small()
    production = best.model_copy(
        update={
            "engine": best.engine.model_copy(update={"workload_class": "chat"}),
            "workload": best.workload.model_copy(update={"temperature": 0.7, "ignore_eos": False}),
        }
    )
    run_a, run_b = _run(best, store), _run(production, store)
    cmp = compare_runs(load_run(store, run_a), load_run(store, run_b))
    steps3 = next(d for d in cmp.acceptance if d.setting == "steps3")
    assert steps3.length_a is not None and steps3.length_b is not None and steps3.length_b < steps3.length_a
    assert [r.concurrency for r in cmp.recommendations] == [1, 4]
    assert {(d.setting, d.concurrency) for d in cmp.cells} == {(s, c) for s in ("no-spec", "steps3") for c in (1, 4)}
    lines = comparison_summary(cmp)
    assert lines and all("C=" in line or "same at every" in line for line in lines)
    code, out, _ = cli("compare", run_a, run_b, "--store", str(tmp_path / "s.db"))
    assert code == 0
    assert "Recommendation per concurrency" in out and "Acceptance: A vs B" in out


def test_tune_events_jsonl_keeps_stdout_machine_readable(tmp_path: Path, cli: Cli) -> None:
    store = tmp_path / "s.db"
    argv = ["tune", "--config", str(_sim_config(tmp_path, "1, 4")), "--store", str(store), "--events", "jsonl"]
    code, out, err = cli(*argv)
    assert code == 0
    events = [json.loads(line) for line in out.splitlines()]
    cells = [e for e in events if e["event"] == "cell_done"]
    assert [(e["setting"], e["concurrency"], e["done"], e["total"]) for e in cells] == [
        ("no-spec", 1, 1, 4),
        ("no-spec", 4, 2, 4),
        ("steps2", 1, 3, 4),
        ("steps2", 4, 4, 4),
    ]
    assert events[-1]["event"] == "run_done" and Path(events[-1]["html"]).is_file()
    assert "Recommendation" in err  # the human report still reaches the terminal, on stderr

    code, _, err = cli(*argv[:-1], "xml")
    assert code == 2 and "--events = 'xml'" in err


def test_cells_simulated_in_worker_processes_equal_those_simulated_in_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A virtual cell is a pure function of its setting, level and repeat: workers change nothing stored."""
    import contextlib

    from specfrontier.runs import virtual_sweep as runner
    from specfrontier.sim import cells

    stored = []
    for name, workers in (("pool.db", cells.cell_workers), ("alone.db", lambda: contextlib.nullcontext(None))):
        monkeypatch.setattr(runner, "cell_workers", workers)
        sweep = VirtualSweep(_small())
        sweep.attach(Store(tmp_path / name))
        run_id = sweep.new_run()
        sweep.run_sync(run_id)
        stored.append(
            [(c.setting_id, c.concurrency, c.repeat, c.counters, tuple(c.requests), c.stored_digest)
             for c in sweep.store.cells(run_id)]
        )  # fmt: skip
    with cells.cell_workers() as pool:
        assert pool is not None  # this machine has the cores: the first run really used workers
    assert stored[0] == stored[1] and len(stored[0]) == 2 * 2 * 2
