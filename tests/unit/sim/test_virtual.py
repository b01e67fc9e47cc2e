"""The virtual-time face over the event loop: records, determinism, capacity, acceptance by workload."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import pytest

from specfrontier.errors import ConfigError
from specfrontier.metrics.prepared import peak_concurrency
from specfrontier.metrics.window import cell_metrics
from specfrontier.records import RequestRecord
from specfrontier.sim import SimProfile, SimSetting, load_profile, simulate_cell

SEED = "seed-qwen3.5-122b-a10b"


@pytest.fixture(scope="module")
def profile() -> SimProfile:
    return load_profile(SEED)


def _cell(profile: SimProfile, setting: SimSetting, **overrides: object) -> list[RequestRecord]:
    args: dict[str, object] = {
        "concurrency": 4,
        "num_requests": 12,
        "workload": "synthetic",
        "temperature": 0.0,
        "ignore_eos": True,
        "input_tokens": 128,
        "max_tokens": 128,
        "warmup_requests": 4,
        "seed": 7,
        "client_gap_ms": 0.0,
    }
    args.update(overrides)
    return simulate_cell(profile, setting, **args)  # type: ignore[arg-type]


def _running(records: Sequence[RequestRecord]) -> list[RequestRecord]:
    """Records re-timed to their decode interval [first token, end): what holds a running slot."""
    return [dataclasses.replace(r, send_ns=r.first_token_ns or r.send_ns) for r in records]


def test_same_seed_same_records_and_other_seed_differs(profile: SimProfile) -> None:
    setting = SimSetting("EAGLE3", num_steps=3, eagle_topk=1)
    first = _cell(profile, setting, seed=11)
    assert first == _cell(profile, setting, seed=11)
    assert first != _cell(profile, setting, seed=12)


def test_chunks_carry_accepted_drafts_and_counts_are_consistent(profile: SimProfile) -> None:
    steps = 3
    records = _cell(profile, SimSetting("EAGLE3", num_steps=steps, eagle_topk=1))
    assert len(records) == 12 and not any(r.prompt_id.startswith("warmup") for r in records)
    for r in records:
        assert r.chunk_tokens is not None and r.spec is not None and r.spec.verify_steps is not None
        assert sum(r.chunk_tokens) == r.completion_tokens == 128
        assert len(r.chunk_ns) == len(r.chunk_tokens) and list(r.chunk_ns) == sorted(r.chunk_ns)
        assert r.first_token_ns == r.chunk_ns[0] and r.end_ns == r.chunk_ns[-1] and r.chunk_tokens[0] == 1
        assert max(r.chunk_tokens) > 1 and max(r.chunk_tokens) <= steps + 1
        # One chunk per verify step after the prefill token; acceptance length = 1 + accepted / verify steps.
        assert r.spec.verify_steps == len(r.chunk_tokens) - 1
        assert r.completion_tokens == 1 + r.spec.verify_steps + r.spec.accepted_tokens
        tau = 1 + r.spec.accepted_tokens / r.spec.verify_steps
        assert tau == pytest.approx((r.completion_tokens - 1) / r.spec.verify_steps)
        assert 1 < tau <= steps + 1
        assert r.spec.draft_tokens == steps * r.spec.verify_steps
        assert r.finish_reason == "length"
    metrics = cell_metrics(records)
    assert metrics.tokens_per_chunk_mean is not None and metrics.tokens_per_chunk_mean > 2
    assert metrics.request_acceptance_rate is not None and 0.8 < metrics.request_acceptance_rate < 1


def test_without_speculation_every_chunk_is_one_token(profile: SimProfile) -> None:
    records = _cell(profile, SimSetting())
    assert all(r.spec is None and set(r.chunk_tokens or ()) == {1} for r in records)


def test_concurrency_above_capacity_queues(profile: SimProfile) -> None:
    setting = SimSetting("EAGLE3", num_steps=3, eagle_topk=1)  # capacity law: 17
    records = _cell(profile, setting, concurrency=32, num_requests=96, max_tokens=256, warmup_requests=32)
    running = _running(records)
    window = max(r.end_ns for r in records) - min(r.send_ns for r in records)
    mean_running = sum(r.end_ns - r.send_ns for r in running) / window
    assert peak_concurrency(running) == 17
    assert mean_running == pytest.approx(17, rel=0.15)
    metrics = cell_metrics(records)
    # In flight (queued + running) is about C; the queue shows up as time to first token.
    assert metrics.achieved_concurrency is not None and metrics.achieved_concurrency > 25
    below = cell_metrics(_cell(profile, setting, concurrency=16, num_requests=48, max_tokens=256, warmup_requests=16))
    assert metrics.ttft_p50_ms is not None and below.ttft_p50_ms is not None
    assert metrics.ttft_p50_ms > 3 * below.ttft_p50_ms


def test_unset_max_running_requests_is_capped_at_48_under_speculation(profile: SimProfile) -> None:
    roomy = profile.model_copy(update={"capacity": profile.capacity.model_copy(update={"state_slots": 10_000.0})})
    common = {"concurrency": 64, "num_requests": 128, "max_tokens": 64, "warmup_requests": 0}
    unset = _running(_cell(roomy, SimSetting("EAGLE3", num_steps=2), **common))
    assert peak_concurrency(unset) == 48
    explicit = _running(_cell(roomy, SimSetting("EAGLE3", num_steps=2, max_running_requests=60), **common))
    assert peak_concurrency(explicit) == 60
    no_spec = _running(_cell(roomy, SimSetting(), **common))
    assert peak_concurrency(no_spec) == min(64, roomy.capacity.no_spec_capacity)


def _best_steps_at_c1(profile: SimProfile, **overrides: object) -> tuple[int, dict[int, float]]:
    rates: dict[int, float] = {}
    tok_s: dict[int, float] = {}
    for steps in range(1, 9):
        m = cell_metrics(
            _cell(profile, SimSetting("EAGLE3", num_steps=steps), concurrency=1, num_requests=24, **overrides)
        )
        assert m.per_request_tok_s_p50 is not None and m.request_acceptance_rate is not None
        tok_s[steps] = m.per_request_tok_s_p50
        rates[steps] = m.request_acceptance_rate
    return max(tok_s, key=tok_s.__getitem__), rates


def test_sampled_chat_accepts_less_and_wants_fewer_steps(profile: SimProfile) -> None:
    best_greedy, greedy = _best_steps_at_c1(profile, max_tokens=512)
    best_chat, chat = _best_steps_at_c1(profile, workload="chat", temperature=0.7, ignore_eos=False, max_tokens=512)
    assert all(chat[s] < greedy[s] - 0.2 for s in greedy)
    assert best_chat <= best_greedy
    records = _cell(profile, SimSetting("EAGLE3", num_steps=3), workload="chat", ignore_eos=False, max_tokens=512)
    assert any(r.finish_reason == "stop" and (r.completion_tokens or 0) < 512 for r in records)


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"concurrency": 0}, "concurrency"),
        ({"workload": "poetry"}, "workload"),
        ({"temperature": -1.0}, "temperature"),
        ({"client_gap_ms": -5.0}, "client_gap_ms"),
    ],
)
def test_bad_cell_arguments_raise_config_error(profile: SimProfile, overrides: dict[str, object], field: str) -> None:
    with pytest.raises(ConfigError, match=f"{field} = .*fix:"):
        _cell(profile, SimSetting("EAGLE3", num_steps=1), **overrides)


def test_invalid_setting_is_refused_before_simulating(profile: SimProfile) -> None:
    with pytest.raises(ConfigError, match=r"num_draft_tokens = 9.*fix:"):
        _cell(profile, SimSetting("EAGLE3", num_steps=2, eagle_topk=2, num_draft_tokens=9))


def test_a_duration_bound_keeps_the_cell_sending_and_gives_it_a_steady_state(profile: SimProfile) -> None:
    """cell_duration_s in virtual time: finished requests are replaced until the bound has passed, so a
    C=16 cell of 16 requests (one wave: no steady state) gets a steady span of about that length, C in
    flight inside it, and a steady rate above the whole-window rate (ramp and drain excluded)."""
    setting = SimSetting("EAGLE3", num_steps=3, eagle_topk=1)
    short = _cell(profile, setting, concurrency=16, num_requests=16, warmup_requests=16)
    bounded = _cell(profile, setting, concurrency=16, num_requests=16, warmup_requests=16, min_duration_s=20.0)
    assert len(short) == 16 and len(bounded) > 16
    window_s = (max(r.end_ns for r in bounded) - min(r.send_ns for r in bounded)) / 1e9
    assert window_s >= 20.0
    m = cell_metrics(bounded, 16)
    assert m.steady_s is not None and m.steady_s >= 15.0
    assert m.steady_concurrency is not None and m.steady_concurrency >= 0.99 * 16
    assert m.steady_tok_s is not None and m.window_tok_s is not None and m.steady_tok_s > m.window_tok_s
    assert m.aggregate_tok_s == m.steady_tok_s
    one_wave = cell_metrics(short, 16)  # all 16 sent at once, none replaced: never past the ramp
    assert one_wave.steady_s is None and one_wave.aggregate_tok_s == one_wave.window_tok_s
