"""Acceptance per drafter family, fitted from measured acceptance; tau(setting) from it (theory.md 1.2-1.3).

The formulas are the performance theory's (`theory.acceptance`, shared with the simulator): a chain's
`tau(s) = 1 + sum_{i<=s} prod_{j<=i} a_j`, with deeper positions than measured reusing the last measured
rate (`plan` says when it extrapolates), and a tree's tau from SGLang's tree (topk beam over num_steps
levels, the num_draft_tokens - 1 best candidates verified) under the rank-probability model: the chain's
rate a_j for the top-ranked candidate of depth j, and the share h each next-ranked sibling takes of what
the better ones left. Measured per-position counters give `a_j` directly: counter i is P(the first i
drafts are all accepted), so `a_j` = r_j / r_{j-1}.

Why fitted per family: an n-gram drafter and an EAGLE head accept differently, so each drafter
(`SettingParams.family`) gets its own rates; without any measured acceptance the rate is fitted from
throughput instead (`fit.py`), and every output says which source was used. The rank share h is fitted
from the family's measured tree settings (topk > 1); a family measured only as chains says nothing about
its lower-ranked candidates, so its trees are not predictable: the model says so and asks for one tree
to be measured, never a guess.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from specfrontier.errors import ConfigError
from specfrontier.metrics.stats import median
from specfrontier.perfmodel.types import ModelCell, SettingParams
from specfrontier.theory.acceptance import chain_tau, rates_to_depth, tree_tau

MAX_ALPHA = 0.9995
"""Highest rate the model uses: a rate of exactly 1 would claim the drafter is never wrong."""
SHARE_BOUNDS = (0.01, 0.99)
"""The rank share h the fit may choose: 0 would make a tree no better than its top path, 1 every
second-ranked candidate certain."""


@dataclass(frozen=True, slots=True)
class FamilyAcceptance:
    """Per-position conditional acceptance of one drafter family, its rank share, and where they came from."""

    conditional: tuple[float, ...]
    source: str
    rank_share: float | None = None
    """h of the rank-probability tree model, fitted from measured trees; None: no tree was measured."""
    rank_source: str = ""

    @classmethod
    def constant(
        cls, alpha: float, source: str, rank_share: float | None = None, rank_source: str = ""
    ) -> FamilyAcceptance:
        return cls((min(MAX_ALPHA, max(0.0, alpha)),), source, rank_share, rank_source)

    @property
    def alpha(self) -> float:
        """Geometric mean of the conditional rates: the family's rate summarised in one number."""
        logs = [math.log(max(a, 1e-9)) for a in self.conditional]
        return math.exp(sum(logs) / len(logs))

    def tau(self, params: SettingParams, family: str = "") -> float:
        """Expected tokens committed per draft+verify cycle, incl. the bonus token; a tree of a family
        whose rank share is unknown raises ConfigError (measure one tree of it)."""
        if not params.speculative:
            return 1.0
        top1 = rates_to_depth(self.conditional, params.steps)
        if params.topk == 1:
            return chain_tau(top1)
        if self.rank_share is None:
            name = family or params.family
            raise ConfigError(
                f"model: {params.label}: not predictable: drafter {name!r} was measured only as chains (topk 1), "
                "so how its lower-ranked draft candidates accept is unknown; fix: measure one tree setting of "
                f"{name} (eagle_topk > 1)"
            )
        return tree_tau(top1, params.topk, params.verified - 1, self.rank_share)


def solve_alpha(params: SettingParams, tau: float, rank_share: float | None = None) -> float:
    """The constant rate alpha whose tau for `params` equals the measured `tau` (bisection; tau rises with alpha)."""
    lo, hi = 0.0, MAX_ALPHA
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        if FamilyAcceptance.constant(mid, "", rank_share).tau(params) < tau:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


def fit_rank_share(conditional: Sequence[float], trees: Sequence[tuple[SettingParams, float]]) -> float:
    """The rank share h whose tree taus come closest to the measured ones (least squares on log tau),
    given the family's top-1 rates: tau rises with h, so the bounded search has one basin."""
    from scipy.optimize import minimize_scalar  # here, not at import: see fit.py

    def loss(share: float) -> float:
        fam = FamilyAcceptance(tuple(conditional), "", share)
        return sum((math.log(fam.tau(p)) - math.log(t)) ** 2 for p, t in trees)

    found = minimize_scalar(loss, bounds=SHARE_BOUNDS, method="bounded", options={"xatol": 1e-4})
    return float(found.x)


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


def _measured_tau(cell: ModelCell) -> float | None:
    """A cell's measured tau: its acceptance length, else 1 + its per-position counters' sum."""
    if cell.acceptance_length is not None:
        return cell.acceptance_length
    if cell.acceptance_per_position and any(v > 0 for v in cell.acceptance_per_position):
        return 1.0 + sum(cell.acceptance_per_position)
    return None


def _per_setting(cells: Sequence[ModelCell]) -> list[tuple[SettingParams, float]]:
    """Each setting's mean measured tau over its cells: a setting measured at 7 levels is one shape, and
    fitting per setting costs 7 x less."""
    taus: dict[SettingParams, list[float]] = {}
    for c in cells:
        if (t := _measured_tau(c)) is not None:
            taus.setdefault(c.params, []).append(t)
    return [(p, sum(v) / len(v)) for p, v in taus.items()]


def fit_acceptance(cells: Sequence[ModelCell]) -> dict[str, FamilyAcceptance]:
    """Per family: top-1 rates from chains' per-position counters if any, else from the chains' measured
    acceptance lengths; the rank share from the trees' measured taus (with no chain measured, one constant
    rate and the share are fitted to the trees together).

    A family with no measured acceptance at all is absent from the result: its rate has to be fitted from
    throughput."""
    out: dict[str, FamilyAcceptance] = {}
    families = sorted({c.params.family for c in cells if c.params.speculative})
    for family in families:
        own = [c for c in cells if c.params.family == family and c.params.speculative]
        chains = [c for c in own if c.params.topk == 1]
        trees = _per_setting([c for c in own if c.params.topk > 1])
        positions = [c.acceptance_per_position for c in chains if c.acceptance_per_position]
        chain_taus = _per_setting(chains)
        if positions and any(any(v > 0 for v in p) for p in positions):
            fam = FamilyAcceptance(
                _conditional_from_positions(positions), f"per-position counters of {len(positions)} cells"
            )
        elif chain_taus:
            alpha = median([solve_alpha(p, t) for p, t in chain_taus])
            fam = FamilyAcceptance.constant(
                alpha, f"acceptance length of {len(chain_taus)} chain settings (constant rate)"
            )
        elif trees:
            out[family] = _fit_trees_only(trees)
            continue
        else:
            continue
        if trees:
            share = fit_rank_share(fam.conditional, trees)
            fam = FamilyAcceptance(
                fam.conditional, fam.source, share, f"acceptance length of {len(trees)} tree settings"
            )
        out[family] = fam
    return out


def _fit_trees_only(trees: Sequence[tuple[SettingParams, float]]) -> FamilyAcceptance:
    """One constant top-1 rate and the rank share fitted to trees alone: the share on a grid, the rate solved
    per cell (median) at each, the pair with the smallest log-tau error kept, then the share refined."""
    best: tuple[float, float, float] | None = None
    for share in (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9):
        alpha = median([solve_alpha(p, t, share) for p, t in trees])
        fam = FamilyAcceptance.constant(alpha, "", share)
        loss = sum((math.log(fam.tau(p)) - math.log(t)) ** 2 for p, t in trees)
        if best is None or loss < best[0]:
            best = (loss, alpha, share)
    assert best is not None
    _, alpha, _ = best
    share = fit_rank_share((alpha,), trees)
    source = f"acceptance length of {len(trees)} tree settings (constant rate, no chain measured)"
    return FamilyAcceptance.constant(alpha, source, share, f"acceptance length of {len(trees)} tree settings")


__all__ = ["MAX_ALPHA", "SHARE_BOUNDS", "FamilyAcceptance", "fit_acceptance", "fit_rank_share", "solve_alpha"]
