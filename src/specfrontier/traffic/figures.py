"""Day-weighted figures of each measured setting, and of the per-batch-size schedule, under a load profile.

Why weighted sums: a deployment runs one setting (or one schedule) all day, through every load it sees, so
its value is the sum over loads of (share of time at that load) x (its figure at that load). Definitions
(docs/traffic.md), over a concurrency profile with shares w(C):

- aggregate tok/s (the server, all users together) = sum_C w(C) x aggregate(C), idle time (C = 0) as 0;
- per-user tok/s (per request: the decode speed one user sees, p50 over a cell's requests) = sum over the
  busy levels of w(C) x per_request(C) / sum of their w(C): time-weighted over the time anyone is served;
- SLO share = the busy time at levels whose cell meets every SLO (the per-cell verdict of `metrics.slo`),
  over the busy time; goodput tok/s = sum_C w(C) x aggregate(C) x [SLO met at C].

The objective that picks the best setting: goodput tok/s under SLOs, aggregate tok/s without; for a rate
profile (whose aggregate is the demand, the same for every setting that keeps up) the per-user tok/s.

Levels the run measured use the measured cell (median over repeats, evidence only). A level between two
measured ones uses the performance model's prediction (`perfmodel`, as `plan` predicts), with its stated
error (`Prediction.halfwidth`: calibrated on the model's held-out errors for a fitted setting at an untested
level; a level whose error the model cannot state is refused like one it cannot predict); its SLO verdict is
met only when both measured neighbours meet it (latency grows with load). A level outside the measured range
is refused: the model is not trusted beyond the cells it was fitted to. Every figure says whether it is
measured or predicted, and each answer the share of busy time that rests on predictions.

A rate profile (req/s) becomes a concurrency profile per setting by Little's law: in a closed loop at C the
setting completes X(C) = aggregate(C) / mean output tokens requests per second with mean latency
W(C) = C / X(C), so an arrival rate r runs at the C that solves C = r x W(C), i.e. X(C) = r; X is
interpolated linearly between measured levels (from (0, 0) below the first), and a fractional C splits its
time between the two whole levels around it so the mean concurrency stays C.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from specfrontier.analysis.summary import RunData
from specfrontier.errors import ConfigError
from specfrontier.metrics.slo import Slo
from specfrontier.traffic.profile import OPTION, Profile


@dataclass(frozen=True, slots=True)
class LevelFigure:
    """One setting at one load level of the profile."""

    concurrency: int
    share: float
    setting: str
    aggregate_tok_s: float
    per_user_tok_s: float | None
    slo_met: bool | None
    """None: no SLO given, or idle."""
    predicted: bool
    error: float | None = None
    """A prediction's relative half-width (model error); None for a measurement."""


@dataclass(frozen=True, slots=True)
class DayFigures:
    """A setting's (or the schedule's) figures weighted over the day (see the module docstring)."""

    name: str
    levels: tuple[LevelFigure, ...]
    has_slo: bool
    rate_profile: bool = False

    @property
    def aggregate_tok_s(self) -> float:
        return sum(lv.share * lv.aggregate_tok_s for lv in self.levels)

    @property
    def aggregate_band(self) -> tuple[float, float]:
        """The aggregate with every predicted level at the low / high end of its model error."""
        lo = sum(lv.share * lv.aggregate_tok_s * (1 - (lv.error or 0.0)) for lv in self.levels)
        hi = sum(lv.share * lv.aggregate_tok_s * (1 + (lv.error or 0.0)) for lv in self.levels)
        return lo, hi

    @property
    def busy(self) -> tuple[LevelFigure, ...]:
        return tuple(lv for lv in self.levels if lv.concurrency > 0)

    @property
    def busy_share(self) -> float:
        return sum(lv.share for lv in self.busy)

    @property
    def per_user_tok_s(self) -> float | None:
        known = [lv for lv in self.busy if lv.per_user_tok_s is not None]
        weight = sum(lv.share for lv in known)
        return sum(lv.share * (lv.per_user_tok_s or 0.0) for lv in known) / weight if weight > 0 else None

    @property
    def slo_share(self) -> float | None:
        if not self.has_slo or self.busy_share <= 0:
            return None
        return sum(lv.share for lv in self.busy if lv.slo_met) / self.busy_share

    @property
    def goodput_tok_s(self) -> float | None:
        if not self.has_slo:
            return None
        return sum(lv.share * lv.aggregate_tok_s for lv in self.levels if lv.slo_met or lv.concurrency == 0)

    @property
    def predicted_share(self) -> float:
        """Share of the busy time whose figures are predictions, not measurements."""
        busy = self.busy_share
        return sum(lv.share for lv in self.busy if lv.predicted) / busy if busy > 0 else 0.0

    @property
    def objective(self) -> float:
        if self.rate_profile:
            return self.per_user_tok_s or 0.0
        goodput = self.goodput_tok_s
        return goodput if goodput is not None else self.aggregate_tok_s


@dataclass(frozen=True, slots=True)
class Predictor:
    """The fitted model's figures for a setting at C, with its relative error there (`perfmodel`)."""

    predict: Callable[[str, int], tuple[float, float, float | None]]
    """(setting, C) -> (aggregate tok/s, per-request tok/s, relative half-width)."""
    describe: str


@dataclass(slots=True)
class LevelSource:
    """Where each setting's figure at each level comes from, built once per run."""

    data: RunData
    slos: Sequence[Slo]
    predictor: Callable[[], tuple[Predictor | None, str]]
    """Fits the model on first use: the predictor, or None and why it cannot be fitted."""
    model_problem: str = ""
    _model: Predictor | None = field(default=None, repr=False)
    _fitted: bool = False

    @property
    def measured_levels(self) -> list[int]:
        return sorted({int(c) for c in self.data.concurrency_levels})

    def model(self) -> Predictor | None:
        if not self._fitted:
            self._fitted = True
            self._model, self.model_problem = self.predictor()
        return self._model

    def figure(self, setting: str, c: int, share: float) -> LevelFigure:
        if c == 0:
            return LevelFigure(0, share, setting, 0.0, None, None, False)
        cell = self.data.cell(setting, c)
        if cell is not None and cell.aggregate_tok_s.median is not None:
            met = cell.goodput.slo_met if self.slos and cell.goodput is not None else None
            per_user = cell.per_request_tok_s_p50.median
            return LevelFigure(c, share, setting, cell.aggregate_tok_s.median, per_user, met, False)
        levels = [lv for lv in self.measured_levels if self.data.cell(setting, lv) is not None]
        if not levels or not levels[0] < c < levels[-1]:
            span = f"{levels[0]}-{levels[-1]}" if levels else "none"
            raise ConfigError(
                f"{OPTION}: C = {c} ({100 * share:.1f}% of the time) is beyond the levels {setting} was measured at "
                f"({span}) and no model predicts outside them; fix: measure up to C = {c} "
                f"(tune/bench --concurrency), or cap the profile at C = {levels[-1] if levels else 1}"
            )
        model = self.model()
        if model is None:
            raise ConfigError(
                f"{OPTION}: C = {c} lies between measured levels and the performance model could not be fitted "
                f"({self.model_problem}); fix: measure C = {c}, or use a profile of measured levels only"
            )
        try:
            agg, per_user, error = model.predict(setting, c)
        except ConfigError as exc:
            raise ConfigError(
                f"{OPTION}: C = {c} lies between measured levels and the performance model does not predict "
                f"{setting} there ({str(exc).removeprefix('model: ').split('; fix:')[0]}); fix: measure C = {c}, "
                "or use a profile of measured levels only"
            ) from None
        met = None
        if self.slos:
            below = max(lv for lv in levels if lv < c)
            above = min(lv for lv in levels if lv > c)
            met = self._met(setting, below) and self._met(setting, above)
        return LevelFigure(c, share, setting, agg, per_user, met, True, error)

    def _met(self, setting: str, c: int) -> bool:
        cell = self.data.cell(setting, c)
        return cell is not None and cell.goodput is not None and cell.goodput.slo_met


def request_rate_curve(
    data: RunData, setting: str, output_tokens: Mapping[tuple[str, int], float]
) -> list[tuple[int, float]]:
    """(C, X(C) req/s) at every measured level of the setting: aggregate tok/s / mean output tokens."""
    out = []
    for c in sorted({int(lv) for lv in data.concurrency_levels}):
        cell = data.cell(setting, c)
        tokens = output_tokens.get((setting, c))
        if cell is not None and cell.aggregate_tok_s.median is not None and tokens:
            out.append((c, cell.aggregate_tok_s.median / tokens))
    return out


def concurrency_for_rate(rate: float, curve: Sequence[tuple[int, float]], setting: str, share: float) -> float:
    """Solve C = rate x W(C) with W(C) = C / X(C): the C where X(C) = rate (module docstring)."""
    if rate == 0:
        return 0.0
    points = [(0, 0.0), *curve]
    for (c0, x0), (c1, x1) in itertools.pairwise(points):
        if x0 <= rate <= x1 and x1 > x0:
            return c0 + (rate - x0) / (x1 - x0) * (c1 - c0)
    top_c, top_x = max(curve, key=lambda p: p[1]) if curve else (0, 0.0)
    raise ConfigError(
        f"{OPTION}: rate {rate:g} req/s ({100 * share:.1f}% of the time) is beyond what {setting} served in the run "
        f"(at most {top_x:.3g} req/s, at C = {top_c}); fix: measure higher concurrency, or size replicas with "
        "--peak and profile one replica's share of the traffic"
    )


def rate_to_concurrency(profile: Profile, curve: Sequence[tuple[int, float]], setting: str) -> dict[int, float]:
    """A rate profile as one setting's concurrency shares (fractional C split between its whole neighbours)."""
    shares: dict[int, float] = {}
    for rate, share in profile.shares:
        c = concurrency_for_rate(rate, curve, setting, share)
        lo = math.floor(c)
        frac = c - lo
        shares[lo] = shares.get(lo, 0.0) + share * (1 - frac)
        if frac > 0:
            shares[lo + 1] = shares.get(lo + 1, 0.0) + share * frac
    return {c: s for c, s in sorted(shares.items()) if s > 0}


def day_figures(source: LevelSource, setting: str, shares: Mapping[int, float], *, rate: bool = False) -> DayFigures:
    levels = tuple(source.figure(setting, c, s) for c, s in sorted(shares.items()))
    return DayFigures(setting, levels, bool(source.slos), rate)


__all__ = [
    "DayFigures",
    "LevelFigure",
    "LevelSource",
    "Predictor",
    "concurrency_for_rate",
    "day_figures",
    "rate_to_concurrency",
    "request_rate_curve",
]
