"""TensorRT-LLM's EAGLE-3 draft trees: a static tree (`eagle_choices`) or a dynamic one (EAGLE-2's,
`use_dynamic_tree` with `dynamic_tree_max_topK`), checked as TensorRT-LLM checks them, before launch.

Source: `tensorrt_llm/llmapi/llm_args.py` @0004396 (the commit `engines/trtllm.py` reads),
`EagleDecodingConfig.validate_eagle_config` and `check_eagle_choices`; restated for the tests in
tests/engine_rules.py. What TensorRT-LLM does:

- `eagle_choices` (a list of paths from the root, e.g. `[[0], [1], [0, 0]]`) and `use_dynamic_tree` are
  mutually exclusive (ValueError); every path's parent must be a path too (an assert); `max_draft_len` is
  reset to the deepest path and `max_total_draft_tokens` to the number of paths (with a warning only);
- `dynamic_tree_max_topK` without `use_dynamic_tree` is ignored (a warning) and the linear path runs;
- `use_dynamic_tree` needs `dynamic_tree_max_topK > 0` (ValueError); `max_total_draft_tokens` (the tree's
  nodes, root excluded) defaults to `dynamic_tree_max_topK * max_draft_len` and must lie in
  `[max_draft_len, dynamic_tree_max_topK * max_draft_len]` (ValueError);
- a linear chain verifies `max_draft_len` tokens (`max_total_draft_tokens` = `max_draft_len`).

Values TensorRT-LLM would silently replace are refused here with the value it would use, as SGLang's
rewrites are (`engines/sglang_rules.py`): the user measures what they asked for.
"""

from __future__ import annotations

from typing import Any

from specfrontier.config.common import SettingRefused

TREE_KEYS = ("eagle_choices", "use_dynamic_tree", "dynamic_tree_max_topK", "max_total_draft_tokens")
"""Eagle3-only `speculative_config` keys, spelled as llm_args.py spells them."""
SOURCE = "llm_args.py EagleDecodingConfig.validate_eagle_config"


def check_tree(s: Any, where: str) -> None:
    """TensorRT-LLM's tree rules for the setting `s` (a `TrtllmSetting`)."""
    set_keys = [k for k in TREE_KEYS if getattr(s, k) is not None]
    if not set_keys:
        return
    if s.decoding_type != "Eagle3":
        raise SettingRefused(
            f"{where}: {', '.join(set_keys)} are Eagle3 options but decoding_type = {s.decoding_type}; "
            "fix: remove them or set decoding_type: Eagle3",
            "tree options under another decoding_type",
        )
    if s.eagle_choices is not None:
        _check_static(s, where)
        return
    if s.dynamic_tree_max_topK is not None and not s.use_dynamic_tree:
        raise SettingRefused(
            f"{where}: dynamic_tree_max_topK = {s.dynamic_tree_max_topK} without use_dynamic_tree: TensorRT-LLM "
            f"ignores it and drafts a chain ({SOURCE}); fix: set use_dynamic_tree: true or remove it",
            "dynamic_tree_max_topK without use_dynamic_tree",
        )
    if s.use_dynamic_tree:
        _check_dynamic(s, where)
    elif s.max_total_draft_tokens is not None and s.max_total_draft_tokens != s.max_draft_len:
        raise SettingRefused(
            f"{where}: max_total_draft_tokens = {s.max_total_draft_tokens} on a chain: a linear Eagle3 drafts "
            f"max_draft_len = {s.max_draft_len} tokens ({SOURCE}); fix: remove it, or draw a tree "
            "(use_dynamic_tree with dynamic_tree_max_topK, or eagle_choices)",
            "max_total_draft_tokens on a chain",
        )


def _check_dynamic(s: Any, where: str) -> None:
    top_k, depth, total = s.dynamic_tree_max_topK, s.max_draft_len, s.max_total_draft_tokens
    if top_k is None:
        raise SettingRefused(
            f"{where}: use_dynamic_tree needs dynamic_tree_max_topK (the nodes expanded per layer; TensorRT-LLM "
            f"raises, {SOURCE}); fix: set dynamic_tree_max_topK, e.g. 10",
            "use_dynamic_tree without dynamic_tree_max_topK",
        )
    bound = top_k * depth
    if total is not None and not depth <= total <= bound:
        raise SettingRefused(
            f"{where}: max_total_draft_tokens = {total} outside [max_draft_len, dynamic_tree_max_topK * "
            f"max_draft_len] = [{depth}, {bound}] (TensorRT-LLM raises, {SOURCE}); fix: set max_total_draft_tokens "
            f"between {depth} and {bound}, or leave it unset ({bound})",
            "max_total_draft_tokens outside [max_draft_len, dynamic_tree_max_topK * max_draft_len]",
        )


def _check_static(s: Any, where: str) -> None:
    if s.use_dynamic_tree:
        raise SettingRefused(
            f"{where}: eagle_choices with use_dynamic_tree: TensorRT-LLM raises (a static tree or a dynamic one, "
            f"{SOURCE}); fix: remove one of them",
            "eagle_choices with use_dynamic_tree",
        )
    if s.dynamic_tree_max_topK is not None:
        raise SettingRefused(
            f"{where}: dynamic_tree_max_topK with eagle_choices: TensorRT-LLM ignores it ({SOURCE}); fix: remove it",
            "dynamic_tree_max_topK with eagle_choices",
        )
    paths = {tuple(p) for p in s.eagle_choices}
    if not paths or any(not p for p in paths):
        raise SettingRefused(
            f"{where}: eagle_choices = {s.eagle_choices}: paths from the root, each non-empty; fix: e.g. "
            "[[0], [1], [0, 0]]",
            "an empty eagle_choices path",
        )
    orphan = next((list(p) for p in sorted(paths) if len(p) > 1 and p[:-1] not in paths), None)
    if orphan is not None:
        raise SettingRefused(
            f"{where}: eagle_choices path {orphan} has no parent {orphan[:-1]} (TensorRT-LLM asserts: 'choice is "
            f"not connected', llm_args.py check_eagle_choices); fix: add {orphan[:-1]}",
            "eagle_choices not connected",
        )
    depth = max(len(p) for p in paths)
    if s.max_draft_len != depth:
        raise SettingRefused(
            f"{where}: max_draft_len = {s.max_draft_len} but eagle_choices is {depth} deep: TensorRT-LLM resets "
            f"max_draft_len to {depth} ({SOURCE}); fix: set max_draft_len to {depth}",
            "max_draft_len differs from the depth of eagle_choices",
        )
    if s.max_total_draft_tokens is not None and s.max_total_draft_tokens != len(paths):
        raise SettingRefused(
            f"{where}: max_total_draft_tokens = {s.max_total_draft_tokens} but eagle_choices has {len(paths)} "
            f"paths: TensorRT-LLM sets it to {len(paths)} ({SOURCE}); fix: remove max_total_draft_tokens",
            "max_total_draft_tokens differs from the number of eagle_choices paths",
        )


__all__ = ["TREE_KEYS", "check_tree"]
