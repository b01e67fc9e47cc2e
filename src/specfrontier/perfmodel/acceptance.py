"""Acceptance per drafter family, fitted from measured acceptance; tau(setting) from it (theory.md 1.2-1.3).

The formulas are the performance theory's (`theory.acceptance`, shared with the simulator): a chain's
`tau(s) = 1 + sum_{i<=s} prod_{j<=i} a_j`, with deeper positions than measured reusing the last measured
rate (`plan` says when it extrapolates), and a tree's tau from the rank-probability best-first model at
the family's single rate alpha. Measured per-position counters give `a_j` directly: counter i is
P(the first i drafts are all accepted), so `a_j` = r_j / r_{j-1}.

Why fitted per family: an n-gram drafter and an EAGLE head accept differently, so each drafter
(`SettingParams.family`) gets its own rates; without any measured acceptance the rate is fitted from
throughput instead (`fit.py`), and every output says which source was used.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from specfrontier.perfmodel.types import ModelCell, SettingParams
from specfrontier.theory.acceptance import chain_tau, rates_to_depth, tree_tau

MAX_ALPHA = 0.9995
"""Highest rate the model uses: a rate of exactly 1 would claim the drafter is never wrong."""


@dataclass(frozen=True, slots=True)
class FamilyAcceptance:
    """Per-position conditional acceptance of one drafter family, and where it came from."""

    conditional: tuple[float, ...]
    source: str

    @classmethod
    def constant(cls, alpha: float, source: str) -> FamilyAcceptance:
        return cls((min(MAX_ALPHA, max(0.0, alpha)),), source)

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
            return chain_tau(rates_to_depth(self.conditional, params.steps))
        return tree_tau(self.alpha, params.steps, params.topk, params.verified)


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


__all__ = ["MAX_ALPHA", "FamilyAcceptance", "fit_acceptance", "solve_alpha"]
