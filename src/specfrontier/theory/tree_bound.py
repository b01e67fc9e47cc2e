"""How many tokens an EAGLE-2 style dynamic draft tree can hand to verification (SGLang's tree).

SGLang drafts `num_steps` levels with `topk` branches: the first level scores `topk` tokens, every later
level scores `topk * topk` (each of the `topk` kept nodes proposes `topk` children), and verification
takes the best `num_draft_tokens - 1` of all scored candidates plus the root. So a setting can verify at
most

    topk + (num_steps - 1) * topk^2 + 1

tokens per request per step (sglang 0.5.23 `speculative/spec_utils.py` `_select_top_k_tokens_first`
and `_later`, and `speculative/eagle_utils.py` `organize_draft_results`, whose `torch.topk` fails with
more). With `topk == 1` it is the chain's `num_steps + 1`. Written once here: the engine's validation and
the simulator's resolution both use it, so they cannot disagree on what SGLang accepts.
"""

from __future__ import annotations


def tree_candidates(num_steps: int, topk: int) -> int:
    """Draft tokens scored over `num_steps` levels of `topk` branches: `topk + (num_steps - 1) * topk^2`."""
    return topk + (num_steps - 1) * topk * topk


def max_verified_tokens(num_steps: int, topk: int) -> int:
    """The largest `num_draft_tokens` (root included) SGLang can run at this depth and branching."""
    return tree_candidates(num_steps, topk) + 1


TREE_BOUND_TEXT = "eagle_topk + (num_steps - 1) * eagle_topk^2 + 1"
"""The bound as a formula in SGLang's knob names, for error lines and summaries."""


__all__ = ["TREE_BOUND_TEXT", "max_verified_tokens", "tree_candidates"]
