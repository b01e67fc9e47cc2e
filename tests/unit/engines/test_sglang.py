"""SGLang adapter: argv from settings, flags probed before launch, capacity and acceptance read back."""

from __future__ import annotations

import sys

import pytest

from specfrontier.engines.sglang import (
    SGLangAdapter,
    SGLangEngine,
    SGLangSetting,
    capacity_from_server_info,
    check_schedule_taken,
    spec_stats_from_chunk,
)
from specfrontier.engines.sim import SimAdapter, SimEngine
from specfrontier.errors import ConfigError, EngineResponseError
from specfrontier.metrics.counters import PER_REQUEST_EXACT_SOURCE
from specfrontier.metrics.counters import window_counters as _window_counters
from specfrontier.records import RequestRecord, RequestSpecStats, SpecCounters

HELP = """usage: sglang serve [-h] --model-path MODEL_PATH [--host HOST] [--port PORT] [--tp-size TP_SIZE]
  --speculative-algorithm {EAGLE,EAGLE3,NEXTN,STANDALONE,NGRAM}
  --speculative-num-steps SPECULATIVE_NUM_STEPS  --speculative-eagle-topk SPECULATIVE_EAGLE_TOPK
  --speculative-num-draft-tokens SPECULATIVE_NUM_DRAFT_TOKENS  --max-running-requests MAX_RUNNING_REQUESTS
  --cuda-graph-max-bs-decode N  --cuda-graph-max-bs-prefill N
"""
ENGINE = SGLangEngine(model_path="Qwen/Qwen3.5-122B-A10B", tp_size=4, draft_model_path="eagle3-head")
STEPS4 = SGLangSetting(name="steps4", algorithm="EAGLE3", num_steps=4, eagle_topk=1)


def _flags(argv: list[str]) -> dict[str, str]:
    return {a: argv[i + 1] for i, a in enumerate(argv[:-1]) if a.startswith("--")}


def test_command_renders_the_resolved_chain_and_loopback() -> None:
    adapter = SGLangAdapter(ENGINE, help_text=HELP)
    adapter.prepare((SGLangSetting(name="base"), STEPS4))
    argv = adapter.command(STEPS4, port=30001, max_concurrency=64)
    assert argv[:3] == [sys.executable, "-m", "sglang.launch_server"]
    flags = _flags(argv)
    assert flags["--host"] == "127.0.0.1" and flags["--port"] == "30001"
    assert flags["--model-path"] == "Qwen/Qwen3.5-122B-A10B" and flags["--tp-size"] == "4"
    assert flags["--speculative-draft-model-path"] == "eagle3-head"
    assert (flags["--speculative-num-steps"], flags["--speculative-eagle-topk"]) == ("4", "1")
    assert flags["--speculative-num-draft-tokens"] == "5"
    assert "--max-running-requests" not in argv  # never raised behind the user's back; read back instead


def test_baseline_has_no_speculative_flags_and_keeps_the_users_cap() -> None:
    adapter = SGLangAdapter(ENGINE, help_text=HELP)
    argv = adapter.command(SGLangSetting(name="b", max_running_requests=26), port=1, max_concurrency=4)
    assert not any(a.startswith("--speculative-a") for a in argv)
    assert _flags(argv)["--max-running-requests"] == "26"


def test_a_server_without_the_speculative_options_is_refused_before_launch() -> None:
    old = "usage: launch_server --model-path X --host H --port P --max-running-requests N\n"
    adapter = SGLangAdapter(ENGINE, help_text=old)
    adapter.prepare((SGLangSetting(name="base"),))  # no speculation asked: fine
    with pytest.raises(ConfigError, match=r"--speculative-algorithm.*fix:"):
        adapter.prepare((SGLangSetting(name="base"), STEPS4))


def test_simulator_face_is_launched_like_an_engine() -> None:
    adapter = SimAdapter(SimEngine(face="http", time_scale=20.0, profile="seed-qwen3.5-122b-a10b"), help_text=HELP)
    argv = adapter.command(STEPS4, port=5, max_concurrency=4)
    assert argv[:3] == [sys.executable, "-m", "specfrontier.sim.serve"]
    assert _flags(argv)["--time-scale"] == "20.0"
    assert _flags(argv)["--speculative-num-steps"] == "4"


def test_capacity_prefers_the_effective_value_and_reports_the_48_reset() -> None:
    info = {"max_running_requests": 48, "max_total_num_tokens": 800000,
            "internal_states": [{"effective_max_running_requests_per_dp": 17}]}  # fmt: skip
    cap = capacity_from_server_info(info, STEPS4)
    assert cap.max_running_requests == 17
    assert cap.context_tokens == 800000
    assert "effective_max_running_requests_per_dp" in cap.source
    assert "reset the unset --max-running-requests to 48" in cap.source
    chosen = capacity_from_server_info(
        {"max_running_requests": 48}, STEPS4.model_copy(update={"max_running_requests": 48})
    )
    assert "WARNING" not in chosen.source  # the user asked for 48: no silent reset


def test_capacity_rejects_a_malformed_server_info() -> None:
    with pytest.raises(Exception, match="max_running_requests = None"):
        capacity_from_server_info({}, STEPS4)


def test_a_schedule_sglang_turned_off_at_start_up_is_not_measured_as_one() -> None:
    """SGLang disables adaptive mode with a warning under flags the adapter does not check (e.g. two-batch
    overlap in extra_args, tests/faults/test_sglang_faults.py shows SGLang's own resolution doing it) and serves
    the static setting; its /server_info says `speculative_adaptive: false` (the key SGLang reports, checked
    against its front end in tests/integration/test_sglang_schedule.py)."""
    scheduled = SGLangSetting(name="sched", algorithm="EAGLE3", num_steps=3, adaptive_config={1: [3], 8: [1]})
    check_schedule_taken({"speculative_adaptive": True}, scheduled)
    check_schedule_taken({"speculative_adaptive": False}, STEPS4)  # a static setting: nothing to check
    with pytest.raises(EngineResponseError, match=r"speculative_adaptive = false for settings\[sched\].*fix: remove"):
        check_schedule_taken({"speculative_adaptive": False}, scheduled)


@pytest.mark.parametrize("flag", ["--enable-pdmux", "--enable-multi-layer-eagle", "--enable-two-batch-overlap"])
def test_engine_flags_that_turn_sglangs_schedules_off_are_refused_where_a_schedule_is_measured(flag: str) -> None:
    """SGLang 0.5.23 runs an adaptive config as the static setting under these flags (adaptive_spec_params.py
    85-99; its own resolution doing so: tests/faults/test_sglang_faults.py); refused only where it matters."""
    from specfrontier.config.load import parse_config

    base = {"engine": {"name": "sglang", "model_path": "/m", "extra_args": [flag]}, "concurrency": [1, 2]}
    chains = [{"name": "no-spec"}, {"name": "s3", "algorithm": "EAGLE3", "num_steps": 3}]
    parse_config({**base, "settings": chains})  # no schedule: the flag is the user's business
    with pytest.raises(ConfigError, match=f"engine.extra_args has {flag} and verify_schedule measures a schedule"):
        parse_config({**base, "settings": chains, "verify_schedule": True})
    listed = [*chains, {"name": "sched", "algorithm": "EAGLE3", "num_steps": 3, "adaptive_config": {1: [3]}}]
    with pytest.raises(ConfigError, match=rf"settings\[sched\] has adaptive_config.*fix: remove {flag}"):
        parse_config({**base, "settings": listed})


def test_spec_stats_from_chat_meta_info_and_completion_sglext() -> None:
    meta = {
        "spec_verify_ct": 10,
        "spec_num_correct_drafts": 27,
        "spec_num_proposed_drafts": 40,
        "completion_tokens": 38,
    }
    chat = {"choices": [{"index": 0, "delta": {}, "finish_reason": "length", "meta_info": meta}]}
    completion = {"choices": [], "sglext": {"spec_tokens_details": meta}}
    assert spec_stats_from_chunk(chat) == RequestSpecStats(40, 27, 10)
    assert spec_stats_from_chunk(completion) == RequestSpecStats(40, 27, 10)
    assert spec_stats_from_chunk({"choices": [{"delta": {"content": "x"}}]}) is None


def test_request_extras_ask_for_nothing_streaming_chat_refuses() -> None:
    """Issue 37: every streamed chat request was refused with HTTP 400 because the extras asked for
    `return_meta_info`, which SGLang 0.5.23 refuses on a streaming chat request, as it refuses
    `return_prompt_token_ids` and `return_token_ids` (srt/entrypoints/openai/serving_chat.py:1309-1325).
    Acceptance is asked for as `return_spec_tokens_details`, a field of both CompletionRequest and
    ChatCompletionRequest (srt/entrypoints/openai/protocol.py:393, :961), reported in the stream's sglext chunk."""
    extras = SGLangAdapter.request_extras()
    assert not {"return_meta_info", "return_prompt_token_ids", "return_token_ids"} & {k for k, v in extras.items() if v}
    assert extras.get("return_spec_tokens_details") is True
    assert SimAdapter.request_extras() == extras  # the simulator's HTTP face is asked as SGLang is


def test_sglang_probe_waits_out_health_generate() -> None:
    """`/health_generate` sleeps in 1 s steps until the scheduler answered, up to HEALTH_CHECK_TIMEOUT = 20 s
    (srt/entrypoints/http_server.py:218, :779): one probe must be allowed longer than that (issue 37)."""
    assert SGLangAdapter.health_path == "/health_generate"
    assert SGLangAdapter.health_timeout_s > 20


def test_window_acceptance_is_exact_from_per_request_verify_steps() -> None:
    records = [
        RequestRecord("a", 0, 1, 0, completion_tokens=38, spec=RequestSpecStats(40, 27, 10)),
        RequestRecord("b", 0, 1, 0, completion_tokens=20, spec=RequestSpecStats(20, 12, 7)),
    ]
    counters, source = _window_counters(None, None, records, "")
    assert counters == SpecCounters(60, 39, 17)
    assert source == PER_REQUEST_EXACT_SOURCE
    assert 1 + counters.accepted_tokens / counters.verify_steps == pytest.approx(1 + 39 / 17)


def test_tune_progress_warns_about_the_silent_reset(capsys: pytest.CaptureFixture[str]) -> None:
    from specfrontier.cli.app import _events
    from specfrontier.engines import Capacity

    cap = capacity_from_server_info({"max_running_requests": 48}, STEPS4)
    ready = _events(quiet=False).on_setting_ready
    assert ready is not None
    ready(STEPS4, 1.5, cap)
    out = capsys.readouterr().out
    assert "capacity 48 requests" in out
    assert "SGLang reset the unset --max-running-requests to 48" in out
    ready(STEPS4, 1.5, Capacity(17, "sglang /server_info max_running_requests"))
    assert "reset" not in capsys.readouterr().out
