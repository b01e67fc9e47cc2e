"""The simulator on SGLang trees: the event loop draws the theory's tree tau, verifies and reserves per tree.

Trees are built as resolved settings (`simulate_cell` takes them as they are); that SGLang's own settings resolve to the
same trees (num_draft_tokens - 1 <= topk + (num_steps - 1) * topk^2, `theory.tree_bound`) is checked here
and in tests/unit/sim/test_setting.py."""

from __future__ import annotations

import pytest

from specfrontier.engines.sglang import SGLangSetting
from specfrontier.sim import SimProfile, load_profile
from specfrontier.sim.acceptance import chain_rates
from specfrontier.sim.costs import capacity, setting_cycle_ms
from specfrontier.sim.protocol import sim_setting
from specfrontier.sim.setting import ResolvedSetting, resolve_setting
from specfrontier.sim.virtual import simulate_cell
from specfrontier.theory.acceptance import tree_tau

SEED = "seed-qwen3.5-122b-a10b"


@pytest.fixture(scope="module")
def profile() -> SimProfile:
    return load_profile(SEED)


def _tree(steps: int, topk: int, draft: int) -> ResolvedSetting:
    return ResolvedSetting(True, steps, topk, draft, 48, (), "EAGLE3")


@pytest.mark.parametrize(("steps", "topk", "draft"), [(3, 4, 16), (5, 8, 64), (3, 2, 8)])
def test_simulated_acceptance_length_is_the_theory_tree_tau(
    profile: SimProfile, steps: int, topk: int, draft: int
) -> None:
    # SGLang's documented examples, two of them beyond the old bound num_steps * topk + 1; each resolves as given
    setting = SGLangSetting(name="t", algorithm="EAGLE3", num_steps=steps, eagle_topk=topk, num_draft_tokens=draft)
    resolved = resolve_setting(sim_setting(setting))
    assert (resolved.num_steps, resolved.eagle_topk, resolved.num_draft_tokens) == (steps, topk, draft)
    records = simulate_cell(
        profile, _tree(steps, topk, draft), concurrency=8, num_requests=64, workload="code", temperature=0.0,
        ignore_eos=False, input_tokens=64, max_tokens=256, seed=3,
    )  # fmt: skip
    spec = [r.spec for r in records if r.spec is not None]
    drawn = 1 + sum(s.accepted_tokens for s in spec) / sum(s.verify_steps or 0 for s in spec)
    code = profile.workload("code")
    top1 = chain_rates(code.acceptance_per_position, steps, 0.0, code.temperature_drop)
    # per-request spread (dispersion 0.5) and sampling noise: a few percent around the mean-rate tau
    assert drawn == pytest.approx(tree_tau(top1, topk, draft - 1, code.rank_share), rel=0.05)
    assert all(s.draft_tokens == (draft - 1) * (s.verify_steps or 0) for s in spec)


def test_tree_verifies_its_draft_tokens_and_reserves_state_per_draft_token(profile: SimProfile) -> None:
    chain, tree = _tree(3, 1, 4), _tree(3, 4, 16)
    assert setting_cycle_ms(profile, tree, 8) > setting_cycle_ms(profile, chain, 8)
    assert (capacity(profile, chain), capacity(profile, tree)) == (17, 5)  # floor(106 / (2 + D))


def test_kv_pool_reserves_the_tree_per_request(profile: SimProfile) -> None:
    data = profile.model_dump()
    data["capacity"].update(slots_per_request=0, slots_per_draft_token=0, kv_tokens=20000, kv_context_tokens=400)
    attention = SimProfile.model_validate(data)
    # floor(20000 / (400 + D + steps * topk)), under SGLang's spec default cap of 48
    assert capacity(attention, _tree(3, 1, 4)) == 48  # 49 -> the cap
    assert capacity(attention, _tree(3, 4, 16)) == 46
    assert capacity(attention, _tree(5, 8, 64)) == 39  # floor(20000 / 504)
