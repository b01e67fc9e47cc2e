"""Acceptance length tau(setting) from measured acceptance (theory.md 1.2-1.3).

Chain (topk 1): `tau(s) = 1 + sum_{i<=s} prod_{j<=i} a_j`, with `a_j` = P(draft j accepted | drafts
1..j-1 accepted). Measured per-position counters give `a_j` directly up to the deepest measured position;
deeper positions reuse the last measured rate (EAGLE-3's per-position acceptance is nearly flat with
depth, so this is the documented prior, and `plan` says when it extrapolates).

Tree (topk > 1): under greedy verification siblings are exclusive, so `tau = 1 + sum over verified nodes
of P(path accepted)`. The rank-probability model gives the best candidate probability q1 = alpha and
spreads the rest geometrically over lower ranks (q_k = (1 - alpha) * (1 - g) * g^(k-2), g = 0.5); the
verified tree is the D - 1 most probable nodes (EAGLE-2's global reranking), found best-first.

Why fitted per family: an n-gram drafter and an EAGLE head accept differently, so each drafter
(`SettingParams.family`) gets its own rates; without any measured acceptance the rate is fitted from
throughput instead (`fit.py`), and every output says which source was used.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Sequence
from dataclasses import dataclass

from specfrontier.model.types import ModelCell, SettingParams

SIBLING_DECAY = 0.5
"""g: how fast the probability of lower-ranked draft candidates falls (rank-probability tree model)."""
MAX_ALPHA = 0.9995


@dataclass(frozen=True, slots=True)
class FamilyAcceptance:
    """Per-position conditional acceptance of one drafter family, and where it came from."""

    conditional: tuple[float, ...]
    source: str

    @classmethod
    def constant(cls, alpha: float, source: str) -> FamilyAcceptance:
        return cls((min(MAX_ALPHA, max(0.0, alpha)),), source)

    def rate(self, position: int) -> float:
        """a_j for 1-based position j (the last measured rate beyond the measured depth)."""
        return self.conditional[min(position, len(self.conditional)) - 1]

    @property
    def alpha(self) -> float:
        """Geometric mean of the conditional rates: the single rate used for trees."""
        logs = [math.log(max(a, 1e-9)) for a in self.conditional]
        return math.exp(sum(logs) / len(logs))

    def tau(self, params: SettingParams) -> float:
        """Expected tokens committed per draft+verify cycle, incl. the bonus token."""
        if not params.speculative:
            return 1.0
        if params.topk == 1:
            return chain_tau([self.rate(j) for j in range(1, params.steps + 1)])
        return tree_tau(self.alpha, params.steps, params.topk, params.verified)


def chain_tau(conditional: Sequence[float]) -> float:
    """1 + sum_i prod_{j<=i} a_j."""
    tau, survive = 1.0, 1.0
    for a in conditional:
        survive *= a
        tau += survive
    return tau


def _rank_probabilities(alpha: float, topk: int) -> list[float]:
    rest = 1.0 - alpha
    return [alpha] + [rest * (1.0 - SIBLING_DECAY) * SIBLING_DECAY ** (k - 2) for k in range(2, topk + 1)]


def tree_tau(alpha: float, depth: int, topk: int, verified: int) -> float:
    """tau of the best `verified - 1` nodes of a depth x topk draft tree (best-first over path products)."""
    ranks = _rank_probabilities(alpha, topk)
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


def solve_alpha(params: SettingParams, tau: float) -> float:
    """The constant rate alpha whose tau for `params` equals the measured `tau` (bisection; tau rises with alpha)."""
    lo, hi = 0.0, MAX_ALPHA
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        if FamilyAcceptance.constant(mid, "").tau(params) < tau:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


def _conditional_from_positions(rows: Sequence[tuple[float, ...]]) -> tuple[float, ...]:
    """Mean conditional rate per position over cells; r_i / r_{i-1} per cell (r_0 = 1)."""
    sums: list[float] = []
    counts: list[int] = []
    for r in rows:
        prev = 1.0
        for i, value in enumerate(r):
            if prev <= 0:
                break
            a = min(1.0, max(0.0, value / prev))
            if i == len(sums):
                sums.append(0.0)
                counts.append(0)
            sums[i] += a
            counts[i] += 1
            prev = value
    return tuple(min(MAX_ALPHA, s / n) for s, n in zip(sums, counts, strict=True))


def fit_acceptance(cells: Sequence[ModelCell]) -> dict[str, FamilyAcceptance]:
    """Per family: per-position counters if any cell has them, else the measured acceptance lengths.

    A family with neither is absent from the result: its rate has to be fitted from throughput."""
    out: dict[str, FamilyAcceptance] = {}
    families = sorted({c.params.family for c in cells if c.params.speculative})
    for family in families:
        own = [c for c in cells if c.params.family == family and c.params.speculative]
        positions = [c.acceptance_per_position for c in own if c.acceptance_per_position and c.params.topk == 1]
        if positions and any(any(v > 0 for v in p) for p in positions):
            out[family] = FamilyAcceptance(
                _conditional_from_positions(positions), f"per-position counters of {len(positions)} cells"
            )
            continue
        taus = [(c.params, c.acceptance_length) for c in own if c.acceptance_length is not None]
        if taus:
            alphas = sorted(solve_alpha(p, t) for p, t in taus)
            mid = alphas[len(alphas) // 2] if len(alphas) % 2 else 0.5 * sum(alphas[len(alphas) // 2 - 1 :][:2])
            out[family] = FamilyAcceptance.constant(mid, f"acceptance length of {len(taus)} cells (constant rate)")
    return out


__all__ = ["SIBLING_DECAY", "FamilyAcceptance", "chain_tau", "fit_acceptance", "solve_alpha", "tree_tau"]
