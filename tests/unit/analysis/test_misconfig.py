"""The misconfiguration check: rejected drafts, no drafts, speculation far slower for one user, and each
engine's reading of the cause. The simulator case (an EAGLE-3 head under EAGLE) runs end to end in
tests/faults (the HTTP face) and below (the virtual runner); the real llama.cpp case (a draft of another
model) in tests/integration/test_llamacpp_sweep.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from builders import StoredRun, back_to_back, closed_loop_ms, run_virtual
from specfrontier.analysis import RunData, load_run
from specfrontier.analysis.misconfig import (
    DRAFTED_NOTHING,
    DRAFTS_REJECTED,
    SLOW_FOR_ONE_USER,
    misconfiguration_lines,
    misconfigurations,
)
from specfrontier.config.common import WorkloadConfig
from specfrontier.engines.llamacpp import LlamaCppSetting
from specfrontier.engines.sglang import SGLangSetting
from specfrontier.engines.sim import SimEngine, SimTuneConfig
from specfrontier.engines.trtllm import TrtllmSetting
from specfrontier.engines.vllm import VllmSetting
from specfrontier.records import SpecCounters
from specfrontier.report import report_json
from specfrontier.sim import SimProfile, load_profile

DRAFT = {"spec_type": "draft-simple", "draft_n_max": 4}


def _run(
    tmp_path: Path,
    counters: SpecCounters | None,
    *,
    spec_ms: tuple[int, ...] = (100, 101, 102),
    base_ms: tuple[int, ...] = (100, 101, 102),
) -> RunData:
    """A llama.cpp run at C=1: baseline and one draft-model setting; request lengths per repeat (64 tokens
    each), so per-request tok/s is 64 / (length - first token) per repeat."""
    run = StoredRun(tmp_path / "s.db")
    run.setting("baseline", status="done").setting("draft", DRAFT, status="done")
    for name, lengths in (("baseline", base_ms), ("draft", spec_ms)):
        cells = (back_to_back(closed_loop_ms(1, 1, length * 10, 64)) for length in lengths)
        run.repeats(name, 1, cells, counters=[counters if name == "draft" else None] * len(lengths))
    return run.data()


def test_drafts_the_target_rejects_are_flagged_with_the_engines_cause(tmp_path: Path) -> None:
    found = misconfigurations(_run(tmp_path, SpecCounters(5784, 6, 1446)))
    assert [(m.setting, m.check) for m in found] == [("draft", DRAFTS_REJECTED)]
    assert found[0].evidence == "0.1% of 17352 drafted tokens accepted, acceptance length 1.004"  # 3 repeats pooled
    assert "engine.draft_model (-md) is not a smaller model of the target's family" in found[0].cause


@pytest.mark.parametrize(
    ("counters", "flagged"),
    [
        (SpecCounters(1000, 49, 250), True),  # 4.9 % accepted
        (SpecCounters(1000, 51, 250), False),  # 5.1 %: a weak drafter, not a broken one
        (SpecCounters(0, 4, 100), True),  # no draft count (SGLang-like): acceptance length 1.04
        (SpecCounters(0, 6, 100), False),  # acceptance length 1.06
    ],
)
def test_the_thresholds_are_five_percent_accepted_or_acceptance_length_1_05(
    tmp_path: Path, counters: SpecCounters, flagged: bool
) -> None:
    checks = [m.check for m in misconfigurations(_run(tmp_path, counters))]
    assert checks == ([DRAFTS_REJECTED] if flagged else [])


def test_a_speculative_setting_that_never_drafted_is_flagged(tmp_path: Path) -> None:
    found = misconfigurations(_run(tmp_path, SpecCounters(0, 0, 0)))
    assert [m.check for m in found] == [DRAFTED_NOTHING]
    assert "speculation is configured but not running" in found[0].cause


def test_no_counters_at_all_is_not_a_finding(tmp_path: Path) -> None:
    """An engine that offers no counters is flagged elsewhere (acceptance flag lines), not as misconfigured."""
    assert misconfigurations(_run(tmp_path, None)) == []


def test_speculation_far_slower_for_one_user_is_flagged_beyond_the_spread(tmp_path: Path) -> None:
    good_acceptance = SpecCounters(1000, 700, 250)
    slow = misconfigurations(_run(tmp_path / "a", good_acceptance, spec_ms=(150, 152, 154)))
    assert [m.check for m in slow] == [SLOW_FOR_ONE_USER]
    assert "x no speculation's" in slow[0].evidence and "each draft costs more than it saves" in slow[0].cause
    # 0.85x: slower, but not "by far"
    assert misconfigurations(_run(tmp_path / "b", good_acceptance, spec_ms=(118, 119, 120))) == []


def test_a_slow_setting_whose_repeats_overlap_the_baseline_is_not_flagged(tmp_path: Path) -> None:
    """Median 0.67x, but one repeat of the setting is as fast as a slow repeat of the baseline: noise."""
    run = _run(tmp_path, SpecCounters(1000, 700, 250), spec_ms=(150, 152, 100), base_ms=(100, 101, 150))
    assert misconfigurations(run) == []


def test_the_finding_reaches_the_flag_lines_and_the_json(tmp_path: Path) -> None:
    run = _run(tmp_path, SpecCounters(5784, 6, 1446), spec_ms=(300, 302, 304))
    lines = misconfiguration_lines(run)
    assert lines[0].startswith("draft: likely misconfigured: 0.1% of 17352 drafted tokens accepted")
    assert lines[1].startswith("draft: likely misconfigured: at C=1 per-request tok/s p50")
    assert lines[1].endswith("likely cause: its drafts are rejected (see the finding above)")
    doc = report_json(run)
    assert [(m["setting"], m["check"]) for m in doc["misconfiguration"]] == [
        ("draft", DRAFTS_REJECTED),
        ("draft", SLOW_FOR_ONE_USER),
    ]


@pytest.mark.parametrize(
    ("setting", "expected"),
    [
        (SGLangSetting(name="s", algorithm="EAGLE", num_steps=2), "(here likely EAGLE3)"),
        (SGLangSetting(name="s", algorithm="EAGLE3", num_steps=2), "(here likely EAGLE)"),
        (SGLangSetting(name="s", algorithm="NEXTN", num_steps=2), "checkpoint's own MTP layers"),
        (VllmSetting(name="v", method="eagle3", num_speculative_tokens=2), "(here likely eagle)"),
        (VllmSetting(name="v", method="ngram", num_speculative_tokens=2), "rarely repeats it"),
        (TrtllmSetting(name="t", decoding_type="MTP", max_draft_len=2), "checkpoint's own MTP layers"),
        (LlamaCppSetting(name="l", spec_type="ngram-simple"), "rarely repeats it"),
        (LlamaCppSetting(name="l", **DRAFT), "compatible vocabulary"),
    ],
)
def test_each_engine_reads_rejected_drafts_in_its_own_terms(setting: Any, expected: str) -> None:
    assert expected in setting.rejected_drafts_hint()


def _virtual_run(tmp_path: Path, profile: SimProfile, settings: tuple[SGLangSetting, ...]) -> RunData:
    config = SimTuneConfig(
        engine=SimEngine(profile="seed-qwen3.5-122b-a10b"),
        settings=settings,
        concurrency=(1, 4),
        repeats=3,
        rounds_per_cell=3,
        workload=WorkloadConfig(max_tokens=128, ignore_eos=True),
    )
    return load_run(*run_virtual(config, tmp_path / "v.db", profile))


def test_the_simulator_models_an_eagle3_head_under_eagle_and_the_check_catches_it(tmp_path: Path) -> None:
    settings = (
        SGLangSetting(name="no-spec"),
        SGLangSetting(name="right", algorithm="EAGLE3", num_steps=3, eagle_topk=1),
        SGLangSetting(name="wrong", algorithm="EAGLE", num_steps=3, eagle_topk=1),
    )
    run = _virtual_run(tmp_path, load_profile("seed-qwen3.5-122b-a10b"), settings)
    found = misconfigurations(run)
    assert [(m.setting, m.check) for m in found] == [("wrong", DRAFTS_REJECTED)]
    assert "acceptance length 1.000" in found[0].evidence
    right = run.pooled_counters("right")
    assert right is not None and (right.acceptance_length or 0) > 3  # the right head accepts (0.933 per position)


def test_a_draft_too_costly_for_its_acceptance_is_flagged_slow_in_the_simulator(tmp_path: Path) -> None:
    base = load_profile("seed-qwen3.5-122b-a10b")
    costly = base.model_copy(update={"cycle": base.cycle.model_copy(update={"draft_step_ms": 40.0})})
    settings = (SGLangSetting(name="no-spec"), SGLangSetting(name="costly", algorithm="EAGLE3", num_steps=3))
    found = misconfigurations(_virtual_run(tmp_path, costly, settings))
    assert [(m.setting, m.check) for m in found] == [("costly", SLOW_FOR_ONE_USER)]
    assert "each draft costs more than it saves" in found[0].cause
