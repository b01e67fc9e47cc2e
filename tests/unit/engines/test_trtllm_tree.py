"""TensorRT-LLM's Eagle3 trees (eagle_choices, use_dynamic_tree, dynamic_tree_max_topK, max_total_draft_tokens)
accepted and refused where TensorRT-LLM accepts and refuses them (restated in tests/engine_rules.py from
tensorrt_llm/llmapi/llm_args.py @0004396, EagleDecodingConfig.validate_eagle_config)."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from pydantic import ValidationError

from engine_rules import Rewritten, trtllm_eagle_config
from specfrontier.engines.trtllm import TrtllmEngine, TrtllmSetting, speculative_config

ENGINE = TrtllmEngine(model="target", speculative_model="eagle3-head")


def _accepts(**fields: Any) -> bool:
    try:
        TrtllmSetting.model_validate({"name": "s", "decoding_type": "Eagle3", **fields})
    except ValidationError:
        return False
    return True


def test_dynamic_tree_rules_match_tensorrt_llm_over_a_grid() -> None:
    """[max_draft_len, dynamic_tree_max_topK * max_draft_len] for max_total_draft_tokens; topK required with
    use_dynamic_tree and ignored (refused here) without it."""
    checked = 0
    grid = itertools.product(range(1, 7), [None, False, True], [None, *range(1, 7)], [None, *range(1, 40)])
    for depth, dynamic, top_k, total in grid:
        try:
            trtllm_eagle_config(depth, None, dynamic, top_k, total)
            runs_as_given = True
        except (ValueError, AssertionError, Rewritten):
            runs_as_given = False
        fields = {"max_draft_len": depth, "use_dynamic_tree": dynamic, "dynamic_tree_max_topK": top_k}
        fields["max_total_draft_tokens"] = total
        assert _accepts(**fields) == runs_as_given, fields
        checked += 1
    assert checked == 6 * 3 * 7 * 40


@pytest.mark.parametrize(
    ("choices", "depth", "total"),
    [
        ([[0], [1], [0, 0]], 2, None),
        ([[0], [1], [0, 0]], 2, 3),
        ([[0], [1], [0, 0]], 2, 5),
        ([[0], [1], [0, 0]], 4, None),
        ([[0], [0, 0, 0]], 3, None),
        ([[0], [0, 0], [0, 0, 0], [1], [2], [0, 1]], 3, None),
    ],
)
def test_static_tree_rules_match_tensorrt_llm(choices: list[list[int]], depth: int, total: int | None) -> None:
    """check_eagle_choices (connected paths) and the resets of max_draft_len / max_total_draft_tokens."""
    try:
        trtllm_eagle_config(depth, choices, None, None, total)
        runs_as_given = True
    except (ValueError, AssertionError, Rewritten):
        runs_as_given = False
    assert _accepts(max_draft_len=depth, eagle_choices=choices, max_total_draft_tokens=total) == runs_as_given


def test_a_dynamic_tree_reaches_the_options_file_and_leaves_the_depth_ladder() -> None:
    setting = TrtllmSetting(
        name="tree", decoding_type="Eagle3", max_draft_len=4, use_dynamic_tree=True, dynamic_tree_max_topK=10
    )
    spec = speculative_config(setting, ENGINE)
    assert spec is not None and spec["use_dynamic_tree"] is True and spec["dynamic_tree_max_topK"] == 10
    assert "max_total_draft_tokens" not in spec  # TensorRT-LLM's default: 10 * 4
    assert setting.depth_field is None and setting.depth is None


def test_a_refused_tree_names_the_range_tensorrt_llm_accepts() -> None:
    with pytest.raises(ValidationError) as info:
        TrtllmSetting(
            name="t",
            decoding_type="Eagle3",
            max_draft_len=4,
            use_dynamic_tree=True,
            dynamic_tree_max_topK=10,
            max_total_draft_tokens=63,  # TensorRT-LLM's own older test value, refused at @0004396
        )
    assert "[max_draft_len, dynamic_tree_max_topK * max_draft_len] = [4, 40]" in str(info.value)
    assert "fix: set max_total_draft_tokens between 4 and 40" in str(info.value)
    with pytest.raises(ValidationError, match="are Eagle3 options but decoding_type = NGram"):
        TrtllmSetting(name="t", decoding_type="NGram", max_draft_len=3, use_dynamic_tree=True)
