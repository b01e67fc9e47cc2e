"""Acceptance length tau: tokens committed per draft + verify cycle, bonus token included (theory.md 1.2-1.3).

Chain (topk 1): draft j is accepted with conditional probability a_j given drafts 1..j-1 were, and
verification stops at the first rejection, so

    tau = 1 + sum_i prod_{j<=i} a_j

Rates are known only to some depth (measured positions, a profile's list); deeper positions reuse the
last rate (`rates_to_depth`), the documented prior for EAGLE-3, whose per-position rate is nearly flat.

Trees (topk > 1), as SGLang builds them (`select_top_k_tokens` and `organize_draft_results` in
python/sglang/srt/speculative/eagle_utils.py): the first draft step proposes topk children of the last
verified token; each later step expands the topk best nodes of the previous level (by path score) by
topk children each and keeps the topk best of those topk^2 as the next beam. Every proposed node is a
candidate (topk + (num_steps - 1) * topk^2 of them), and the num_draft_tokens - 1 best by path score are
verified. Under greedy verification siblings are exclusive, so the accepted length L satisfies

    P(L >= j) = sum over verified nodes v at depth j of P(the path to v matches)
    tau = 1 + sum_j P(L >= j)

The rank-probability model (theory.md 1.3) gives each node's chance: the rank-r child at depth j matches
with q_{j,1} = a_j (the chain's top-1 rate) and q_{j,r} = (1 - a_j) h (1 - h)^(r-2) for r >= 2 (each
next rank takes the share h of what the better ranks left), and the draft's scores are taken as
calibrated (EAGLE-2), so ranking by score is ranking by that chance. `tree_reach` computes P(L >= j)
exactly for this model; the fitted model sums it into tau, and the simulator draws acceptance depth by
depth with the conditional rates P(L >= j) / P(L >= j - 1), which give exactly that distribution of L.
With topk 1 the tree is the chain.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache

DEFAULT_RANK_SHARE = 0.4
"""h: the share of the probability the better-ranked candidates left that each next-ranked one takes,
where nothing measured says otherwise (a simulator profile's `rank_share` default; the fitted model fits
its own from measured tree settings)."""


MAX_RATE = 0.9999
"""The highest conditional rate a model gives a draft (a rate of 1 would make every draft certain)."""


def scaled_miss_rate(rate: float, miss_scale: float) -> float:
    """1 - (1 - a) * m, kept within [0, MAX_RATE]: rate a with its miss rate 1 - a scaled by m (> 1: misses more).

    Acceptance varies by scaling what is missed, not what is hit, so a rate near 1 stays below 1 and one
    factor moves easy and hard positions alike: the simulator's per-request spread and the calibration's
    acceptance parameter both scale rates this way."""
    return min(MAX_RATE, max(0.0, 1.0 - (1.0 - rate) * miss_scale))


def rates_to_depth(rates: Sequence[float], depth: int) -> list[float]:
    """Per-depth rates for depths 1..depth: the given ones, the last reused beyond them."""
    return [rates[min(j, len(rates) - 1)] for j in range(depth)]


def chain_tau(depth_rates: Sequence[float]) -> float:
    """tau = 1 + sum over depths of the probability that every draft up to that depth is accepted."""
    tau, alive = 1.0, 1.0
    for a in depth_rates:
        alive *= a
        tau += alive
    return tau


def rank_probabilities(top1: float, topk: int, rank_share: float = DEFAULT_RANK_SHARE) -> list[float]:
    """q_1..q_topk: the chance that the rank-r draft candidate of one depth is the target's token."""
    rest = 1.0 - top1
    return [top1] + [rest * rank_share * (1.0 - rank_share) ** (r - 2) for r in range(2, topk + 1)]


def tree_nodes(top1: Sequence[float], topk: int, rank_share: float) -> list[tuple[float, int]]:
    """(path probability, depth) of every node SGLang's draft proposes: `len(top1)` steps of a beam of width
    `topk` (topk + (steps - 1) * topk^2 nodes), the path probability being the product of the ranks' q."""
    candidates: list[tuple[float, int]] = []
    beam = [1.0]
    for depth, a in enumerate(top1, start=1):
        ranks = rank_probabilities(a, topk, rank_share)
        level = sorted((p * q for p in beam for q in ranks), reverse=True)
        candidates += [(p, depth) for p in level]
        beam = level[:topk]
    return candidates


def tree_reach(top1: Sequence[float], topk: int, draft_nodes: int, rank_share: float) -> list[float]:
    """P(L >= j) for j = 1..the deepest verified depth: the `draft_nodes` (= num_draft_tokens - 1) most
    probable candidates, summed per depth. A node's chance never exceeds its parent's, and on a tie the
    shallower node goes first, so the chosen nodes always form a tree (a node is verified with its parent)."""
    return list(_tree_reach(tuple(top1), topk, draft_nodes, rank_share))


@lru_cache(maxsize=4096)
def _tree_reach(top1: tuple[float, ...], topk: int, draft_nodes: int, rank_share: float) -> tuple[float, ...]:
    chosen = sorted(tree_nodes(top1, topk, rank_share), key=lambda c: (-c[0], c[1]))[: max(0, draft_nodes)]
    reach = [0.0] * max((depth for _, depth in chosen), default=0)
    for p, depth in chosen:
        reach[depth - 1] += p
    return tuple(reach)


def conditional_rates(reach: Sequence[float]) -> list[float]:
    """P(L >= j) / P(L >= j - 1) per depth: the rates a depth-by-depth draw passes with (0 past a zero)."""
    out, before = [], 1.0
    for r in reach:
        out.append(min(1.0, r / before) if before > 0 else 0.0)
        before = r
    return out


def tree_tau(top1: Sequence[float], topk: int, draft_nodes: int, rank_share: float = DEFAULT_RANK_SHARE) -> float:
    """tau of SGLang's tree of `len(top1)` steps, `topk` branches and `draft_nodes` verified draft nodes;
    with topk 1 and draft_nodes >= steps, the chain's tau."""
    return 1.0 + sum(_tree_reach(tuple(top1), topk, draft_nodes, rank_share))


__all__ = [
    "DEFAULT_RANK_SHARE",
    "MAX_RATE",
    "chain_tau",
    "conditional_rates",
    "rank_probabilities",
    "rates_to_depth",
    "scaled_miss_rate",
    "tree_nodes",
    "tree_reach",
    "tree_tau",
]
