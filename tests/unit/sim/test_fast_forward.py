"""`ServerCore.advance` (a stretch of decode cycles at once) gives exactly what `step()` cycle by cycle gives."""

from __future__ import annotations

import pytest

from specfrontier.records import RequestRecord
from specfrontier.sim import SimProfile, SimSetting, load_profile, simulate_cell
from specfrontier.sim.core import ServerCore, SimRequest, _token_plan
from specfrontier.sim.setting import resolve_setting

SEED = "seed-qwen3.5-122b-a10b"


@pytest.fixture(scope="module")
def profile() -> SimProfile:
    return load_profile(SEED)


def _one_step_at_a_time(core: ServerCore, next_send_ns: int | None = None) -> tuple[SimRequest, ...]:
    return core.step().finished


def _cell(profile: SimProfile, setting: SimSetting, **overrides: object) -> list[RequestRecord]:
    args: dict[str, object] = {
        "concurrency": 6,
        "num_requests": 20,
        "workload": "chat",
        "temperature": 0.7,
        "ignore_eos": False,
        "input_tokens": 300,
        "max_tokens": 160,
        "warmup_requests": 6,
        "seed": 5,
    }
    args.update(overrides)
    return simulate_cell(profile, setting, **args)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "setting",
    [
        SimSetting(),
        SimSetting("EAGLE3", num_steps=3, eagle_topk=1),
        SimSetting("EAGLE3", num_steps=3, eagle_topk=4, num_draft_tokens=8),
        SimSetting("EAGLE3", num_steps=4, eagle_topk=1, adaptive=((1, (1, 2, 3, 4)), (4, (1, 2)))),
    ],
    ids=["no-spec", "chain", "tree", "schedule"],
)
@pytest.mark.parametrize(
    "overrides",
    [
        {},
        {"ignore_eos": True, "temperature": 0.0, "workload": "synthetic"},
        {"client_gap_ms": 3.5},
        {"concurrency": 70},
    ],
    ids=["natural-eos", "ignore-eos", "client-gap", "above-capacity"],
)
def test_advance_equals_step_by_step(
    profile: SimProfile, setting: SimSetting, overrides: dict[str, object], monkeypatch: pytest.MonkeyPatch
) -> None:
    fast = _cell(profile, setting, **overrides)
    monkeypatch.setattr(ServerCore, "advance", _one_step_at_a_time)
    assert _cell(profile, setting, **overrides) == fast


def test_min_duration_bound_runs_the_same(profile: SimProfile, monkeypatch: pytest.MonkeyPatch) -> None:
    setting = SimSetting("EAGLE3", num_steps=2, eagle_topk=1)
    fast = _cell(profile, setting, min_duration_s=20.0, client_gap_ms=1.0)
    monkeypatch.setattr(ServerCore, "advance", _one_step_at_a_time)
    assert _cell(profile, setting, min_duration_s=20.0, client_gap_ms=1.0) == fast


@pytest.mark.parametrize("ignore_eos", [True, False])
@pytest.mark.parametrize("topk", [1, 4])
def test_token_plan_draws_what_cycle_by_cycle_draws_would(profile: SimProfile, ignore_eos: bool, topk: int) -> None:
    """The plan drawn at once equals drawing each cycle's acceptance in turn from the same stream."""
    setting = SimSetting("EAGLE3", num_steps=3, eagle_topk=topk, num_draft_tokens=8 if topk > 1 else None)
    resolved = resolve_setting(setting, spec_default_cap=profile.capacity.spec_default_cap)
    workload = profile.workload("chat")
    for seed in range(20):
        planned, drawn = (
            ServerCore(profile, resolved, seed=seed).new_request(
                "r",
                send_ns=0,
                workload=workload,
                temperature=0.7,
                ignore_eos=ignore_eos,
                prompt_tokens=8,
                max_tokens=400,
            )
            for _ in range(2)
        )
        planned.generated = drawn.generated = 1
        core = ServerCore(profile, resolved, seed=seed)
        cycles = []
        while drawn.generated < drawn.stop_at:
            tokens = min(1 + core._accepted(drawn, len(drawn.rates)), drawn.stop_at - drawn.generated)
            drawn.generated += tokens
            cycles.append(tokens)
        assert _token_plan(planned) == cycles
