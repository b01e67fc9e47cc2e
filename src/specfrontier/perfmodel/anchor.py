"""The baseline's measured misfit at n tokens, carried to speculative cycles that verify n tokens (issue 38).

A speculative cycle over B requests verifies n = B * D tokens in one forward pass of the target; a step of
NO speculation at batch n is a forward of n tokens too. The cycle forms (`cycle.py`) are smooth in n (expert
coverage, a roofline hinge) and a real engine is not (kernel tiles, CUDA graphs captured at some batch
sizes and padded to the next, expert-parallel all-to-alls): where the fitted baseline misses its own
measured step at n tokens, that miss says how the form misses the engine's forward of n tokens, and a
speculative prediction at n verified tokens is moved by it.

The two forwards are not the same in one part: the baseline step at n runs n requests (their KV reads,
sampling, scheduling: the per-request term), the verify pass B requests with D query tokens each. So the
baseline's misfit is carried RELATIVE to its forward, onto the speculative cycle's forward at its own B:

    m(n) = (T_obs(n) - T_pred(n)) / F(n, n)       at each fitted no-speculation cell (F = T_pred less overhead)
    T_spec(B, setting) = T_form(B, setting) + m(B * D) * F(B, B * D)

F(B, n) = fixed + per-request * B + verify(n), the form's cycle less the drafter's own columns
(`CycleModel.forward_ms`): no speculative share of a misfit the baseline cannot see, and no KV of n
requests charged to a cycle that holds B. For a chain at high load (D small against B) F(B, n) is close
to F(n, n) and the shift is the baseline's residual in ms; for a tree at one request verifying 64 tokens
it is the per-token part of it. Measured on the public tables (benchmarks/model_public.py; docs/model.md):
vLLM's DSV4 DSpark k = 1 at C = 16 verifies 32 tokens, the fitted baseline at C = 32 is 8.7 % under its
measured step, and k = 1 there, left out, 11.0 % off, anchored 2.2 %; carrying the residual in ms
instead moved AngelSlim's trees at one request by the KV cost of 64 requests (training RMS 5.9 -> 6.4 %).

Rules, each with its reason:
- only speculative predictions move: a baseline prediction stays the parametric form (anchoring it would
  make the model reproduce its own training cells, a training error of 0 that says nothing);
- only between the smallest and the largest n a fitted baseline cell ran at (interpolated in log n, the
  step cost's natural axis); beyond them the misfit is not known, and carrying the edge's would extend a
  kernel's quirk to sizes it does not reach (measured with the misfit in ms: clamping to the edge raised
  the chains' worst held-out error on the public tables 8.4 -> 9.0 %);
- the anchor is taken after the fit from the cells that fit saw, so each held-out fold's anchor knows only
  its own baseline (a left-out level's baseline cell does not anchor its own prediction).

The siblings' misfit at the same batch (`SiblingAnchor`). Chains of one drafter run the same draft and verify
code at a batch size and differ only in depth, so what the form misses at a batch (a level whose runs were
slow or fast, a captured graph, a scheduler's quirk there) shows in each of them; on a table with no baseline
to anchor to it is the only evidence of it. A chain's cycle at B is scaled by the mean relative misfit, at B,
of the OTHER fitted chains of its drafter, shrunk by w = tau2 / (tau2 + sigma2 / k) for k of them: over the
batches where two or more chains ran, sigma2 is the variance of a chain's misfit around its batch's mean and
tau2 the variance of the batch means less sigma2 / (mean chains per batch), at least 0 (one-way random
effects, by moments). A batch effect the chains share is carried; misfits that are each cell's own noise
give tau2 ~ 0 and move nothing. Measured (benchmarks/model_public.py, docs/model.md): GLM-4.7's EAGLE chains
(SGLang PR #22246, no baseline), steps 2 at two requests left out, +8.2 -> +6.1 % (its four siblings 1.96 %
slow there, w = 0.82); the public chains' held-out mean 2.4 -> 2.0 %, max 8.2 -> 6.5 %. Unshrunk, a simulated
chat sweep's per-cell sampling noise moved its neighbours and the depth chosen at C = 2 lost 7.2 %. Rules:
never a setting's own misfit (a fitted cell's prediction must not be its measurement); never across drafters;
never for trees (they differ in steps, topk and verified tokens at once: a batch's effect is not told from a
shape's; with them AngelSlim's training RMS went 6.0 -> 6.2 %); nothing at a batch no sibling ran at; taken
after the fit and the token anchor, from the cells that fit saw.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from specfrontier.perfmodel.cycle import CycleModel, CycleObservation
from specfrontier.perfmodel.types import SettingParams
from specfrontier.theory.cycle import verified_tokens


@dataclass(frozen=True, slots=True)
class TokenAnchor:
    """The fitted baseline's misfit per verified-token count n it ran at: (measured - predicted cycle) /
    predicted forward, both at n tokens."""

    tokens: tuple[float, ...] = ()
    """The n of the fitted no-speculation cells (= their running requests), ascending, distinct."""
    misfit: tuple[float, ...] = ()
    """The mean relative misfit at each n (a cell with a decode rate and an aggregate gives two)."""

    def misfit_at(self, tokens: float) -> float:
        """m(n) at `tokens` verified tokens, interpolated in log n between the baseline's n; 0 outside them
        (and with no baseline fitted)."""
        if not self.tokens or not self.tokens[0] <= tokens <= self.tokens[-1]:
            return 0.0
        return float(np.interp(math.log(tokens), np.log(self.tokens), self.misfit))

    def offset_ms(self, cycle: CycleModel, batch: int, params: SettingParams) -> float:
        """What the anchor adds to the form's T(B, setting) of a speculative setting: m(B * D) x its forward."""
        if not params.speculative:
            return 0.0
        misfit = self.misfit_at(verified_tokens(batch, params.verified))
        return misfit * cycle.forward_ms(batch, params) if misfit else 0.0

    def describe(self) -> str:
        """One line for reports: the misfits the speculative predictions are moved by."""
        if not self.tokens:
            return "anchor: none (no setting without speculation fitted)"
        shown = ", ".join(f"{n:g} {100 * m:+.1f} %" for n, m in zip(self.tokens, self.misfit, strict=True))
        return (
            "anchor: a speculative cycle's forward is moved by the fitted baseline's misfit at the tokens it "
            f"verifies ((measured - predicted) / predicted forward, in log n between, none outside): {shown}"
        )


@dataclass(frozen=True, slots=True)
class SiblingAnchor:
    """Per (drafter, batch): each fitted chain setting's mean relative cycle misfit there, (measured -
    predicted) / predicted with the token anchor; and per drafter, how much of the misfit is the batch's."""

    misfit: tuple[tuple[tuple[str, int], tuple[tuple[SettingParams, float], ...]], ...] = ()
    level_share: tuple[tuple[str, float, float], ...] = ()
    """Per drafter: (family, tau2, sigma2), the variance of a batch's own effect and of a setting's misfit
    around it (one-way random effects over the batches two or more settings ran at)."""

    def misfit_at(self, batch: int, params: SettingParams) -> float:
        """The batch's effect as `params`' siblings show it: the mean misfit at `batch` of the other fitted
        chains of its drafter, shrunk by tau2 / (tau2 + sigma2 / k) for k of them (0 without a sibling
        there, for a tree or a setting without speculation, or where the batches share no effect)."""
        if not params.speculative or params.topk > 1:
            return 0.0
        others = [
            m
            for (family, b), rows in self.misfit
            if (family, b) == (params.family, batch)
            for p, m in rows
            if p != params
        ]
        share = next(((t, s) for family, t, s in self.level_share if family == params.family), None)
        if not others or share is None or share[0] <= 0:
            return 0.0
        tau2, sigma2 = share
        return tau2 / (tau2 + sigma2 / len(others)) * sum(others) / len(others)

    def describe(self) -> str:
        """One line for reports: the misfits a setting's siblings move it by, and how far."""
        if not self.misfit:
            return "sibling anchor: none (no two chain settings of one drafter at one batch size)"
        shown = "; ".join(
            f"{family} at B={batch}: " + ", ".join(f"{p.label} {100 * m:+.1f} %" for p, m in rows)
            for (family, batch), rows in self.misfit
        )
        shares = ", ".join(
            f"{family}: batch effect sd {100 * math.sqrt(t):.1f} %, setting sd {100 * math.sqrt(s):.1f} %"
            for family, t, s in self.level_share
        )
        return (
            "sibling anchor: a chain's cycle at B is scaled by the mean misfit of its drafter's other fitted chains "
            f"at B ((measured - predicted) / predicted), shrunk by how much of it is the batch's ({shares}): {shown}"
        )


def sibling_anchor(cycle: CycleModel, tokens: TokenAnchor, observations: Sequence[CycleObservation]) -> SiblingAnchor:
    """The sibling anchor of `cycle` (with the token anchor `tokens`) from its chain observations: groups of
    two or more settings at one batch, and per drafter the one-way random-effects variances over them
    (tau2 = var of the batch means - sigma2 / mean group size, at least 0)."""
    by_key: dict[tuple[str, int], dict[SettingParams, list[float]]] = {}
    for o in observations:
        if not o.params.speculative or o.params.topk > 1:
            continue
        predicted = cycle.observed_ms(o) + tokens.offset_ms(cycle, o.batch, o.params)
        if predicted <= 0:
            continue
        by_key.setdefault((o.params.family, o.batch), {}).setdefault(o.params, []).append(o.cycle_ms / predicted - 1.0)
    groups = tuple(
        (key, tuple((p, sum(v) / len(v)) for p, v in rows.items()))
        for key, rows in sorted(by_key.items())
        if len(rows) >= 2
    )
    shares = []
    for family in sorted({family for (family, _), _ in groups}):
        batches = [np.array([m for _, m in rows]) for (f, _), rows in groups if f == family]
        within_df = sum(len(b) - 1 for b in batches)
        if len(batches) < 2 or within_df < 1:
            continue
        sigma2 = float(sum(((b - b.mean()) ** 2).sum() for b in batches)) / within_df
        between = float(np.var([b.mean() for b in batches]))
        size = float(np.mean([len(b) for b in batches]))
        shares.append((family, max(0.0, between - sigma2 / size), sigma2))
    return SiblingAnchor(groups, tuple(shares))


def token_anchor(cycle: CycleModel, observations: Sequence[CycleObservation]) -> TokenAnchor:
    """The anchor of `cycle` from the observations of its no-speculation cells (speculative ones are ignored):
    each one's residual against what the form predicts for it (turnaround overhead included), over the
    form's forward at its n."""
    by_tokens: dict[float, list[float]] = {}
    for o in observations:
        forward = cycle.forward_ms(o.batch, o.params)
        if o.params.speculative or forward <= 0:
            continue
        predicted = cycle.observed_ms(o)
        n = verified_tokens(o.batch, o.params.verified)
        by_tokens.setdefault(n, []).append((o.cycle_ms - predicted) / forward)
    tokens = tuple(sorted(by_tokens))
    return TokenAnchor(tokens, tuple(sum(by_tokens[n]) / len(by_tokens[n]) for n in tokens))


__all__ = ["SiblingAnchor", "TokenAnchor", "sibling_anchor", "token_anchor"]
