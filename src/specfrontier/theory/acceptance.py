"""Acceptance length tau: tokens committed per draft + verify cycle, bonus token included (theory.md 1.2-1.3).

Chain (topk 1): draft j is accepted with conditional probability a_j given drafts 1..j-1 were, and
verification stops at the first rejection, so

    tau = 1 + sum_i prod_{j<=i} a_j

Rates are known only to some depth (measured positions, a profile's list); deeper positions reuse the
last rate (`rates_to_depth`), the documented prior for EAGLE-3, whose per-position rate is nearly flat.

Trees (topk > 1): under greedy verification siblings are exclusive, so tau = 1 + the sum over verified
nodes of P(path accepted). Two approximations are in use, kept apart because each caller's numbers are
what its tests and calibrations rest on:

- `tree_tau` (the fitted model): rank-probability best-first. The top candidate has probability alpha,
  lower ranks share the rest geometrically (q_r = (1 - alpha) (1 - g) g^(r-2)), and the D - 1 most
  probable nodes are verified (EAGLE-2's global reranking). Exact for that rank model.
- `widened_chain_rates` (the simulator, which draws acceptance depth by depth): the tree as a chain whose
  depth j offers w_j candidates on the best path; a depth passes when one matches,
  P_j(w) = a_j + (1 - a_j) (1 - (1 - h)^(w - 1)), each next rank taking the share h of what is left.
  Nodes go greedily to the depth with the largest gain in tau; side branches below a non-top sibling
  are ignored, so wide trees come out slightly pessimistic.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence

SIBLING_DECAY = 0.5
"""g: how fast the probability of lower-ranked draft candidates falls (rank-probability tree model)."""


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


def rank_probabilities(alpha: float, topk: int, sibling_decay: float = SIBLING_DECAY) -> list[float]:
    """q_1..q_topk: the chance that the rank-r draft candidate is the target's token."""
    rest = 1.0 - alpha
    return [alpha] + [rest * (1.0 - sibling_decay) * sibling_decay ** (k - 2) for k in range(2, topk + 1)]


def tree_tau(alpha: float, depth: int, topk: int, verified: int, *, sibling_decay: float = SIBLING_DECAY) -> float:
    """tau of the best `verified - 1` nodes of a depth x topk draft tree (best-first over path products)."""
    ranks = rank_probabilities(alpha, topk, sibling_decay)
    # Path products only shrink with depth, so the most probable nodes always form a subtree (a node is
    # taken only after its parent): expanding best-first from the root's children is exact.
    frontier: list[tuple[float, int]] = [(-q, 1) for q in ranks]
    heapq.heapify(frontier)
    tau, taken = 1.0, 0
    while frontier and taken < verified - 1:
        neg, level = heapq.heappop(frontier)
        tau += -neg
        taken += 1
        if level < depth:
            for q in ranks:
                heapq.heappush(frontier, (neg * q, level + 1))
    return tau


def widened_depth_pass(a: float, width: int, rank_share: float) -> float:
    """P_j(w): a depth with top-1 rate `a` and `width` candidates passes when one of them matches."""
    if width <= 0:
        return 0.0
    return a + (1.0 - a) * (1.0 - (1.0 - rank_share) ** (width - 1))


def widened_chain_widths(top1: Sequence[float], topk: int, draft_nodes: int, rank_share: float) -> list[int]:
    """Candidates verified per depth for `draft_nodes` (= D - 1) nodes, given greedily by gain in tau."""
    widths = [0] * len(top1)
    for _ in range(draft_nodes):
        best, best_gain = -1, -1.0
        current = chain_tau([widened_depth_pass(a, w, rank_share) for a, w in zip(top1, widths, strict=True)])
        for j in range(len(top1)):
            if widths[j] >= topk or (j > 0 and widths[j - 1] == 0):
                continue
            trial = list(widths)
            trial[j] += 1
            gain = chain_tau([widened_depth_pass(a, w, rank_share) for a, w in zip(top1, trial, strict=True)])
            if gain - current > best_gain:
                best, best_gain = j, gain - current
        if best < 0:
            break
        widths[best] += 1
    return widths


def widened_chain_rates(top1: Sequence[float], topk: int, draft_nodes: int, rank_share: float) -> list[float]:
    """Per-depth pass probabilities of the widened chain, down to its deepest verified depth."""
    widths = widened_chain_widths(top1, topk, draft_nodes, rank_share)
    return [widened_depth_pass(a, w, rank_share) for a, w in zip(top1, widths, strict=True) if w > 0]


__all__ = [
    "SIBLING_DECAY",
    "chain_tau",
    "rank_probabilities",
    "rates_to_depth",
    "tree_tau",
    "widened_chain_rates",
    "widened_chain_widths",
    "widened_depth_pass",
]
