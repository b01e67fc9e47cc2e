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


def token_anchor(cycle: CycleModel, observations: Sequence[CycleObservation]) -> TokenAnchor:
    """The anchor of `cycle` from the observations of its no-speculation cells (speculative ones are ignored):
    each one's residual against what the form predicts for it (turnaround overhead included), over the
    form's forward at its n."""
    by_tokens: dict[float, list[float]] = {}
    for o in observations:
        forward = cycle.forward_ms(o.batch, o.params)
        if o.params.speculative or forward <= 0:
            continue
        predicted = cycle.cycle_ms(o.batch, o.params) + o.overhead_per_token * cycle.overhead_ms(o.batch)
        n = verified_tokens(o.batch, o.params.verified)
        by_tokens.setdefault(n, []).append((o.cycle_ms - predicted) / forward)
    tokens = tuple(sorted(by_tokens))
    return TokenAnchor(tokens, tuple(sum(by_tokens[n]) / len(by_tokens[n]) for n in tokens))


__all__ = ["TokenAnchor", "token_anchor"]
