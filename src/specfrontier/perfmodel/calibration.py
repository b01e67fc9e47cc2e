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

The stated half-width of a class is a prediction bound from its held-out errors: `t(0.95, n - 1) x RMS x
sqrt(1 + 1/n)`, the two-sided 90 % bound of a new error of a class whose errors are normal about 0 (the RMS,
not the spread, so a bias counts as error), with n the number of held-out GROUPS the errors came from (the
errors of one level left out move together: they are one piece of evidence, not many), and never below the
largest held-out error of the class when there are fewer than SMALL_SAMPLE groups (with few groups the t
bound leans on the normal shape). A class with fewer than MIN_GROUPS groups takes its extrapolated
counterpart's bound (a larger error) if that has one; otherwise the model does not know how wrong it is
there, states no error, and `FittedModel.predict` refuses unless the caller only wants an ordering. Why not
2 x the RMS: pooled over the public tables (benchmarks/model_public.py, docs/model.md) that covered 87 % of
held-out figures; the errors of real tables come in groups and have heavy tails.
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
MIN_GROUPS = 2
"""Fewest held-out groups (settings or levels left out) a class needs before the model states its error."""
SMALL_SAMPLE = 10
"""Below this many held-out groups the stated error is at least the largest held-out error of the class."""
_T95 = (6.314, 2.920, 2.353, 2.132, 2.015, 1.943, 1.895, 1.860, 1.833, 1.812, 1.796, 1.782, 1.771, 1.761, 1.753)
"""Student's t, one-sided 0.95 quantile, 1..15 degrees of freedom (then 1.645 + 2.1 / df, within 0.3 %)."""


def t95(df: int) -> float:
    """Student's t 0.95 quantile with `df` >= 1 degrees of freedom."""
    return _T95[df - 1] if df <= len(_T95) else 1.645 + 2.1 / df


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
        half = t95(n - 1) * rms * math.sqrt(1.0 + 1.0 / n)
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
    matching extrapolation's (a larger error), nothing else does."""
    if error_class == LEVEL_INTERPOLATED:
        return LEVEL_EXTRAPOLATED
    if error_class in (UNMEASURED_CHAIN, UNMEASURED_TREE):
        return error_class + BEYOND
    return None


@dataclass(frozen=True, slots=True)
class Calibration:
    """Held-out relative errors per class, and the half-width stated for each."""

    errors: Mapping[str, HeldOutErrors] = field(default_factory=dict)

    @classmethod
    def of(cls, errors: Mapping[str, Mapping[int, Sequence[float]]]) -> Calibration:
        """From the errors of each class keyed by the held-out group they came from."""
        out = {}
        for name, by_group in sorted(errors.items()):
            flat = tuple(e for errs in by_group.values() for e in errs)
            if flat:
                out[name] = HeldOutErrors(flat, len(by_group))
        return cls(out)

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
        return "; ".join(parts) if parts else "no held-out prediction was possible"


__all__ = [
    "AT_UNMEASURED_LEVEL",
    "BEYOND",
    "LEVEL_EXTRAPOLATED",
    "LEVEL_INTERPOLATED",
    "MIN_GROUPS",
    "UNMEASURED_CHAIN",
    "UNMEASURED_TREE",
    "Calibration",
    "HeldOutErrors",
    "setting_class",
    "t95",
]
