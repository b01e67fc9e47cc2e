"""The answer for a load profile: the best static setting, the schedule's gain over it, the loss of every
other choice, and the replicas a peak demand needs under the SLO (docs/traffic.md).

Why the schedule is judged here too: `schedules.choose.depth_schedule` picks the best depth per measured batch size
(the report's tie rule), which helps only if the day spends time at the levels where the static best loses.
Its day figures take, at each profile level, the setting of the schedule entry covering that batch size.
A schedule of one range is the static setting it names, run through the engine's per-batch-size path: it is
never recommended as a schedule. Its figures are predictions from static cells unless the run verified it
(`verify_schedule`), and it runs with the deepest setting's capacity; both are said.

Replicas for a peak: concurrent users U need ceil(U / C*) replicas, C* the highest measured level whose cell
meets the SLO (without SLO: the highest measured level; the run says nothing beyond it); a rate r needs
ceil(r / X*), X* the highest request rate a measured level served within the SLO. Measured cells only.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Literal

from specfrontier.analysis.summary import RunData
from specfrontier.errors import ConfigError
from specfrontier.metrics.slo import Slo
from specfrontier.traffic.crossing import Flip, unsettled_lead
from specfrontier.traffic.figures import (
    DayFigures,
    LevelFigure,
    LevelSource,
    Predictor,
    day_figures,
    rate_to_concurrency,
    request_rate_curve,
)
from specfrontier.traffic.profile import Profile

PeakUnit = Literal["users", "req/s"]
_PEAK = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(users?|rps|req/s)\s*$", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class Peak:
    value: float
    unit: PeakUnit

    @property
    def text(self) -> str:
        return f"{self.value:g} {'concurrent users' if self.unit == 'users' else 'req/s'}"


def parse_peak(text: str | None) -> Peak | None:
    """`64users` / `64 users` or `12rps` / `12req/s`; None when not given. One-line error otherwise."""
    if text is None:
        return None
    match = _PEAK.match(text)
    if match is None or float(match.group(1)) <= 0:
        raise ConfigError(
            f"--peak = {text!r}: not a positive demand with a unit; fix: e.g. --peak 64users or --peak 12rps"
        )
    unit: PeakUnit = "users" if match.group(2).lower().startswith("user") else "req/s"
    return Peak(float(match.group(1)), unit)


@dataclass(frozen=True, slots=True)
class Replicas:
    setting: str
    count: int | None
    per_replica: float | None
    """C* (users) or X* (req/s) of one replica within the SLO; None when no measured level meets it."""


@dataclass(frozen=True, slots=True)
class ScheduleAnswer:
    figures: DayFigures | None
    ranges: str
    """'batch 1-3: depth 4 (s4), batch 4-64: depth 3 (s3)'."""
    note: str
    """Why there is none, or what it rests on."""
    over_capacity: float = 0.0
    """Share of the time at C above the capacity the schedule runs with (the deepest setting's): its figures
    there are the static cells of a setting whose capacity it does not have, so they say nothing about it."""
    unsettled: tuple[Flip, ...] = ()
    """The crossovers that can turn its gain over the best static setting (`traffic.crossing`)."""


@dataclass(frozen=True, slots=True)
class TrafficAnswer:
    run_id: str
    profile: Profile
    slos: tuple[Slo, ...]
    settings: tuple[DayFigures, ...]
    """Best first (by `DayFigures.objective`)."""
    schedule: ScheduleAnswer
    replicas: tuple[Replicas, ...]
    peak: Peak | None
    model: str | None
    """The model's description when any figure is predicted."""
    simulated: bool
    left_out: tuple[str, ...] = ()
    """Settings without figures for part of the profile (no evidence there, or a rate they cannot serve)."""
    unsettled: tuple[Flip, ...] = ()
    """The crossovers that can turn the best setting's lead over the second (`traffic.crossing`)."""

    @property
    def best(self) -> DayFigures:
        return self.settings[0]

    @property
    def objective_name(self) -> str:
        if self.profile.kind == "rate":
            return "per-user tok/s"
        return "goodput tok/s" if self.slos else "aggregate tok/s"


def fit_predictor(data: RunData, cells: Sequence[object], rho: float | None) -> tuple[Predictor | None, str]:
    """The performance model fitted to the run's cells (as `plan` fits it), or None and why not."""
    from specfrontier.perfmodel.fit import fit_model
    from specfrontier.perfmodel.types import ModelCell

    model_cells = [c for c in cells if isinstance(c, ModelCell)]
    try:
        model = fit_model(model_cells, rho=rho)
    except ConfigError as exc:
        return None, str(exc)
    params = {c.setting: c.params for c in model_cells}

    def predict(setting: str, c: int) -> tuple[float, float, float | None]:
        p = model.predict(params[setting], c)  # refuses a level whose kind of prediction has no stated error
        return p.aggregate_tok_s, p.per_request_tok_s, p.halfwidth

    error = f"stated error calibrated on its held-out errors: {model.calibration.describe()}"
    return Predictor(predict, f"performance model ({model.form}, fitted to {model.cells} cells), {error}"), ""


def _schedule(data: RunData, source: LevelSource, shares: dict[int, float]) -> ScheduleAnswer:
    from specfrontier.analysis.schedule_check import schedule_summary_lines
    from specfrontier.schedules.choose import depth_schedule

    try:
        schedule = depth_schedule(data)
    except ConfigError as exc:
        return ScheduleAnswer(None, "", f"no schedule: {str(exc).split('; fix:')[0]}")
    ranges = ", ".join(f"batch {e.batch_lo}-{e.batch_hi}: depth {e.depth} ({e.setting})" for e in schedule.entries)
    if len(schedule.entries) == 1:
        only = schedule.entries[0]
        return ScheduleAnswer(
            None, ranges, f"no schedule: {only.setting} is the best at every measured batch size (a static setting)"
        )
    levels: list[LevelFigure] = []
    for c, share in sorted(shares.items()):
        entry = next((e for e in schedule.entries if e.batch_lo <= c <= e.batch_hi), schedule.entries[-1])
        levels.append(source.figure(entry.setting, c, share))
    figures = DayFigures("schedule", tuple(levels), bool(source.slos))
    verified = bool(schedule_summary_lines(data))
    capacity = data.setting(schedule.deepest_setting).capacity
    note = (
        "measured as one setting by the run (verify_schedule)"
        if verified
        else "predicted from the static cells: the engine switches depth per batch; not measured as one setting"
    )
    over = sum(share for c, share in shares.items() if capacity is not None and c > capacity)
    if over > 0:
        note += f"; it runs with {schedule.deepest_setting}'s capacity ({capacity} requests), below the profile's top"
    return ScheduleAnswer(figures, ranges, note, over)


def _replicas(
    data: RunData, names: Sequence[str], peak: Peak, curves: dict[str, list[tuple[int, float]]], slos: bool
) -> list[Replicas]:
    out = []
    for name in names:
        ok = [
            int(c)
            for c in data.concurrency_levels
            if (cell := data.cell(name, c)) is not None
            and (not slos or (cell.goodput is not None and cell.goodput.slo_met))
        ]
        if peak.unit == "users":
            per = float(max(ok)) if ok else None
        else:
            rates = [x for c, x in curves.get(name, []) if c in ok]
            per = max(rates) if rates else None
        out.append(Replicas(name, math.ceil(peak.value / per - 1e-9) if per else None, per))
    return out


def recommend_for(
    data: RunData,
    profile: Profile,
    slos: Sequence[Slo],
    output_tokens: dict[tuple[str, int], float],
    predictor: Callable[[], tuple[Predictor | None, str]],
    peak: Peak | None = None,
) -> TrafficAnswer:
    """The answer (module docstring) from the run's evidence. `predictor` fits the model, called only when
    a level lies between measured ones; `output_tokens` (mean output tokens per (setting, C)) serves a
    rate profile and a req/s peak."""
    if data.open_loop:
        raise ConfigError(
            f"run = {data.run.run_id!r}: an open-loop run (cells keyed by request rate); fix: recommend from a "
            "closed-loop run (its cells are keyed by concurrency, which the profile weights)"
        )
    evidence = data.complete_evidence()
    names = evidence.measured_settings()
    if not names:
        raise ConfigError(f"run = {data.run.run_id!r}: no cell is evidence; fix: recommend from a complete run")
    source = LevelSource(evidence, slos, predictor)
    curves = {n: request_rate_curve(evidence, n, output_tokens) for n in names}
    if profile.kind == "concurrency":
        _within_the_run(evidence, profile)
    figures = []
    left_out = []
    for name in names:
        try:
            if profile.kind == "rate":
                shares = rate_to_concurrency(profile, curves[name], name)
                figures.append(day_figures(source, name, shares, rate=True))
            else:
                figures.append(day_figures(source, name, profile.level_shares()))
        except ConfigError as exc:
            if len(names) == 1:
                raise
            left_out.append(str(exc).removeprefix("--traffic: ").split("; fix:")[0])
    if not figures:
        raise ConfigError(f"--traffic: no setting has figures for the whole profile ({left_out[0]}); fix: measure it")
    ranked = tuple(sorted(figures, key=lambda f: -f.objective))
    if profile.kind == "rate":
        schedule = ScheduleAnswer(None, "", "no schedule: a rate profile runs each setting at its own concurrency")
    else:
        schedule = _schedule(evidence, source, profile.level_shares())
    if schedule.figures is not None:
        schedule = replace(schedule, unsettled=unsettled_lead(evidence, schedule.figures, ranked[0]))
    unsettled = unsettled_lead(evidence, ranked[0], ranked[1]) if len(ranked) > 1 else ()
    predicted = any(f.predicted_share > 0 for f in (*ranked, *([schedule.figures] if schedule.figures else [])))
    model = source.model() if predicted else None
    return TrafficAnswer(
        data.run.run_id,
        profile,
        tuple(slos),
        ranked,
        schedule,
        tuple(_replicas(evidence, names, peak, curves, bool(slos))) if peak is not None else (),
        peak,
        model.describe if model is not None else None,
        bool(data.run.environment.get("simulated")),
        tuple(left_out),
        unsettled,
    )


def _within_the_run(data: RunData, profile: Profile) -> None:
    """Every busy level inside the run's measured range (a level of no setting is refused for all)."""
    measured = sorted({int(c) for c in data.concurrency_levels})
    for c, share in profile.level_shares().items():
        if c > 0 and not measured[0] <= c <= measured[-1]:
            raise ConfigError(
                f"--traffic: C = {c} ({100 * share:.1f}% of the time) is beyond the run's measured levels "
                f"({measured[0]}-{measured[-1]}) and no model predicts outside them; fix: measure up to C = {c} "
                f"(tune/bench --concurrency), or cap the profile at C = {measured[-1]}"
            )


__all__ = ["Peak", "Replicas", "ScheduleAnswer", "TrafficAnswer", "fit_predictor", "parse_peak", "recommend_for"]
