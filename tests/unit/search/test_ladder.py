"""Depth ladders: which settings share a ladder, and how a ladder is extended past its deepest setting."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from specfrontier.engines.llamacpp import TYPE_DEPTH, LlamaCppSetting
from specfrontier.engines.sglang import SGLangSetting
from specfrontier.search.ladder import build_ladders, depth_of, ladder_field, with_depth


def _steps(n: int, **extra: object) -> SGLangSetting:
    return SGLangSetting(name=f"steps{n}", algorithm="EAGLE3", num_steps=n, eagle_topk=1, **extra)  # type: ignore[arg-type]


def test_depth_is_the_chain_length_and_a_tree_is_not_on_a_ladder() -> None:
    assert depth_of(_steps(3)) == 3
    assert depth_of(SGLangSetting(name="base")) is None
    tree = SGLangSetting(name="tree", algorithm="EAGLE3", num_steps=3, eagle_topk=4, num_draft_tokens=8)
    assert depth_of(tree) is None
    assert depth_of(LlamaCppSetting(name="d", spec_type="draft-simple", draft_n_max=4)) == 4
    assert depth_of(LlamaCppSetting(name="n", spec_type="ngram-simple", ngram_size_n=3, ngram_size_m=8)) == 8
    assert depth_of(LlamaCppSetting(name="m", spec_type="ngram-mod")) is None
    assert depth_of(LlamaCppSetting(name="m", spec_type="ngram-mod", ngram_mod_n_max=16)) == 16


def test_settings_that_differ_only_in_depth_share_a_ladder() -> None:
    capped = SGLangSetting(name="capped2", algorithm="EAGLE3", num_steps=2, max_running_requests=16)
    ladders = build_ladders([SGLangSetting(name="base"), _steps(1), _steps(2), capped])
    assert [ladder.listed_depths for ladder in ladders] == [[1, 2], [2]]


def test_extension_follows_the_last_step_and_stops_at_max_depth() -> None:
    (ladder,) = build_ladders([_steps(1), _steps(2), _steps(3)], max_depth=5)
    assert list(ladder.depths()) == [1, 2, 3, 4, 5]
    deeper = ladder.setting_at(5)
    assert isinstance(deeper, SGLangSetting)
    assert (deeper.name, deeper.num_steps, deeper.resolved_draft_tokens, deeper.algorithm) == ("steps5", 5, 6, "EAGLE3")
    assert ladder.setting_at(5) is deeper  # made once
    assert ladder.neighbours(3) == [2, 4]
    (ngram,) = build_ladders(
        [
            LlamaCppSetting(name="ng8", spec_type="ngram-simple", ngram_size_n=3, ngram_size_m=8),
            LlamaCppSetting(name="ng16", spec_type="ngram-simple", ngram_size_n=3, ngram_size_m=16),
        ],
        max_depth=40,
    )
    assert list(ngram.depths()) == [8, 16, 24, 32, 40]
    assert ngram.setting_at(24).name == "ng24"


def test_extension_names_never_collide_and_settings_stay_valid() -> None:
    odd = SGLangSetting(name="eagle", algorithm="EAGLE3", num_steps=2, num_draft_tokens=3)
    (ladder,) = build_ladders([odd, SGLangSetting(name="eagle-d3")], max_depth=3)
    made = ladder.setting_at(3)
    assert made.name == "eagle-d3-2"
    assert isinstance(made, SGLangSetting) and made.num_draft_tokens == 4  # an explicit chain's drafts follow
    with pytest.raises(ValueError, match="not on a depth ladder"):
        with_depth(SGLangSetting(name="base"), 2, "x")


def _tree(s: int, k: int, d: int) -> SGLangSetting:
    return SGLangSetting(name=f"s{s}k{k}d{d}", algorithm="EAGLE3", num_steps=s, eagle_topk=k, num_draft_tokens=d)


def test_trees_form_a_ladder_per_branching_and_draft_tokens_and_extend_in_depth() -> None:
    settings = [SGLangSetting(name="base"), _steps(1), _tree(2, 4, 8), _tree(3, 4, 8), _tree(3, 4, 13), _tree(2, 2, 4)]
    ladders = build_ladders(settings, max_depth=5, extend="all")
    assert [(ladder.listed_depths, [s.name for s in ladder.members.values()]) for ladder in ladders] == [
        ([1], ["steps1"]),
        ([2, 3], ["s2k4d8", "s3k4d8"]),
        ([3], ["s3k4d13"]),
        ([2], ["s2k2d4"]),
    ]
    wide = ladders[1]
    assert list(wide.depths()) == [2, 3, 4, 5]
    deeper = wide.setting_at(4)
    assert isinstance(deeper, SGLangSetting)
    assert (deeper.name, deeper.num_steps, deeper.eagle_topk, deeper.num_draft_tokens) == ("s3k4d8-d4", 4, 4, 8)
    assert depth_of(deeper) is None  # still not a chain: schedules leave trees out


def test_only_chains_extend_unless_the_config_asks_for_trees_too() -> None:
    settings = [_steps(1), _steps(2), _tree(2, 4, 8), _tree(3, 4, 8)]
    chain, tree = build_ladders(settings, max_depth=5)  # search.extend_depth: chains, the default
    assert list(chain.depths()) == [1, 2, 3, 4, 5] and list(tree.depths()) == [2, 3]
    chain, tree = build_ladders(settings, max_depth=5, extend="all")
    assert list(tree.depths()) == [2, 3, 4, 5]
    chain, tree = build_ladders(settings, max_depth=5, extend="none")  # the declared settings only
    assert list(chain.depths()) == [1, 2] and list(tree.depths()) == [2, 3]


def test_extend_depth_is_validated_naming_the_field() -> None:
    from specfrontier.config.search import SearchConfig

    assert SearchConfig(extend_depth="all").extend_depth == "all"
    with pytest.raises(ValueError, match="extend_depth"):
        SearchConfig(extend_depth="trees")


def test_a_llamacpp_ladder_walks_its_types_own_draft_length_never_draft_n_max() -> None:
    """llama-server reads draft_n_max only for a draft model; each n-gram type drafts its own length
    (common/speculative.cpp:2396-2430, `TYPE_DEPTH`). So every ladder, trees included (`extend="all"`),
    deepens a draft model through draft_n_max and an n-gram type through its own field, and an n-gram
    setting whose length no field sets (ngram-cache, or a type left at its default) is on no ladder."""
    settings = [
        LlamaCppSetting(name="baseline"),
        LlamaCppSetting(name="draft4", spec_type="draft-simple", draft_n_max=4, draft_p_min=0.5),
        LlamaCppSetting(name="draft8", spec_type="draft-simple", draft_n_max=8, draft_p_min=0.5),
        LlamaCppSetting(name="ng8", spec_type="ngram-map-k", ngram_size_n=2, ngram_size_m=8),
        LlamaCppSetting(name="ng16", spec_type="ngram-map-k", ngram_size_n=2, ngram_size_m=16),
        LlamaCppSetting(name="mod16", spec_type="ngram-mod", ngram_mod_n_max=16, ngram_mod_n_min=4),
        LlamaCppSetting(name="mod32", spec_type="ngram-mod", ngram_mod_n_max=32, ngram_mod_n_min=4),
        LlamaCppSetting(name="cache", spec_type="ngram-cache"),
        LlamaCppSetting(name="simple-n3", spec_type="ngram-simple", ngram_size_n=3),
        LlamaCppSetting(name="mod", spec_type="ngram-mod"),
    ]
    unladdered = {"baseline", "cache", "simple-n3", "mod"}
    assert {s.name for s in settings if ladder_field(s) is None} == unladdered
    ladders = build_ladders(settings, max_depth=64, extend="all")
    assert [ladder.listed_depths for ladder in ladders] == [[4, 8], [8, 16], [16, 32]]
    for ladder in ladders:
        for depth in ladder.depths():
            made = ladder.setting_at(depth)
            assert isinstance(made, LlamaCppSetting)
            own = TYPE_DEPTH[made.spec_type].field
            assert own is not None and getattr(made, own) == depth == made.depth, (made.name, own, depth)
            if made.spec_type != "draft-simple":
                assert (made.draft_n_max, made.draft_n_min, made.draft_p_min) == (None, None, None), made.name
    mod = ladders[2].setting_at(64)
    assert isinstance(mod, LlamaCppSetting) and (mod.ngram_mod_n_max, mod.ngram_mod_n_min) == (64, 4)
    with pytest.raises(ValidationError, match="draft_n_max = 8 with spec_type 'ngram-simple'"):
        LlamaCppSetting(name="x", spec_type="ngram-simple", ngram_size_n=3, draft_n_max=8)
