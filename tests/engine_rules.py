"""The engines' own rules for a speculative setting, restated from their source for the tests.

SGLang: sglang 0.5.23, the wheel on PyPI (`pip download sglang==0.5.23 --no-deps`), paths below
`sglang/srt/`. Each function cites the file and line of every rule it restates. Kept apart from
`engines/sglang_rules.py` so a test does not check the validator against itself: the candidate count is
counted here step by step the way the draft loop builds its score list, not taken from the formula.
"""

from __future__ import annotations

from dataclasses import dataclass

SGLANG_BUILTINS = ("DFLASH", "UNO", "DSPARK", "EAGLE", "EAGLE3", "FROZEN_KV_MTP", "STANDALONE", "NGRAM")
"""speculative/spec_info.py:39-47, the `SpeculativeAlgorithm` members (NONE aside)."""
SGLANG_ALIASES = ("NEXTN",)
"""speculative/spec_registry.py:183 `_RESERVED_ALIASES`; spec_info.py:60-61 maps it to EAGLE."""
SGLANG_EAGLE_FAMILY = ("EAGLE", "EAGLE3", "NEXTN", "STANDALONE")
"""spec_info.py:263-264: `is_eagle() or is_standalone()` -> `_handle_eagle_family` (NEXTN resolved to EAGLE
at arg_groups/speculative_hook.py:109-116)."""


class Rewritten(Exception):
    """SGLang starts, but with another value than the one given (it logs a warning): specfrontier refuses
    such a setting rather than measuring something the user did not ask for."""


def sglang_from_string(name: str) -> str:
    """spec_info.py:50-65: upper-cased (also speculative_hook.py:142), a member or the NEXTN alias, else
    `ValueError: Unknown speculative algorithm name`."""
    upper = name.upper()
    if upper in SGLANG_BUILTINS or upper in SGLANG_ALIASES:
        return upper
    raise ValueError(f"Unknown speculative algorithm name: {name}")


def sglang_scored_candidates(num_steps: int, topk: int) -> int:
    """The width of the score list `organize_draft_results` ranks, counted as the draft loop builds it
    (speculative/eagle_worker_v2.py:808-815 appends one `tree_info[0]` per step): step 0 contributes
    `topk_p.unsqueeze(1)`, shape (b, 1, topk) (speculative/spec_utils.py:428); every later step
    `expand_scores`, shape (b, topk, topk) (spec_utils.py:467); eagle_utils.py:107 flattens them."""
    width = 0
    for step in range(num_steps):
        width += 1 * topk if step == 0 else topk * topk
    return width


@dataclass(frozen=True)
class SGLangShape:
    num_steps: int | None
    eagle_topk: int | None
    num_draft_tokens: int | None


def sglang_eagle_family(shape: SGLangShape) -> SGLangShape:
    """What `_handle_eagle_family` and the first draft do with (steps, topk, draft tokens), all given
    explicitly as specfrontier passes them: AssertionError / RuntimeError where SGLang fails, Rewritten
    where it changes a value."""
    steps, topk, draft = shape.num_steps, shape.eagle_topk, shape.num_draft_tokens
    if steps is None:
        # arg_groups/speculative_hook.py:1159-1163: steps unset -> topk and draft tokens must be unset too
        if topk is not None or draft is not None:
            raise AssertionError("speculative_hook.py:1160 assert")
        return shape
    topk = 1 if topk is None else topk  # specfrontier always passes --speculative-eagle-topk (1 when unset)
    if topk == 1 and draft is None:
        draft = steps + 1  # and a chain's draft tokens as SGLang resolves them
    if topk == 1 and draft != steps + 1:
        # speculative_hook.py:1256-1266: draft tokens adjusted to steps + 1 when topk == 1
        raise Rewritten(f"num_draft_tokens -> {steps + 1}")
    if draft is None:
        # eagle_utils.py:110 `torch.topk(score_list, num_draft_token - 1)` with None: TypeError at the first draft
        raise TypeError("num_draft_tokens None in organize_draft_results")
    if draft - 1 > sglang_scored_candidates(steps, topk):
        # eagle_utils.py:110: torch.topk raises "selected index k out of range" when k > the list's width
        raise RuntimeError("torch.topk: selected index k out of range")
    return SGLangShape(steps, topk, draft)


def sglang_ngram(eagle_topk: int | None) -> None:
    """speculative_hook.py:1309-1313: `speculative_eagle_topk = speculative_ngram_max_bfs_breadth`."""
    if eagle_topk is not None:
        raise Rewritten("eagle_topk -> ngram_max_bfs_breadth")


def sglang_dflash(
    num_steps: int | None,
    eagle_topk: int | None,
    num_draft_tokens: int | None,
    block_size: int | None,
    window: int | None,
) -> None:
    """speculative_hook.py `_handle_dflash`: steps and topk overridden to 1 (334-348, 351-365, a warning);
    block size and draft tokens must match when both are set (374-382); the draft window must be at least
    the block (427-434)."""
    if num_steps not in (None, 1) or eagle_topk not in (None, 1):
        raise Rewritten("num_steps/eagle_topk -> 1")
    if block_size is not None and num_draft_tokens is not None and block_size != num_draft_tokens:
        raise ValueError("For DFLASH they must match")
    tokens = block_size if block_size is not None else num_draft_tokens
    if window is not None and tokens is not None and window < tokens:
        raise ValueError("--speculative-draft-window-size must be >= --speculative-num-draft-tokens")


TRTLLM = "TensorRT-LLM tensorrt_llm/llmapi/llm_args.py @0004396"


def trtllm_eagle_config(
    max_draft_len: int,
    eagle_choices: list[list[int]] | None = None,
    use_dynamic_tree: bool | None = None,
    dynamic_tree_max_topK: int | None = None,
    max_total_draft_tokens: int | None = None,
) -> tuple[int, int]:
    """`EagleDecodingConfig.validate_eagle_config` and `check_eagle_choices` step by step, returning (max_draft_len,
    max_total_draft_tokens) as TensorRT-LLM runs them: ValueError / AssertionError where it raises, Rewritten
    where it logs a warning and changes or ignores a value. specfrontier writes `use_dynamic_tree` only when set
    (its default is False)."""
    dynamic = bool(use_dynamic_tree)
    if eagle_choices is not None:
        if dynamic:
            raise ValueError("If eagle_choices is provided, use_dynamic_tree should be False")
        unique = sorted({tuple(c) for c in eagle_choices}, key=lambda c: (len(c), c))
        for choice in unique:  # check_eagle_choices: connectivity
            if len(choice) > 1 and choice[:-1] not in unique:
                raise AssertionError(f"Error: choice {list(choice)} is not connected")
        depth = max(len(c) for c in unique)
        if depth != max_draft_len:
            raise Rewritten(f"max_draft_len -> {depth}")  # "Based on the input choices, reset ..."
        if max_total_draft_tokens is not None and max_total_draft_tokens != len(unique):
            raise Rewritten(f"max_total_draft_tokens -> {len(unique)}")  # set to len(eagle_choices) silently
        max_total_draft_tokens = len(unique)
    if not dynamic and dynamic_tree_max_topK is not None:
        raise Rewritten("dynamic_tree_max_topK ignored")  # "... use_dynamic_tree is False; ignoring ..."
    if dynamic:
        if dynamic_tree_max_topK is None or dynamic_tree_max_topK <= 0:
            raise ValueError("dynamic_tree_max_topK should be provided")
        top = dynamic_tree_max_topK * max_draft_len
        if max_total_draft_tokens is None:
            max_total_draft_tokens = top  # a warning only: the documented default
        elif not max_draft_len <= max_total_draft_tokens <= top:
            raise ValueError(f"max_total_draft_tokens ({max_total_draft_tokens}) must be in [{max_draft_len}, {top}]")
    if max_total_draft_tokens is None:
        max_total_draft_tokens = max_draft_len  # "Linear tree"
    if eagle_choices is None and not dynamic and max_total_draft_tokens != max_draft_len:
        # is_linear_tree (eagle_choices None, use_dynamic_tree False) while tokens_per_gen_step = 1 + the total:
        # a chain verifying slots nobody drafts. Not refused by TensorRT-LLM; refused by specfrontier.
        raise Rewritten("max_total_draft_tokens on a linear tree")
    return max_draft_len, max_total_draft_tokens
