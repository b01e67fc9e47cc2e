"""The simulator's model of a per-batch-size schedule: SGLang's routing and controller, the event loop running
each iteration at its entry's depth, and SGLang's start-up checks (setting, face, adapter)."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest
from pydantic import ValidationError

from builders import run_virtual
from schedule_rules import sglang_check_num_steps, sglang_slot_for_batch
from specfrontier.analysis import RunData, load_run
from specfrontier.analysis.decisions import recommend
from specfrontier.analysis.schedule_check import (
    HOLDS,
    LOSES,
    schedule_summary_lines,
    unreachable_ranges,
    verify_schedules,
)
from specfrontier.config.common import WorkloadConfig
from specfrontier.engines.sglang import SGLangAdapter, SGLangEngine, SGLangSetting
from specfrontier.engines.sim import SimEngine, SimTuneConfig
from specfrontier.errors import ConfigError
from specfrontier.report import report_json, report_markdown
from specfrontier.report.tables import flag_lines
from specfrontier.schedules.verify import SCHEDULE_SETTING
from specfrontier.sim.core import ServerCore
from specfrontier.sim.profile import load_profile
from specfrontier.sim.schedule import ScheduleState, SlotController
from specfrontier.sim.serve import build_parser, make_config
from specfrontier.sim.setting import SimSetting, resolve_setting

SEED = "seed-qwen3.5-122b-a10b"


def _feed(controller: SlotController, accepted: float, batches: int) -> list[int]:
    steps = []
    for _ in range(batches):
        controller.observe(accepted)
        steps.append(controller.steps)
    return steps


def test_one_candidate_pins_the_depth() -> None:
    assert set(_feed(SlotController([3], 3), 0.1, 40)) == {3}


def test_high_acceptance_moves_up_only_after_warmup_and_at_the_update_interval() -> None:
    steps = _feed(SlotController([1, 3, 5, 7], 3), 4.2, 40)
    assert steps[:14] == [3] * 14  # 10 warm-up batches, then every 5th: the first move is at batch 15
    assert steps[14] == 5  # EMA 4.12 > 3 - 0.5, not > 5 - 0.5: one candidate up
    assert set(steps[15:]) == {5}


def test_low_acceptance_moves_down_by_the_hysteresis_rule() -> None:
    steps = _feed(SlotController([1, 3, 5, 7], 5), 0.3, 15)
    # EMA from 4 towards 0.3: 0.43 at batch 15 is <= 3 - 0.5 - 0.25 but not <= 1 - 0.5 - 0.25: down to 3.
    assert steps[-1] == 3


def test_no_drafting_probes_the_next_candidate_up() -> None:
    assert _feed(SlotController([0, 1], 0), 0.0, 15)[-1] == 1


def test_a_batch_is_routed_to_the_entry_with_the_largest_batch_size_not_above_it() -> None:
    state = ScheduleState(((1, (4,)), (8, (2,)), (32, (0,))), initial=4)
    config = {"1": {"candidate_steps": [4]}, "8": {"candidate_steps": [2]}, "32": {"candidate_steps": [0]}}
    for batch in (1, 7, 8, 31, 32, 100):
        assert [state.controller(batch).steps] == sglang_slot_for_batch(config, batch)


def test_the_server_sizes_capacity_for_the_deepest_candidate_and_runs_each_iteration_at_its_entrys_depth() -> None:
    profile = load_profile(SEED)
    resolved = resolve_setting(SimSetting("EAGLE3", 4, 1, None, None, ((1, (4,)), (4, (1,)))))
    static4 = resolve_setting(SimSetting("EAGLE3", 4, 1))
    core = ServerCore(profile, resolved, seed=0)
    assert core.capacity == ServerCore(profile, static4, seed=0).capacity
    workload = profile.workload("synthetic")
    for i in range(6):
        core.submit(
            core.new_request(
                f"r{i}", send_ns=0, workload=workload, temperature=0.0, ignore_eos=True, prompt_tokens=16, max_tokens=64
            )
        )
    seen = []
    while core.busy:
        step = core.step()
        if step.kind == "decode":
            seen.append((step.batch, core._depth(step.batch)))
    assert {depth for batch, depth in seen if batch >= 4} == {1}
    assert {depth for batch, depth in seen if batch < 4} <= {4}


def _run(tmp_path: Path, *extra: SGLangSetting, verify: bool = False, levels: tuple[int, ...] = (1, 4, 8)) -> RunData:
    settings = [SGLangSetting(name="no-spec")]
    settings += [SGLangSetting(name=f"steps{s}", algorithm="EAGLE3", num_steps=s, eagle_topk=1) for s in (1, 2, 3, 4)]
    config = SimTuneConfig(
        engine=SimEngine(profile=SEED),
        settings=(*settings, *extra),
        concurrency=levels,
        repeats=3,
        rounds_per_cell=6,
        workload=WorkloadConfig(max_tokens=128, ignore_eos=True),
        verify_schedule=verify,
    )
    return load_run(*run_virtual(config, tmp_path / "s.db"))


def test_a_pinned_schedule_runs_like_the_static_chain_it_pins(tmp_path: Path) -> None:
    pinned = SGLangSetting(name="pinned", algorithm="EAGLE3", num_steps=3, eagle_topk=1, adaptive_config={1: [3]})
    run = _run(tmp_path, pinned)
    for level in (1, 4, 8):
        a, b = run.cell("pinned", level), run.cell("steps3", level)
        assert a is not None and b is not None
        assert a.aggregate_tok_s.median == pytest.approx(b.aggregate_tok_s.median, rel=0.03)


def test_sglangs_start_up_rules_are_checked_before_launch() -> None:
    def adaptive(**fields: object) -> SGLangSetting:
        return SGLangSetting.model_validate({"name": "a", "algorithm": "EAGLE3", "num_steps": 3, **fields})

    with pytest.raises(ValidationError, match=r"num_steps = 3 is not among the adaptive candidate steps \[1, 2\]"):
        adaptive(adaptive_config={1: [2], 8: [1]})
    with pytest.raises(ValidationError, match="needs eagle_topk = 1"):
        adaptive(eagle_topk=2, num_draft_tokens=4, adaptive_config={1: [3]})
    with pytest.raises(ValidationError, match="drafts at no batch size"):
        SGLangSetting.model_validate({"name": "a", "algorithm": "EAGLE3", "num_steps": 1, "adaptive_config": {1: [0]}})
    with pytest.raises(ValidationError, match="keys are batch sizes >= 1"):
        adaptive(adaptive_config={0: [3]})
    with pytest.raises(ValidationError, match="adaptive mode runs EAGLE/EAGLE3 only"):
        SGLangSetting.model_validate({"name": "a", "algorithm": "NEXTN", "num_steps": 3, "adaptive_config": {1: [3]}})
    ok = adaptive(adaptive_config={1: [3], 16: [1], 64: [0]})
    assert ok.scheduled and ok.depth_field is None and ok.schedule_batch_sizes == (1, 16, 64)


def test_the_adapter_writes_the_config_sglang_reads_and_the_face_runs_it(tmp_path: Path) -> None:
    setting = SGLangSetting(name="a", algorithm="EAGLE3", num_steps=4, adaptive_config={1: [4], 8: [2], 32: [0]})
    adapter = SGLangAdapter(SGLangEngine(model_path="/m"), help_text="")
    adapter.files_dir = tmp_path / "specfrontier-logs" / "run"  # what a sweep sets: beside the server logs
    argv = adapter.command(setting, port=30001, max_concurrency=8)
    path = Path(argv[argv.index("--speculative-adaptive-config") + 1])
    assert path == tmp_path / "specfrontier-logs" / "run" / "a.adaptive.json"  # outlives the run
    config = json.loads(path.read_text(encoding="utf-8"))
    assert config == {"1": {"candidate_steps": [4]}, "8": {"candidate_steps": [2]}, "32": {"candidate_steps": [0]}}
    sglang_check_num_steps(config, int(argv[argv.index("--speculative-num-steps") + 1]))
    assert "--speculative-adaptive" in argv
    face_argv = argv[argv.index("--speculative-algorithm") :]
    face = make_config(build_parser().parse_args(["--profile", SEED, *face_argv]))
    assert face.setting.schedule == ((1, (4,)), (8, (2,)), (32, (0,))) and face.setting.num_steps == 4
    bad = tmp_path / "bad.json"
    bad.write_text('{"1": {"steps": [3]}}', encoding="utf-8")
    args = shlex.split(f"--speculative-algorithm EAGLE3 --speculative-num-steps 3 --speculative-adaptive "
                       f"--speculative-adaptive-config {bad}")  # fmt: skip
    with pytest.raises(ConfigError, match="not a config of"):
        make_config(build_parser().parse_args(args))


def test_tune_verifies_the_measured_schedule_and_catches_one_that_switches_at_the_wrong_batch_size(
    tmp_path: Path,
) -> None:
    """issue 16: the measured best depth per batch size runs as one more setting (verify_schedule); on the
    seed it is depth 4 to batch size 15 and depth 2 at 16, and it holds where depth 4 runs but LOSES at C=16:
    the server sizes its capacity for the deepest depth (15 requests), so the range past it never runs as
    planned (docs/schedules.md); a schedule that drops to depth 1 from batch size 2 (the wrong switch) is
    caught at every level past it, flagged, and never recommended there."""
    wrong = SGLangSetting(name="wrong-switch", algorithm="EAGLE3", num_steps=4, adaptive_config={1: [4], 2: [1]})
    run = _run(tmp_path, wrong, verify=True, levels=(1, 4, 8, 16))
    assert SCHEDULE_SETTING in run.measured_settings()
    verdicts = {(lv.schedule, lv.level): lv for lv in verify_schedules(run)}
    assert [verdicts[SCHEDULE_SETTING, c].verdict for c in (1, 4, 8, 16)] == [HOLDS, HOLDS, HOLDS, LOSES]
    assert [verdicts["wrong-switch", c].verdict for c in (1, 4, 8)] == [HOLDS, LOSES, LOSES]
    assert (verdicts["wrong-switch", 4].vs_best_pct or 0) < -30  # depth 1 where depth 4 wins
    lines = schedule_summary_lines(run)
    assert any(line.startswith(f"{SCHEDULE_SETTING} (per-batch-size schedule) LOSES") for line in lines), lines
    assert any(
        line.startswith("wrong-switch (per-batch-size schedule) LOSES beyond the noise at C=4, C=8") for line in lines
    )
    assert any("wrong-switch (per-batch-size schedule) LOSES" in line for line in flag_lines(run))
    assert all(r.setting != "wrong-switch" for r in recommend(run))
    doc = report_json(run)
    rows = [r for r in doc["schedule_verification"] if r["schedule"] == "wrong-switch"]
    assert [r["verdict"] for r in rows] == [HOLDS, LOSES, LOSES, LOSES] and rows[1]["best_static"] == "steps4"
    assert all(r.setting != SCHEDULE_SETTING or 16 not in r.concurrency for r in recommend(run))  # it LOSES there
    assert "Schedule verification" in report_markdown(run)


def test_a_schedule_whose_ranges_the_capacity_never_reaches_is_flagged(tmp_path: Path) -> None:
    """The server sizes its capacity for the deepest depth (15 requests at depth 4 on the seed profile), so
    a range from batch size 16 never runs: the report says so with the fix."""
    unreachable = SGLangSetting(name="deep-then-1", algorithm="EAGLE3", num_steps=4, adaptive_config={1: [4], 16: [1]})
    run = _run(tmp_path, unreachable)
    assert run.setting("deep-then-1").capacity == 15
    assert unreachable_ranges(run, "deep-then-1") == [16]
    assert any("the ranges from batch size 16 never run" in line for line in flag_lines(run))


def test_verify_schedule_is_refused_where_it_cannot_run() -> None:
    from specfrontier.config.load import parse_config

    llama = {"engine": {"name": "llamacpp", "model": "m.gguf"}, "settings": [{"name": "b"}], "verify_schedule": True}
    with pytest.raises(ConfigError, match="verify_schedule: engine llamacpp has no per-batch-size schedule"):
        parse_config(llama)
    sim = {
        "engine": {"name": "sim", "face": "http"},
        "verify_schedule": True,
        "load": {"mode": "open", "rates": [1], "duration_s": 5},
    }
    with pytest.raises(ConfigError, match="verify_schedule: a schedule is keyed by batch size"):
        parse_config(sim)
