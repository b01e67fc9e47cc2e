"""Engine spellings of a setting map to the model's SettingParams."""

from __future__ import annotations

import pytest

from specfrontier.errors import ConfigError
from specfrontier.perfmodel import SettingParams, setting_params


@pytest.mark.parametrize(
    ("params", "expected"),
    [
        ({}, SettingParams()),
        ({"spec_type": "none"}, SettingParams()),
        ({"algorithm": "EAGLE3", "num_steps": 3}, SettingParams(steps=3, family="EAGLE3")),
        (
            {"algorithm": "EAGLE3", "num_steps": 3, "eagle_topk": 1, "num_draft_tokens": 4},
            SettingParams(steps=3, family="EAGLE3"),
        ),
        (
            {"algorithm": "EAGLE3", "num_steps": 5, "eagle_topk": 4, "num_draft_tokens": 16},
            SettingParams(steps=5, topk=4, draft_tokens=16, family="EAGLE3"),
        ),
        ({"spec_type": "draft-simple", "draft_n_max": 8}, SettingParams(steps=8, family="draft-simple")),
        ({"spec_type": "draft-eagle3", "draft_n_max": 4}, SettingParams(steps=4, family="draft-eagle3")),  # imported
        ({"spec_type": "ngram-simple", "ngram_size_m": 8}, SettingParams(steps=8, family="ngram-simple")),
        ({"spec_type": "ngram-mod", "ngram_mod_n_max": 12}, SettingParams(steps=12, family="ngram-mod")),
        ({"method": "eagle3", "num_speculative_tokens": 2}, SettingParams(steps=2, family="eagle3")),
        ({"max_running_requests": 8}, SettingParams(max_running_requests=8)),
    ],
)
def test_engine_spellings(params: dict[str, object], expected: SettingParams) -> None:
    assert setting_params(params) == expected


def test_verified_tokens_and_labels() -> None:
    assert SettingParams().verified == 1 and SettingParams().label == "no-spec"
    assert SettingParams(steps=3, family="EAGLE3").verified == 4
    tree = SettingParams(steps=5, topk=4, draft_tokens=16, family="EAGLE3")
    assert tree.verified == 16 and tree.label == "EAGLE3 s5 k4 d16"


def test_bad_values_name_the_field() -> None:
    with pytest.raises(ConfigError, match=r"num_steps = 2\.5"):
        setting_params({"algorithm": "EAGLE3", "num_steps": 2.5}, where="row 3")
    with pytest.raises(ConfigError, match="no draft depth"):
        setting_params({"algorithm": "EAGLE3"})


def test_an_adaptive_policy_is_a_family_of_its_own() -> None:
    """An imported adaptive-verification arm is not the static setting of the same maximum depth."""
    static = setting_params({"method": "dspark", "num_speculative_tokens": 7})
    adaptive = setting_params(
        {"method": "dspark", "num_speculative_tokens": 7, "adaptive": "enable_adaptive_verification"}
    )
    assert static.family == "dspark" and adaptive.family == "dspark+enable_adaptive_verification"
    assert static != adaptive and adaptive.steps == 7


def test_a_sized_ngram_drafts_its_size_m_and_an_unmodelled_knob_makes_a_family() -> None:
    """llama.cpp's sized n-gram types draft up to `ngram_size_m` tokens (not draft_n_max's default 16), and
    their lookup key length `ngram_size_n`, which the model has no term for, makes a drafter of its own: two
    settings differing only in it are never merged into one measured shape."""
    n2 = setting_params({"spec_type": "ngram-map-k", "ngram_size_n": 2, "ngram_size_m": 8})
    n4 = setting_params({"spec_type": "ngram-map-k", "ngram_size_n": 4, "ngram_size_m": 8})
    assert n2.steps == 8 and n2.family == "ngram-map-k[ngram_size_n=2]" and n2 != n4
    assert setting_params({"spec_type": "ngram-mod"}).steps == 64  # no size: llama-server's own default


@pytest.mark.parametrize(
    ("params", "steps"),
    [
        ({"spec_type": "draft-simple"}, 3),
        ({"spec_type": "draft-eagle3"}, 3),  # a draft-model type of an imported table: --spec-draft-n-max's 3
        ({"spec_type": "ngram-simple"}, 48),
        ({"spec_type": "ngram-map-k4v", "ngram_size_n": 2}, 48),
        ({"spec_type": "ngram-mod"}, 64),
        ({"spec_type": "ngram-cache"}, 8),
        ({"spec_type": "ngram-simple", "ngram_size_m": 8, "draft_n_max": 2}, 8),
        ({"spec_type": "ngram-cache", "draft_n_max": 2}, 8),
    ],
)
def test_a_llamacpp_setting_drafts_its_types_own_length(params: dict[str, object], steps: int) -> None:
    """llama-server b11434 drafts per step what `common_speculative_n_max` (common/speculative.cpp:2396-2430)
    says: `draft.n_max` (default 3) for the draft-model types only, `size_m` (48) for the sized n-gram types,
    `ngram_mod.n_max` (64) for ngram-mod and a fixed 8 for ngram-cache. So an imported row that gives an
    n-gram type a draft_n_max reads the type's own length, not the flag the server ignored (the live check
    of these numbers against the binary is in tests/contract/test_llamacpp.py)."""
    assert setting_params(params).steps == steps
