"""Cells that contradict the model's premises: a table no form can fit, shown with the pair that says why.

The cycle-time forms (`cycle.py`) have non-negative costs per term, so within one drafter family, at one
concurrency, a setting that drafts and verifies at least as much as another (depth, branching and verified
tokens each at least as large) cannot complete a cycle faster; and no speculative cycle is faster than the
plain decode step at the same concurrency. Where both acceptance lengths are measured, the cycle time a cell
implies is observable (T = 1000 x C x tau / aggregate, or 1000 x tau / decode rate), so such a pair can be
checked. A pair that breaks this by more than the noise the table's source states is a contradiction: no
fit can pass near both cells, and a fit that tries is pulled off every other cell too.

Public example (SpecForge issue #339, Qwen3-30B-A3B on 2 x H100, one run per setting): at batch size 1 the
tree (3 steps, topk 3, 4 verified tokens) gives 207.62 tok/s at acceptance 1.99, the chain (3 steps, 4
verified tokens) 159.78 at 1.86: the tree's cycle is 9.6 ms against the chain's 11.6 ms, 18 % faster while
drafting three times the tokens per step. Either run-to-run noise the source does not state, or another code
path for topk 1 that the model's shared draft cost does not describe.

`benchmarks/model_public.py` sets such a table aside (shown, with these pairs, not fitted); `plan` lists the
pairs of the run it fits.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from specfrontier.perfmodel.capacity import running_short
from specfrontier.perfmodel.types import ModelCell, SettingParams

ROUNDING = 0.01
"""The least tolerance: published figures are rounded (to 3-4 significant digits)."""


@dataclass(frozen=True, slots=True)
class Contradiction:
    """`heavier` does at least what `lighter` does per cycle, yet its observed cycle is shorter by `by`."""

    concurrency: int
    heavier: str
    lighter: str
    heavier_ms: float
    lighter_ms: float

    @property
    def by(self) -> float:
        """How much shorter the heavier setting's cycle is, relative to the lighter one's."""
        return 1.0 - self.heavier_ms / self.lighter_ms

    def describe(self) -> str:
        return (
            f"C={self.concurrency}: {self.heavier} (a cycle of {self.heavier_ms:.2f} ms) drafts and verifies at least "
            f"as much as {self.lighter} ({self.lighter_ms:.2f} ms) yet is {100 * self.by:.1f} % faster"
        )


def observed_cycle_ms(cell: ModelCell) -> float | None:
    """The cycle time a cell implies with its own measured tau (None: tau or throughput not measured)."""
    tau = 1.0 if not cell.params.speculative else cell.acceptance_length
    if tau is None:
        return None
    if cell.per_request_tok_s:
        return 1000.0 * tau / cell.per_request_tok_s
    if cell.aggregate_tok_s:
        return 1000.0 * cell.concurrency * tau / cell.aggregate_tok_s
    return None


def _dominates(a: SettingParams, b: SettingParams) -> bool:
    """Whether `a` does at least `b`'s work per cycle and more of it (same family, or `b` no speculation)."""
    if a == b or not a.speculative:
        return False
    if not b.speculative:
        return True
    if a.family != b.family:
        return False
    axes = ((a.steps, b.steps), (a.topk, b.topk), (a.verified, b.verified))
    return all(x >= y for x, y in axes)


def contradictions(cells: Sequence[ModelCell], noise: float = 0.0) -> list[Contradiction]:
    """Every pair of cells at one level whose cycle times contradict the premises beyond `noise` (relative;
    at least ROUNDING), largest first."""
    tolerance = max(noise, ROUNDING)
    short = running_short(cells)  # a server that queued part of C ran a smaller batch: not comparable at C
    by_level: dict[int, list[tuple[ModelCell, float]]] = {}
    for c in cells:
        cap = c.capacity if c.capacity is not None else short.get(c.params)
        if cap is not None and cap < c.concurrency:
            continue
        if (t := observed_cycle_ms(c)) is not None:
            by_level.setdefault(c.concurrency, []).append((c, t))
    found = []
    for level, observed in sorted(by_level.items()):
        for heavy, t_heavy in observed:
            for light, t_light in observed:
                if _dominates(heavy.params, light.params) and t_heavy < t_light * (1.0 - tolerance):
                    found.append(Contradiction(level, heavy.setting, light.setting, t_heavy, t_light))
    return sorted(found, key=lambda c: -c.by)


__all__ = ["ROUNDING", "Contradiction", "contradictions", "observed_cycle_ms"]
