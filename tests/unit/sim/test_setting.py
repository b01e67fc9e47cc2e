"""SGLang's setting rules as the simulator applies them (engines.md 1.3)."""

from __future__ import annotations

import pytest

from specfrontier.errors import ConfigError
from specfrontier.sim import SimSetting, capacity, load_profile, resolve_setting


def test_topk1_forces_draft_tokens_to_steps_plus_one() -> None:
    resolved = resolve_setting(SimSetting("EAGLE3", num_steps=3, eagle_topk=1, num_draft_tokens=8))
    assert resolved.num_draft_tokens == 4
    assert any("rewritten" in note for note in resolved.notes)


def test_unset_params_get_sglang_auto_choice() -> None:
    resolved = resolve_setting(SimSetting("eagle3"))
    assert (resolved.num_steps, resolved.eagle_topk, resolved.num_draft_tokens) == (3, 1, 4)


def test_unset_max_running_requests_is_48_under_speculation_only() -> None:
    assert resolve_setting(SimSetting("EAGLE3", num_steps=2)).max_running_requests == 48
    assert resolve_setting(SimSetting("EAGLE3", num_steps=2, max_running_requests=100)).max_running_requests == 100
    assert resolve_setting(SimSetting()).max_running_requests is None


def test_tree_with_too_many_draft_tokens_names_field_and_fix() -> None:
    """SGLang's bound: topk + (steps - 1) * topk^2 candidates plus the root (2 + 1 * 4 + 1 = 7 here)."""
    assert resolve_setting(SimSetting("EAGLE3", num_steps=2, eagle_topk=2, num_draft_tokens=7)).num_draft_tokens == 7
    with pytest.raises(ConfigError) as info:
        resolve_setting(SimSetting("EAGLE3", num_steps=2, eagle_topk=2, num_draft_tokens=8))
    message = str(info.value)
    assert "num_draft_tokens = 8" in message and "eagle_topk + (num_steps - 1) * eagle_topk^2 + 1 = 7" in message
    assert "fix: set num_draft_tokens <= 7" in message


@pytest.mark.parametrize(("steps", "topk", "draft"), [(3, 4, 16), (5, 8, 64), (3, 2, 8)])
def test_sglang_documented_trees_resolve(steps: int, topk: int, draft: int) -> None:
    """SGLang's documented EAGLE examples, refused by the old `steps * topk + 1` bound, resolve as given."""
    resolved = resolve_setting(SimSetting("EAGLE3", num_steps=steps, eagle_topk=topk, num_draft_tokens=draft))
    assert (resolved.num_steps, resolved.eagle_topk, resolved.num_draft_tokens) == (steps, topk, draft)


@pytest.mark.parametrize(
    ("setting", "field"),
    [
        (SimSetting("EAGLE3", num_steps=2, eagle_topk=2), "num_draft_tokens"),
        (SimSetting("EAGLE3", eagle_topk=2, num_draft_tokens=4), "num_steps"),
        (SimSetting(None, num_steps=2), "num_steps"),
        (SimSetting("MEDUSA", num_steps=2), "algorithm"),
        (SimSetting("EAGLE3", num_steps=0), "num_steps"),
        (SimSetting("EAGLE3", num_steps=2, max_running_requests=0), "max_running_requests"),
    ],
)
def test_invalid_settings_raise_config_error(setting: SimSetting, field: str) -> None:
    with pytest.raises(ConfigError) as info:
        resolve_setting(setting)
    assert f"{field} = " in str(info.value) and "fix:" in str(info.value)


def test_seed_capacity_law() -> None:
    profile = load_profile("seed-qwen3.5-122b-a10b")
    caps = [capacity(profile, resolve_setting(SimSetting("EAGLE3", num_steps=s))) for s in (1, 2, 3, 4)]
    assert caps == [26, 21, 17, 15]
    explicit = resolve_setting(SimSetting("EAGLE3", num_steps=1, max_running_requests=10))
    assert capacity(profile, explicit) == 10
    assert capacity(profile, resolve_setting(SimSetting())) == profile.capacity.no_spec_capacity
