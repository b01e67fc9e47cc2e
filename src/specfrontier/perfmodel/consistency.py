"""Cells that contradict the model's premises: a table no form can fit, shown with the pair that says why.

The cycle-time forms (`cycle.py`) have non-negative costs per term, so within one drafter family, at one
concurrency, a setting that drafts and verifies at least as much as another (depth, branching and verified
tokens each at least as large) cannot complete a cycle faster; and no speculative cycle is faster than the
plain decode step at the same concurrency. Where both acceptance lengths are measured, the cycle time a cell
implies is observable (T = 1000 x C x tau / aggregate, or 1000 x tau / decode rate), so such a pair can be
checked. A pair that breaks this by more than the noise the table's source states is a contradiction: no
fit can pass near both cells, and a fit that tries is pulled off every other cell too.

A cell contradicts ITSELF when it states both its acceptance length and its per-position acceptances and they
disagree: tau = 1 + sum_i P(position i accepted) per verification step is an identity (the counters the
engines expose give both from one count, so a run of this tool always agrees with itself). Where a table's
two figures disagree beyond its noise, at least one of them is not what its name says (e.g. tokens per cycle
divided by the streams asked for, while fewer ran), so the batch or the tau the cycle time is derived from is
not known, and the cell cannot be fitted honestly. Public example (MTPLX PR #338, greedy, per-width table):
at n = 1, 1 + 0.992 + 0.955 + 0.947 = 3.894 against tau 3.879 (0.4 %); at n = 2, 1 + 0.913 + 0.809 + 0.716
= 3.438 against 3.066 (12 %), and 9-15 % at every n >= 2, with three timing repeats within 0.93 %.

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
from typing import Protocol

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


@dataclass(frozen=True, slots=True)
class AcceptanceMismatch:
    """One cell whose acceptance length disagrees with 1 + the sum of its per-position acceptances."""

    concurrency: int
    setting: str
    acceptance_length: float
    from_positions: float

    @property
    def by(self) -> float:
        """How far the stated tau lies from the per-position one, relative to the per-position one."""
        return abs(self.acceptance_length / self.from_positions - 1.0)

    def describe(self) -> str:
        return (
            f"C={self.concurrency}: {self.setting} states an acceptance length of {self.acceptance_length:.3f} "
            f"while its per-position acceptances give 1 + their sum = {self.from_positions:.3f} "
            f"({100 * self.by:.1f} % apart): "
            "one of the two is not the tokens per verification step of a running request"
        )


class Finding(Protocol):
    """What `contradictions` returns: how large, and a sentence that names the cells."""

    @property
    def by(self) -> float: ...

    def describe(self) -> str: ...


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


def acceptance_mismatches(cells: Sequence[ModelCell], noise: float = 0.0) -> list[AcceptanceMismatch]:
    """Every speculative cell that states tau and per-position acceptances which disagree beyond `noise`
    (relative; at least ROUNDING): the identity tau = 1 + sum of the per-position rates fails there."""
    tolerance = max(noise, ROUNDING)
    found = []
    for c in cells:
        if not c.params.speculative or c.acceptance_length is None or not c.acceptance_per_position:
            continue
        mismatch = AcceptanceMismatch(
            c.concurrency, c.setting, c.acceptance_length, 1.0 + sum(c.acceptance_per_position)
        )
        if mismatch.by > tolerance:
            found.append(mismatch)
    return found


def contradictions(cells: Sequence[ModelCell], noise: float = 0.0) -> list[Finding]:
    """Every pair of cells at one level whose cycle times contradict the premises, and every cell whose two
    acceptance figures contradict each other, beyond `noise` (relative; at least ROUNDING), largest first."""
    tolerance = max(noise, ROUNDING)
    short = running_short(cells)  # a server that queued part of C ran a smaller batch: not comparable at C
    by_level: dict[int, list[tuple[ModelCell, float]]] = {}
    for c in cells:
        cap = c.capacity if c.capacity is not None else short.get(c.params)
        if cap is not None and cap < c.concurrency:
            continue
        if (t := observed_cycle_ms(c)) is not None:
            by_level.setdefault(c.concurrency, []).append((c, t))
    found: list[Finding] = list(acceptance_mismatches(cells, noise))
    for level, observed in sorted(by_level.items()):
        for heavy, t_heavy in observed:
            for light, t_light in observed:
                if _dominates(heavy.params, light.params) and t_heavy < t_light * (1.0 - tolerance):
                    found.append(Contradiction(level, heavy.setting, light.setting, t_heavy, t_light))
    return sorted(found, key=lambda c: -c.by)


__all__ = [
    "ROUNDING",
    "AcceptanceMismatch",
    "Contradiction",
    "Finding",
    "acceptance_mismatches",
    "contradictions",
    "observed_cycle_ms",
]
