"""SGLang's own start-up rules for a speculative setting, checked before anything launches.

Read at the source of sglang 0.5.23 (the wheel on PyPI; paths below `python/sglang/srt/`), restated for
the tests in tests/engine_rules.py with file and line:

- the algorithm is upper-cased and must be a builtin (`speculative/spec_info.py` `SpeculativeAlgorithm`:
  DFLASH, UNO, DSPARK, EAGLE, EAGLE3, FROZEN_KV_MTP, STANDALONE, NGRAM) or the alias NEXTN
  (`speculative/spec_registry.py` `_RESERVED_ALIASES`); older releases list argparse choices instead
  (`{EAGLE,EAGLE3,NEXTN,STANDALONE,NGRAM}`), so the installed server's `--help` decides
  (`algorithms_from_help`) and this list is the fallback;
- EAGLE, EAGLE3, NEXTN and STANDALONE draft a tree (`arg_groups/speculative_hook.py`
  `_handle_eagle_family`): steps unset with topk/draft tokens set is an `assert`; with topk 1 the draft
  tokens are rewritten to steps + 1 (refused here instead of letting the server change the setting); the
  tree keeps the best `num_draft_tokens - 1` of `topk + (steps - 1) * topk^2` scored candidates
  (`speculative/eagle_utils.py` `organize_draft_results`, `theory.tree_bound`), so more fails at launch;
- NGRAM replaces `eagle_topk` by `ngram_max_bfs_breadth` and defaults the draft tokens to 12
  (`_handle_ngram`);
- DFLASH forces steps and topk to 1 (with a warning), its block size is an alias of the draft tokens that
  must agree with them, the draft window must hold a block, and it needs a draft model (`_handle_dflash`);
- DSPARK forces steps and topk to 1 (with a warning) (`_handle_dspark`).

Every refusal is a `SettingRefused`: its message names this setting's values, the source of the rule and
what SGLang would accept; its `rule` groups the combinations a `space:` prunes.
"""

from __future__ import annotations

import re
from typing import Any

from specfrontier.config.common import SettingRefused
from specfrontier.theory.tree_bound import TREE_BOUND_TEXT, max_verified_tokens

SOURCE = "sglang 0.5.23"
TREE_ALGORITHMS = ("EAGLE", "EAGLE3", "NEXTN", "STANDALONE")
"""`_handle_eagle_family`: num_steps x eagle_topk x num_draft_tokens, the tree bound."""
DOCUMENTED_ALGORITHMS = (*TREE_ALGORITHMS, "NGRAM", "DFLASH", "DSPARK", "UNO", "FROZEN_KV_MTP")
"""Every name sglang 0.5.23 starts with (`SpeculativeAlgorithm` members and the NEXTN alias)."""
STEP_ONE_ALGORITHMS = ("DFLASH", "DSPARK")
"""Algorithms whose num_steps and eagle_topk SGLang overrides to 1 (with a warning only)."""
NGRAM_DEFAULT_DRAFT_TOKENS = 12
NGRAM_DEFAULT_BFS_BREADTH = 10
NGRAM_KNOBS = ("ngram_min_bfs_breadth", "ngram_max_bfs_breadth", "ngram_match_type", "ngram_max_trie_depth")
NGRAM_KNOBS_ALL = (*NGRAM_KNOBS, "ngram_capacity")
DFLASH_KNOBS = ("dflash_block_size",)
KNOB_FLAGS = {
    "ngram_min_bfs_breadth": "--speculative-ngram-min-bfs-breadth",
    "ngram_max_bfs_breadth": "--speculative-ngram-max-bfs-breadth",
    "ngram_match_type": "--speculative-ngram-match-type",
    "ngram_max_trie_depth": "--speculative-ngram-max-trie-depth",
    "ngram_capacity": "--speculative-ngram-capacity",
    "dflash_block_size": "--speculative-dflash-block-size",
    "draft_window_size": "--speculative-draft-window-size",
}
"""Setting field -> SGLang flag (`arg_groups/fields/spec.py`), passed only when set."""

TREE_RULE = f"num_draft_tokens > {TREE_BOUND_TEXT} (SGLang keeps the best num_draft_tokens - 1 scored candidates)"


def _refuse(where: str, message: str, rule: str) -> SettingRefused:
    return SettingRefused(f"{where}: {message}", rule)


def check_algorithm(algorithm: str, where: str, known: tuple[str, ...] = DOCUMENTED_ALGORITHMS) -> None:
    """Refuse an algorithm SGLang has no worker for (it raises `Unknown speculative algorithm name`)."""
    if algorithm not in known:
        raise _refuse(
            where,
            f"algorithm = {algorithm!r}: SGLang ({SOURCE}) has no such speculative algorithm; "
            f"fix: use one of {', '.join(known)}",
            "unknown algorithm",
        )


def check_setting(s: Any, where: str) -> None:
    """SGLang's start-up rules for the setting `s` (an `SGLangSetting`); its algorithm is upper-cased."""
    knobs_set = [k for k in (*NGRAM_KNOBS_ALL, *DFLASH_KNOBS, "draft_window_size") if getattr(s, k) is not None]
    if s.algorithm is None:
        shape = [k for k in ("num_steps", "eagle_topk", "num_draft_tokens") if getattr(s, k) is not None]
        if shape or knobs_set:
            raise _refuse(
                where,
                f"{'/'.join(shape + knobs_set)} need a speculative algorithm; fix: set algorithm (e.g. EAGLE3) "
                "or remove them",
                "speculative knobs without an algorithm",
            )
        return
    check_algorithm(s.algorithm, where)
    _check_knobs_belong(s, where)
    if s.algorithm in TREE_ALGORITHMS:
        _check_tree(s, where)
    elif s.algorithm == "NGRAM":
        _check_ngram(s, where)
    elif s.algorithm in STEP_ONE_ALGORITHMS:
        _check_step_one(s, where)
    if s.algorithm == "DFLASH":
        _check_dflash(s, where)


def _check_knobs_belong(s: Any, where: str) -> None:
    """An NGRAM or DFLASH knob under another algorithm is ignored by SGLang: refused, it changes nothing."""
    for knobs, owner in ((NGRAM_KNOBS_ALL, "NGRAM"), (DFLASH_KNOBS, "DFLASH")):
        stray = [k for k in knobs if getattr(s, k) is not None]
        if stray and s.algorithm != owner:
            raise _refuse(
                where,
                f"{', '.join(stray)} apply to algorithm {owner} only, not {s.algorithm}; fix: remove them",
                f"{owner} knobs under another algorithm",
            )


def _check_tree(s: Any, where: str) -> None:
    """`_handle_eagle_family` and `organize_draft_results`."""
    steps, topk, draft = s.num_steps, s.eagle_topk, s.num_draft_tokens
    if steps is None:
        if topk is not None or draft is not None:
            raise _refuse(
                where,
                "num_steps is unset but eagle_topk/num_draft_tokens are set (SGLang asserts: "
                "speculative_hook.py _handle_eagle_family); fix: set num_steps",
                "num_steps unset with eagle_topk/num_draft_tokens set",
            )
        return
    topk = topk or 1
    bound = max_verified_tokens(steps, topk)
    if topk == 1 and draft is not None and draft != steps + 1:
        raise _refuse(
            where,
            f"num_draft_tokens = {draft} with eagle_topk = 1: SGLang rewrites it to num_steps + 1 = {steps + 1} "
            f"(speculative_hook.py _handle_eagle_family); fix: set num_draft_tokens to {steps + 1} or remove it",
            "eagle_topk 1 rewrites num_draft_tokens to num_steps + 1",
        )
    if topk > 1 and draft is None:
        raise _refuse(
            where,
            f"eagle_topk = {topk} needs num_draft_tokens (SGLang has no default for a tree); "
            f"fix: set num_draft_tokens between 2 and {bound}",
            "a tree without num_draft_tokens",
        )
    if draft is not None and draft > bound:
        raise _refuse(
            where,
            f"num_draft_tokens = {draft} > {TREE_BOUND_TEXT} = {bound} for num_steps = {steps}, eagle_topk = "
            f"{topk}: SGLang keeps the best num_draft_tokens - 1 of the {bound - 1} candidates it scores "
            f"(eagle_utils.py organize_draft_results) and fails at launch with more; fix: set num_draft_tokens "
            f"<= {bound}, or raise num_steps/eagle_topk",
            TREE_RULE,
        )


def _check_ngram(s: Any, where: str) -> None:
    """`_handle_ngram`: the BFS breadth is the tree's topk; an eagle_topk would be overwritten."""
    if s.eagle_topk is not None:
        raise _refuse(
            where,
            f"eagle_topk = {s.eagle_topk} with NGRAM: SGLang replaces it by ngram_max_bfs_breadth "
            "(speculative_hook.py _handle_ngram); fix: remove eagle_topk and set ngram_max_bfs_breadth",
            "eagle_topk under NGRAM (replaced by ngram_max_bfs_breadth)",
        )


def _check_step_one(s: Any, where: str) -> None:
    """DFLASH and DSPARK run one step of one branch: other values are overridden with a warning only."""
    for knob in ("num_steps", "eagle_topk"):
        value = getattr(s, knob)
        if value is not None and value != 1:
            raise _refuse(
                where,
                f"{knob} = {value} with {s.algorithm}: SGLang overrides it to 1 (speculative_hook.py "
                f"_handle_{s.algorithm.lower()}); fix: remove {knob} (the block size is num_draft_tokens)",
                f"num_steps/eagle_topk other than 1 under {s.algorithm}",
            )


def _check_dflash(s: Any, where: str) -> None:
    """`_handle_dflash`: the block size is num_draft_tokens; the draft window must hold one block."""
    block, draft = s.dflash_block_size, s.num_draft_tokens
    if block is not None and draft is not None and block != draft:
        raise _refuse(
            where,
            f"dflash_block_size = {block} and num_draft_tokens = {draft} differ (SGLang refuses: for DFLASH they "
            "must match, speculative_hook.py _handle_dflash); fix: set one of them",
            "DFLASH block size differs from num_draft_tokens",
        )
    tokens = block if block is not None else draft
    window = s.draft_window_size
    if window is not None and tokens is not None and window < tokens:
        raise _refuse(
            where,
            f"draft_window_size = {window} < the block size {tokens} (SGLang refuses: speculative_hook.py "
            f"_handle_dflash); fix: set draft_window_size >= {tokens}",
            "DFLASH draft window smaller than its block",
        )


_ALGORITHM_OPTION = re.compile(r"--speculative-algorithm(?:\s+[A-Z_]+)?\s*(\{[^}]*\})?(.*?)(?=\s\[?--[a-z]|\Z)")


def algorithms_from_help(help_text: str) -> tuple[str, ...] | None:
    """The algorithms the installed SGLang starts with, read from its `--help`: argparse choices
    (`{EAGLE,EAGLE3,...}`, older releases: exactly those), or the help's `Builtins: A, B, ...` (0.5.23 and
    later, whose enum also accepts FROZEN_KV_MTP and the NEXTN alias: the documented names are added).
    None when the help names neither (the caller uses `DOCUMENTED_ALGORITHMS`)."""
    for match in _ALGORITHM_OPTION.finditer(" ".join(help_text.split())):
        choices, text = match.group(1), match.group(2)
        if choices:
            return tuple(c.strip().upper() for c in choices.strip("{}").split(",") if c.strip())
        builtins = re.search(r"Builtins:\s*([A-Za-z0-9_, ]+)", text)
        if builtins is not None:
            named = tuple(n.strip().upper() for n in builtins.group(1).split(",") if n.strip())
            return tuple(dict.fromkeys((*named, *DOCUMENTED_ALGORITHMS)))
    return None


__all__ = [
    "DOCUMENTED_ALGORITHMS",
    "KNOB_FLAGS",
    "NGRAM_DEFAULT_BFS_BREADTH",
    "NGRAM_DEFAULT_DRAFT_TOKENS",
    "SOURCE",
    "TREE_ALGORITHMS",
    "TREE_RULE",
    "algorithms_from_help",
    "check_algorithm",
    "check_setting",
]
