"""TensorRT-LLM's draft_len_schedule as a setting: its rules before launch, the conversion `verify_schedule`
uses, the simulator face reading it, and a verified schedule measured end to end through that face."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from schedule_rules import trtllm_lookup
from specfrontier.analysis import load_run
from specfrontier.analysis.schedule_check import verify_schedules
from specfrontier.config.load import parse_config
from specfrontier.engines.trtllm import TrtllmEngine, TrtllmSetting, llm_api_options
from specfrontier.errors import ConfigError
from specfrontier.runs.sweep import open_sweep
from specfrontier.schedules.verify import SCHEDULE_SETTING
from specfrontier.sim.trtllm_serve import resolve_speculation

ENGINE = TrtllmEngine(model="/m", speculative_model="/d")
EAGLE3_4 = {"decoding_type": "Eagle3", "max_draft_len": 4}


def _setting(**fields: Any) -> TrtllmSetting:
    return TrtllmSetting.model_validate({"name": "s", "decoding_type": "Eagle3", "max_draft_len": 4, **fields})


def test_trtllms_own_rules_are_checked_before_launch() -> None:
    with pytest.raises(ValidationError, match="TensorRT-LLM requires max_draft_len = 4 there"):
        _setting(draft_len_schedule={4: 2, 32: 1})
    with pytest.raises(ValidationError, match=r"values 0..max_draft_len \(4\)"):
        _setting(draft_len_schedule={4: 4, 32: 5})
    with pytest.raises(ValidationError, match="vanilla MTP opts out"):
        _setting(decoding_type="MTP", draft_len_schedule={4: 4})
    ok = _setting(draft_len_schedule={4: 4, 16: 2, 64: 0})
    assert ok.scheduled and ok.depth_field is None and ok.schedule_batch_sizes == (1, 5, 17)
    spec = llm_api_options(ok, ENGINE)["speculative_config"]
    assert spec["draft_len_schedule"] == {4: 4, 16: 2, 64: 0}
    dense = trtllm_lookup(spec["draft_len_schedule"], spec["max_draft_len"], 80)
    assert (dense[4], dense[5], dense[16], dense[17], dense[64], dense[65]) == (4, 2, 2, 0, 0, 0)


def test_a_schedule_by_first_batch_size_becomes_upper_bound_keys() -> None:
    """`with_schedule` takes ranges by their first batch size (how every engine's schedule is built here)."""
    template = TrtllmSetting(name="eagle3-4", decoding_type="Eagle3", max_draft_len=4)
    keep = template.with_schedule([(1, 4), (8, 2), (32, 1)], "x")
    assert keep.draft_len_schedule == {7: 4, 31: 2, 2048: 1}  # the last range runs to max_batch_size
    off = template.with_schedule([(1, 4), (8, 2), (32, 0)], "x")
    assert off.draft_len_schedule == {7: 4, 31: 2}  # no speculation from 32: the schedule ends at 31
    dense = trtllm_lookup(off.draft_len_schedule, 4, 40)
    assert (dense[1], dense[7], dense[8], dense[31], dense[32]) == (4, 4, 2, 2, 0)
    with pytest.raises(ValueError, match="nothing to schedule"):
        template.with_schedule([(1, 0)], "x")


def test_the_face_runs_the_schedule_as_trtllm_reads_it() -> None:
    spec = {
        "decoding_type": "Eagle3",
        "max_draft_len": 4,
        "speculative_model": "/d",
        "draft_len_schedule": {7: 4, 31: 2},
    }
    resolved = resolve_speculation(spec, 64)
    assert resolved.schedule == ((1, (4,)), (8, (2,)), (32, (0,))) and resolved.num_steps == 4
    with pytest.raises(ConfigError, match="smallest batch size must equal max_draft_len"):
        resolve_speculation({**spec, "draft_len_schedule": {7: 2}}, 64)


async def test_verify_schedule_measures_a_trtllm_schedule_through_the_face(tmp_path: Path) -> None:
    config = {
        "engine": {
            "name": "trtllm",
            "model": "/models/target",
            "speculative_model": "/models/eagle3",
            "launcher": [sys.executable, "-m", "specfrontier.sim.trtllm_serve"],
            "startup_timeout_s": 30,
            "extra_args": ["--sim_time_scale", "20"],
        },
        "settings": [
            {"name": "baseline"},
            {"name": "eagle3-1", "decoding_type": "Eagle3", "max_draft_len": 1},
            {"name": "eagle3-4", **EAGLE3_4},
            {
                "name": "wrong-switch",
                "decoding_type": "Eagle3",
                "max_draft_len": 4,
                "draft_len_schedule": {1: 4, 2048: 1},
            },
        ],
        "concurrency": [1, 4],
        "repeats": 2,
        "rounds_per_cell": 4,
        "workload": {"max_tokens": 64, "ignore_eos": True},
        "verify_schedule": True,
        "max_client_lag_share": 1.0,  # 20-50 ms requests: a busy host's client lag must not decide the schedule
        "store": str(tmp_path / "t.db"),
    }
    sweep, run_id = open_sweep(parse_config(config), None, resume=None)
    await sweep.run(run_id)
    run = load_run(sweep.store, run_id)
    # depth 4 is the best at every level with a steady state: the schedule is one range, the static eagle3-4,
    # so verify_schedule measures nothing (issue 31: such a schedule is never recommended over its setting)
    assert SCHEDULE_SETTING not in run.measured_settings()
    assert sweep.planner is not None and "verify_schedule: nothing to measure: eagle3-4" in sweep.planner.stop_reason
    wrong = run.pooled_counters("wrong-switch")
    at_one, at_four = run.cell("wrong-switch", 1), run.cell("wrong-switch", 4)
    assert wrong is not None and at_one is not None and at_four is not None
    assert at_one.counters is not None and at_one.counters.draft_tokens == 4 * at_one.counters.verify_steps
    assert at_four.counters is not None and at_four.counters.draft_tokens < 1.2 * at_four.counters.verify_steps
    assert {lv.schedule for lv in verify_schedules(run)} == {"wrong-switch"}  # the user's schedule, through the face
