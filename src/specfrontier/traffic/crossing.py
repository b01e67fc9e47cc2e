"""Whether a day-weighted lead survives the crossovers it rests on (issue 38, item 5; `perfmodel.decide`).

Why: between two measured levels where the measured order of two settings flips, where it flips rests on how
each one's cost bends between them, which no cell measures. `plan` predicts no best at such a level
(`decide.crossover`); a traffic answer cannot leave the level out (the profile spends time there), so it asks
whether its lead holds whatever the order is there. Public example (vllm-project/speculators, Qwen3.8-27B on a
B200, HumanEval): DSpark k7 is best at C = 16 and MTP k2 at C = 64; with C = 32 left out the model put DSpark
7.6 % ahead at C = 32, beyond its stated error, and MTP won there by 4.4 %.

The rule: at each predicted level C of the profile where A and B run different settings (a schedule runs the
entry covering C) whose measured aggregate ratio flips between the nearest levels below and above C where
both were measured, A's figure at C is replaced by B's times the less favourable of the two measured ratios
(the order of the neighbour that favours B, as if the flip lay just below C). A's lead over B holds only if
it stays positive then; otherwise the answer names the levels and does not separate them. Every other figure
stands as it is (a prediction's stated error is judged by the model-error band, `report.traffic`).
Concurrency profiles only: a rate profile runs each setting at its own concurrency.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from specfrontier.analysis.summary import RunData
from specfrontier.traffic.figures import DayFigures, LevelFigure


@dataclass(frozen=True, slots=True)
class Flip:
    """At a predicted level, the measured order of two settings differs at its measured neighbours."""

    concurrency: int
    below: int
    above: int
    ahead: str
    """A's setting at this level (a schedule's entry)."""
    behind: str
    """B's setting there."""
    worst_ratio: float
    """ahead / behind, aggregate tok/s, at the neighbour that favours `behind`."""

    def describe(self) -> str:
        return (
            f"C={self.concurrency}: the measured order of {self.ahead} and {self.behind} flips between "
            f"C={self.below} and C={self.above}"
        )


def _aggregate(data: RunData, setting: str, c: int) -> float | None:
    cell = data.cell(setting, c)
    return None if cell is None else cell.aggregate_tok_s.median


def flip_at(data: RunData, a: LevelFigure, b: LevelFigure) -> Flip | None:
    """The flip of a's and b's settings around their shared predicted level (module docstring), or None."""
    if not (a.predicted or b.predicted) or a.setting == b.setting or a.concurrency != b.concurrency:
        return None
    c = a.concurrency
    both = [
        int(lv)
        for lv in data.concurrency_levels
        if _aggregate(data, a.setting, int(lv)) and _aggregate(data, b.setting, int(lv))
    ]
    below = max((lv for lv in both if lv < c), default=None)
    above = min((lv for lv in both if lv > c), default=None)
    if below is None or above is None:
        return None
    ratios = []
    for lv in (below, above):
        ahead, behind = _aggregate(data, a.setting, lv), _aggregate(data, b.setting, lv)
        assert ahead and behind
        ratios.append(ahead / behind)
    if (ratios[0] - 1.0) * (ratios[1] - 1.0) >= 0:
        return None
    return Flip(c, below, above, a.setting, b.setting, min(ratios))


def flips_against(data: RunData, a: DayFigures, b: DayFigures) -> tuple[Flip, ...]:
    """Every crossover a's lead over b rests on at the profile's predicted levels."""
    if a.rate_profile or b.rate_profile:
        return ()
    by_level = {lv.concurrency: lv for lv in b.busy}
    found = (flip_at(data, lv, by_level[lv.concurrency]) for lv in a.busy if lv.concurrency in by_level)
    return tuple(f for f in found if f is not None)


def worst_case(data: RunData, a: DayFigures, b: DayFigures) -> tuple[DayFigures, tuple[Flip, ...]]:
    """a's figures with every crossover level at its worst measured order against b, and those crossovers."""
    flips = {f.concurrency: f for f in flips_against(data, a, b)}
    if not flips:
        return a, ()
    b_at = {lv.concurrency: lv.aggregate_tok_s for lv in b.busy}
    levels = tuple(
        dataclasses.replace(lv, aggregate_tok_s=b_at[lv.concurrency] * flips[lv.concurrency].worst_ratio)
        if lv.concurrency in flips
        else lv
        for lv in a.levels
    )
    return dataclasses.replace(a, levels=levels), tuple(flips.values())


def unsettled_lead(data: RunData, a: DayFigures, b: DayFigures) -> tuple[Flip, ...]:
    """The crossovers that can turn a's lead over b (by the day objective): empty when a leads b whatever
    the order at each of them, or when a does not rest on any."""
    worst, flips = worst_case(data, a, b)
    return flips if flips and worst.objective <= b.objective else ()


__all__ = ["Flip", "flip_at", "flips_against", "unsettled_lead", "worst_case"]
