"""The model's stated error, calibrated on its own held-out errors, per kind of prediction.

A prediction is only as good as the cells around it: a measured setting at a level between two it was
measured at is an interpolation along batch size; an unmeasured chain depth or tree shape leans on the
acceptance law and the cost of its neighbours, more so beyond the shapes fitted; a level beyond every
measured one is an extrapolation. So the fit holds out, in turn, each measured setting and each measured
level (`fit.py`), predicts what it held out with the model fitted without it, and files each relative
error under the CLASS of that prediction, as the model fitted without it sees it
(`FittedModel.error_class`):

- `level (interpolated)`: a setting the model was fitted on, at a level between two it was measured at;
- `level (extrapolated)`: the same, beyond its measured levels;
- `unmeasured chain` / `unmeasured tree`: a setting the model was not fitted on, of a shape its family was
  fitted on, at a level some setting was measured at; `... beyond the fitted shapes` when it lies outside
  the range of the family's fitted depths (trees: depths, branching or draft tokens);
- `... at an unmeasured level`: an unmeasured setting at an unmeasured level.

The stated half-width of a class is a prediction bound from its held-out errors: `1.96 x RMS x
sqrt(1 + 1/n)` (the nominal two-sided 95 % bound of a new error of a class whose errors are normal about 0;
the RMS, not the spread, so a bias counts as error), with n the number of held-out GROUPS the errors came
from (the errors of one level left out move together: they are one piece of evidence, not many), and never
below the largest held-out error of the class when there are fewer than SMALL_SAMPLE groups. A class with
fewer than MIN_GROUPS groups takes its extrapolated counterpart's bound (a larger error) if that has one;
otherwise the model does not know how wrong it is there, states no error, and `FittedModel.predict` refuses
unless the caller only wants an ordering.

Why these numbers (benchmarks/model_public.py; every held-out figure of the 9 public tables fitted, 422
figures, each judged by the bound its own fold's held-out errors gave): 2 x the leave-one-cell-out RMS (the
rule before issue 38) covered 86.7 %; the nominal 90 % bound (1.645) with the floor covered 90.3 %, too close
to the 90 % asked; the nominal 95 % bound with the floor covers 92.4 % (median stated error 9.0 %). The
errors of real tables are heavier-tailed than normal, so a nominal 95 % bound covers about 92 %. Student's t
with n - 1 degrees of freedom covered 97.2 % at a median of 15.4 %: with two or three groups per class it
states errors too wide to tell settings apart.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

LEVEL_INTERPOLATED = "level (interpolated)"
LEVEL_EXTRAPOLATED = "level (extrapolated)"
UNMEASURED_CHAIN = "unmeasured chain"
UNMEASURED_TREE = "unmeasured tree"
BEYOND = " beyond the fitted shapes"
AT_UNMEASURED_LEVEL = " at an unmeasured level"
AGAINST_BEST = ", against the best fitted setting"
"""Suffix of a class of RATIOS: an unmeasured setting's prediction over the model's prediction of the best
fitted cell at its level, against the measured ratio. A decision that it beats the best measured one rests on
that ratio, and neighbouring settings share much of the model's error, so it is smaller than either's."""
MIN_GROUPS = 2
"""Fewest held-out groups (settings or levels left out) a class needs before the model states its error."""
SMALL_SAMPLE = 10
"""Below this many held-out groups the stated error is at least the largest held-out error of the class."""
Z95 = 1.96
"""The normal distribution's two-sided 95 % quantile: the nominal level of the stated bound."""


@dataclass(frozen=True, slots=True)
class HeldOutErrors:
    """The relative errors of one class, and how many held-out groups they came from: the errors of one
    group (a level left out: every setting at it) move together, so the groups, not the errors, count as
    independent evidence."""

    errors: tuple[float, ...]
    groups: int

    def bound(self) -> float | None:
        """The stated relative half-width for this class (module docstring); None with fewer than MIN_GROUPS."""
        n = self.groups
        if n < MIN_GROUPS or not self.errors:
            return None
        rms = math.sqrt(sum(e * e for e in self.errors) / len(self.errors))
        half = Z95 * rms * math.sqrt(1.0 + 1.0 / n)
        if n < SMALL_SAMPLE:
            half = max(half, max(abs(e) for e in self.errors))
        return half


def setting_class(tree: bool, beyond: bool, level_measured: bool) -> str:
    """The class of a prediction for a setting the model was not fitted on: a chain or a tree, inside or beyond
    the range of its family's fitted shapes (depth; for trees depth, branching and draft tokens), at a
    measured level or not."""
    name = (UNMEASURED_TREE if tree else UNMEASURED_CHAIN) + (BEYOND if beyond else "")
    return name if level_measured else name + AT_UNMEASURED_LEVEL


def _fallback(error_class: str) -> str | None:
    """The class whose bound stands in for one with too few held-out groups: an interpolation takes the
    matching extrapolation's (a larger error); a ratio its absolute counterpart's; nothing else."""
    if error_class == LEVEL_INTERPOLATED:
        return LEVEL_EXTRAPOLATED
    if error_class in (UNMEASURED_CHAIN, UNMEASURED_TREE):
        return error_class + BEYOND
    if error_class.endswith(AGAINST_BEST):
        return error_class.removesuffix(AGAINST_BEST)
    return None


@dataclass(frozen=True, slots=True)
class Calibration:
    """Held-out relative errors per class, and the half-width stated for each."""

    errors: Mapping[str, HeldOutErrors] = field(default_factory=dict)
    reach: int = 0
    """The farthest a held-out chain lay beyond the depths fitted without it (depth steps): a prediction
    farther out has no stated error (`FittedModel.halfwidth`)."""

    @classmethod
    def of(cls, errors: Mapping[str, Mapping[int, Sequence[float]]], reach: int = 0) -> Calibration:
        """From the errors of each class keyed by the held-out group they came from."""
        out = {}
        for name, by_group in sorted(errors.items()):
            flat = tuple(e for errs in by_group.values() for e in errs)
            if flat:
                out[name] = HeldOutErrors(flat, len(by_group))
        return cls(out, reach)

    def _own(self, error_class: str) -> float | None:
        held = self.errors.get(error_class)
        own = None if held is None else held.bound()
        if own is None and (other := _fallback(error_class)) is not None:
            return self._own(other)
        return own

    def halfwidth(self, error_class: str) -> float | None:
        """The stated relative half-width of a prediction of this class (None: not known). A class with too
        few held-out groups takes its extrapolated counterpart's; an unmeasured setting at an unmeasured
        level without its own adds its two parts (the setting's, and an interpolated level's)."""
        own = self._own(error_class)
        if own is not None or not error_class.endswith(AT_UNMEASURED_LEVEL):
            return own
        setting = self._own(error_class.removesuffix(AT_UNMEASURED_LEVEL))
        level = self._own(LEVEL_INTERPOLATED)
        return None if setting is None or level is None else setting + level

    def describe(self) -> str:
        """One line: per class, the stated +/- error and how many held-out errors and groups it rests on."""
        parts = []
        for name, held in self.errors.items():
            half = self.halfwidth(name)
            shown = "not stated" if half is None else f"+/-{100 * half:.1f} %"
            parts.append(f"{name} {shown} ({len(held.errors)} errors, {held.groups} held out)")
        if not parts:
            return "no held-out prediction was possible"
        reach = f"; beyond the fitted depths up to {self.reach} step(s) (as far as a held-out setting lay)"
        return "; ".join(parts) + (reach if any(BEYOND in name for name in self.errors) else "")


__all__ = [
    "AGAINST_BEST",
    "AT_UNMEASURED_LEVEL",
    "BEYOND",
    "LEVEL_EXTRAPOLATED",
    "LEVEL_INTERPOLATED",
    "MIN_GROUPS",
    "UNMEASURED_CHAIN",
    "UNMEASURED_TREE",
    "Z95",
    "Calibration",
    "HeldOutErrors",
    "setting_class",
]
