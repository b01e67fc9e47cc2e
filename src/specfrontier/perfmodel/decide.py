"""What the model may claim at one concurrency level: the measured best, an untested option that beats it
beyond the error the model states, or that it cannot tell the options apart.

A prediction carries the error the model states for its kind (`calibration.py`). So, at a level:

- where some option was measured, the answer is the best measured one, unless an untested option (a setting
  not measured there) is predicted above it by more than its own stated error: only then is the prediction
  offered. The comparison is the RATIO of the two predictions (the untested option's over the model's own
  prediction of the measured best) against the stated error of such ratios (`halfwidth_against_best`,
  calibrated on held-out settings against the best fitted one: neighbours share much of the model's error);
  where the model has none, the untested prediction's own interval against the measured figure. Untested
  options that may still lie above the measured best are named: the model cannot rule them out, measure them;
- where nothing was measured, the best predicted option is offered only if it leads the second by more than
  its stated error; otherwise the model does not separate them, and nothing is predicted. Nor is anything
  predicted between two measured levels whose measured bests differ (`crossover`): the order flips somewhere
  between them, and where it flips rests on how each option's cost bends there, which no cell measures. Public
  example (vllm-project/speculators, Qwen3.8-27B on a B200, HumanEval): DSpark k7 is best at C = 16, MTP k2
  at C = 64; with C = 32 left out, the model put DSpark 7.6 % ahead at C = 32, beyond both stated errors
  (3.2 %), and MTP won by 4.4 %: the one ridge shared by the drafters placed DSpark's bend past C = 32,
  while every other interpolated level of that fit was within 3.2 %.

An option without a stated error (the model knows too little about its kind) is never offered; it is named
among those to measure when the model's ordering puts it above the answer.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from specfrontier.perfmodel.types import Prediction

NOT_SEPARATED = "the model does not separate these settings here; measure"
Metric = str
"""'aggregate_tok_s' or 'per_request_tok_s'."""


@dataclass(frozen=True, slots=True)
class Option:
    """One setting at one level: its measured figure there (None: not measured at this level) and the
    model's prediction (None: refused); a prediction without a stated error has `halfwidth` None."""

    name: str
    measured: float | None
    prediction: Prediction | None
    """The model's figures for it at this level (also for a measured option: the reference of a ratio)."""


@dataclass(frozen=True, slots=True)
class Decision:
    """The answer at one level for one figure (module docstring)."""

    concurrency: int
    metric: Metric
    choice: str | None
    """The setting to run here; None: the model does not separate the options (see `measure`)."""
    value: float | None
    """Its figure: measured, or the prediction when `predicted`."""
    predicted: bool
    halfwidth: float | None
    """The stated relative error of a predicted choice."""
    lead_pct: float | None
    """A predicted choice's lead over the measured best (or, where nothing was measured, over the second)."""
    measure: tuple[str, ...] = ()
    """Untested options the model cannot rule out against the answer: measure them."""
    why: str = ""
    """Why nothing is predicted at an unmeasured level where the measured best flips around it, whatever the
    model's errors say (`crossover`); "" otherwise."""

    @property
    def note(self) -> str:
        if self.choice is None:
            because = f" ({self.why})" if self.why else ""
            return f"{NOT_SEPARATED} {', '.join(self.measure)}{because}" if self.measure else "nothing to predict here"
        if self.predicted:
            return f"predicted above the measured best beyond its stated error (+/-{100 * (self.halfwidth or 0):.1f} %)"
        if self.measure:
            return f"measured best; {NOT_SEPARATED} {', '.join(self.measure)}"
        return "measured best; no untested option is predicted within its error of it"


def _value(p: Prediction, metric: Metric) -> float:
    return p.aggregate_tok_s if metric == "aggregate_tok_s" else p.per_request_tok_s


def _judge(p: Prediction, value: float, half: float, measured: float, here: float | None) -> tuple[float, float]:
    """(the option's ratio to the measured best, the stated error of that ratio): the ratio of the two
    predictions with the error of such ratios when the model states one, else the prediction over the
    measurement with the prediction's own error."""
    if here and p.halfwidth_against_best is not None:
        return value / here, p.halfwidth_against_best
    return value / measured, half


@dataclass(frozen=True, slots=True)
class Crossing:
    """The measured best differs between the nearest measured levels below and above an unmeasured one."""

    below: int
    best_below: str
    above: int
    best_above: str

    def describe(self) -> str:
        return (
            f"the measured best changes between C={self.below} ({self.best_below}) and C={self.above} "
            f"({self.best_above}): where it flips rests on how each option's cost bends between them, "
            "which no cell measures"
        )


def crossover(concurrency: int, measured_bests: Mapping[int, str]) -> Crossing | None:
    """Why no best can be predicted at an unmeasured `concurrency` (module docstring): the measured bests at
    the nearest measured levels below and above it differ. None where they agree, or it is not between two."""
    below = max((level for level in measured_bests if level < concurrency), default=None)
    above = min((level for level in measured_bests if level > concurrency), default=None)
    if below is None or above is None or measured_bests[below] == measured_bests[above]:
        return None
    return Crossing(below, measured_bests[below], above, measured_bests[above])


def measured_bests(figures: Mapping[tuple[str, int], float | None]) -> dict[int, str]:
    """Per level, the option with the highest measured figure (options keyed by (name, level))."""
    out: dict[int, tuple[str, float]] = {}
    for (name, level), value in figures.items():
        if value is not None and (level not in out or value > out[level][1]):
            out[level] = (name, value)
    return {level: name for level, (name, _) in out.items()}


def decide(
    concurrency: int, options: Sequence[Option], metric: Metric, *, crossing: Crossing | None = None
) -> Decision:
    """The answer at `concurrency` for `metric` (module docstring); `crossing` (from `crossover`), where
    nothing is measured at this level, says why the best cannot be placed here."""
    measured = [o for o in options if o.measured is not None]
    predicted = [(o, o.prediction) for o in options if o.measured is None and o.prediction is not None]
    stated = [(o, p, _value(p, metric), p.halfwidth) for o, p in predicted if p.halfwidth is not None]
    unstated = [(o, _value(p, metric)) for o, p in predicted if p.halfwidth is None]
    if measured:
        best = max(measured, key=lambda o: o.measured or 0.0)
        m = best.measured or 0.0
        here = None if best.prediction is None else _value(best.prediction, metric)
        judged = [(o, v, *_judge(p, v, h, m, here)) for o, p, v, h in stated]
        beat = [(o, v, h, ratio) for o, v, ratio, h in judged if ratio * (1 - h) > 1]
        if beat:
            top, v, h, ratio = max(beat, key=lambda item: item[3])
            others = tuple(o.name for o, *_ in sorted(beat, key=lambda item: -item[3]) if o is not top)
            return Decision(concurrency, metric, top.name, v, True, h, 100.0 * (ratio - 1.0), others)
        open_ = [(o, ratio) for o, _, ratio, h in judged if ratio * (1 + h) > 1]
        open_ += [(o, v / here if here else v / m) for o, v in unstated if (v / here if here else v / m) > 1]
        names = tuple(o.name for o, _ in sorted(open_, key=lambda item: -item[1]))
        return Decision(concurrency, metric, best.name, m, False, None, None, names)
    if not stated:
        names = tuple(o.name for o, _ in sorted(unstated, key=lambda item: -item[1]))
        return Decision(concurrency, metric, None, None, False, None, None, names)
    ranked = sorted(stated, key=lambda item: -item[2])
    top, _, v, h = ranked[0]
    close = [o.name for o, _, ov, oh in ranked if ov * (1.0 + oh) >= v * (1.0 - h)]
    close += [o.name for o, ov in unstated if ov >= v * (1.0 - h)]
    if crossing is not None and len(ranked) > 1:
        sides = [o.name for o, *_ in ranked if o.name in (crossing.best_below, crossing.best_above)]
        names = tuple(dict.fromkeys([*close, *sides]))
        return Decision(concurrency, metric, None, None, False, None, None, names, crossing.describe())
    if len(ranked) == 1 or v > ranked[1][2] * (1.0 + h):
        lead = None if len(ranked) == 1 else 100.0 * (v / ranked[1][2] - 1.0)
        return Decision(concurrency, metric, top.name, v, True, h, lead)
    return Decision(concurrency, metric, None, None, False, None, None, tuple(close))


__all__ = ["NOT_SEPARATED", "Crossing", "Decision", "Option", "crossover", "decide", "measured_bests"]
