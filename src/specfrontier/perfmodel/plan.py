"""`specfrontier plan RUN`: fit the model to a run's cells and say what it predicts.

- predicted vs measured for every cell with its error (cells held out by `--fit-only` are the honest test);
- the frontier: per concurrency, what to run by aggregate and by per-request tok/s (`decide.py`): the
  best fitted cell, unless an untested candidate is predicted above it by more than its stated error;
  where the model's error exceeds the spread between candidates it says so and predicts nothing.
  Candidates are the fitted settings plus untested chain depths of each drafter whose chains were fitted
  (1 .. deepest fitted + EXTRA_DEPTH) and, for a drafter whose trees were fitted, untested trees of its
  fitted (topk, draft tokens) shapes at those depths; nothing of a shape the fit did not see;
- the capacity-aware choice of the maximum speculation depth (theory 6.4): per concurrency
  `s*(C) = argmax_s min(C, MRR(s)) * tau(s) / T(min(C, MRR(s)), s)` under the same rule, and the depth to
  size the server for at the peak concurrency, because engines size buffers (and lose running slots) for
  the maximum.

Everything predicted here is a model output; the plan says which cells the fit saw.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from specfrontier.analysis.summary import RunData, summarise_cells
from specfrontier.errors import ConfigError
from specfrontier.perfmodel.cells import cells_from_run, output_tokens_by_cell, setting_params
from specfrontier.perfmodel.consistency import contradictions
from specfrontier.perfmodel.decide import Decision, Option, crossover, decide, measured_bests
from specfrontier.perfmodel.fit import FittedModel, fit_model
from specfrontier.perfmodel.types import ModelCell, Prediction, SettingParams
from specfrontier.store import Store
from specfrontier.theory.cycle import routing_ratio
from specfrontier.theory.tree_bound import max_verified_tokens

EXTRA_DEPTH = 2


@dataclass(frozen=True, slots=True)
class RunCells:
    """A run's cells for the model, what kind of run it is, and the MoE routing ratio if known."""

    run_id: str
    engine: str
    kind: str
    """'measured', 'simulated' (model output of the simulator) or 'imported' (figures from elsewhere)."""
    cells: tuple[ModelCell, ...]
    rho: float | None


def run_cells(store: Store, run_id: str) -> RunCells:
    """Cells of a stored run: imported figures for an imported run, else the summaries of measured cells."""
    run = store.run(run_id)
    rho = _rho(run.config, run.environment)
    imported = store.imported_cells(run_id)
    if imported:
        settings = {s.name: s for s in store.settings(run_id)}
        cells = tuple(
            ModelCell(
                setting=c.setting_id,
                params=setting_params(settings[c.setting_id].params, where=f"run {run_id}: {c.setting_id}"),
                concurrency=c.concurrency,
                per_request_tok_s=c.per_request_tok_s,
                aggregate_tok_s=c.aggregate_tok_s,
                capacity=settings[c.setting_id].capacity,
                acceptance_length=c.acceptance_length,
                acceptance_per_position=c.acceptance_per_position,
            )
            for c in imported
        )
        return RunCells(run_id, run.engine, "imported", cells, rho)
    rows = store.cells(run_id)  # read once: summaries and output lengths come from the same rows
    data = RunData(run, tuple(store.settings(run_id)), tuple(summarise_cells(rows)))
    kind = "simulated" if run.environment.get("simulated") else "measured"
    return RunCells(run_id, run.engine, kind, tuple(cells_from_run(data, output_tokens_by_cell(rows))), rho)


def _rho(config: dict[str, Any], environment: dict[str, Any]) -> float | None:
    """k/E of an MoE target: from an imported file's `model`, or the simulator profile's model shape."""
    model = config.get("model")
    if isinstance(model, dict) and model.get("experts") and model.get("experts_per_token"):
        return routing_ratio(int(model["experts"]), int(model["experts_per_token"]))
    profile = environment.get("profile")
    if environment.get("simulated") and isinstance(profile, str):
        from specfrontier.sim.profile import load_profile

        try:
            shape = load_profile(profile).model
        except ConfigError:
            return None
        return routing_ratio(shape.experts, shape.experts_per_token)
    return None


@dataclass(frozen=True, slots=True)
class PlanRow:
    setting: str
    concurrency: int
    metric: str
    measured: float
    predicted: float
    interval: tuple[float, float] | None
    in_fit: bool
    flags: tuple[str, ...]

    @property
    def error_pct(self) -> float:
        return 100.0 * (self.predicted / self.measured - 1.0)


@dataclass(frozen=True, slots=True)
class Candidate:
    name: str
    params: SettingParams
    measured: bool


@dataclass(frozen=True, slots=True)
class PlanLevel:
    """The plan's answer at one concurrency, by aggregate and by per-request tok/s (`decide.Decision`; the
    plan's frontier is one per level; `analysis.frontier.FrontierPoint` is a measured cell on the trade-off)."""

    concurrency: int
    aggregate: Decision
    per_request: Decision


@dataclass(frozen=True, slots=True)
class DepthChoice:
    family: str
    by_concurrency: tuple[tuple[Decision, int | None, Prediction | None], ...]
    """(the decision, s*(C) or None when the model does not separate the depths, the model's figures of the
    chosen depth) for every level."""
    peak_concurrency: int
    max_depth: int | None


@dataclass(frozen=True, slots=True)
class Plan:
    model: FittedModel
    fitted_settings: tuple[str, ...]
    rows: tuple[PlanRow, ...]
    frontier: tuple[PlanLevel, ...]
    depth: tuple[DepthChoice, ...]
    unpredicted: tuple[tuple[str, int, str], ...] = ()
    """(setting, C, why) of every measured cell the model could not predict, so none is dropped silently."""
    held_out_concurrency: tuple[int, ...] = ()
    """Levels left out of the fit for every setting (`--hold-out-concurrency`)."""
    contradictions: tuple[str, ...] = ()
    """Pairs of fitted cells that contradict the model's premises (`consistency.py`): no fit passes near both."""

    def errors(self, *, in_fit: bool) -> list[float]:
        return [abs(r.error_pct) for r in self.rows if r.in_fit == in_fit]


def candidates(model: FittedModel, cells: Sequence[ModelCell]) -> list[Candidate]:
    """Measured settings, then untested chain depths of every fitted drafter family, then, for a family
    whose trees were measured (its rank share is fitted), untested trees: every depth with each measured
    topk and each draft-token count measured at that topk, within SGLang's bound
    (num_draft_tokens - 1 <= topk + (depth - 1) * topk^2). Shapes the fit did not see are dropped later
    (`FittedModel.refusal`)."""
    out: list[Candidate] = []
    seen: set[SettingParams] = set()

    def add(p: SettingParams) -> None:
        if p not in seen:
            seen.add(p)
            out.append(Candidate(f"{p.label} (untested)", p, False))

    for c in cells:
        if c.params not in seen:
            seen.add(c.params)
            out.append(Candidate(c.setting, c.params, True))
    for family in model.cycle.families:
        own = [c.params for c in cells if c.params.family == family and c.params.speculative]
        depths = range(1, max((p.steps for p in own), default=0) + EXTRA_DEPTH + 1)
        for s in depths:
            add(SettingParams(steps=s, family=family))
        fam = model.acceptance.get(family)
        if fam is None or fam.rank_share is None:
            continue
        shapes = sorted({(p.topk, p.verified) for p in own if p.topk > 1})
        for s in depths:
            for topk, draft in shapes:
                if draft <= max_verified_tokens(s, topk):
                    add(SettingParams(steps=s, topk=topk, draft_tokens=draft, family=family))
    return out


def levels(cells: Sequence[ModelCell]) -> list[int]:
    """Measured concurrency levels plus the powers of two between them."""
    measured = sorted({c.concurrency for c in cells})
    out = set(measured)
    p = 1
    while p < measured[-1]:
        if p > measured[0]:
            out.add(p)
        p *= 2
    return sorted(out)


def make_plan(
    cells: Sequence[ModelCell],
    *,
    fit_only: Sequence[str] | None = None,
    hold_out_concurrency: Sequence[int] = (),
    rho: float | None = None,
) -> Plan:
    """Fit on `cells` (or only the named settings', without the held-out concurrency levels) and predict
    every cell, the frontier and the depth. Raises ConfigError naming the option for an unknown setting
    or level, or a split that leaves nothing to fit."""
    if not cells:
        raise ConfigError(
            "plan: the run has no closed-loop cells (open-loop cells are not modelled); "
            "fix: plan a run measured at concurrency levels (load.mode: closed)"
        )
    names = list(dict.fromkeys(c.setting for c in cells))
    fitted = list(cells)
    if fit_only:
        missing = [n for n in fit_only if n not in names]
        if missing:
            raise ConfigError(
                f"--fit-only = {missing[0]!r}: not a setting of this run; fix: use some of {', '.join(names)}"
            )
        fitted = [c for c in fitted if c.setting in set(fit_only)]
    held_levels = frozenset(hold_out_concurrency)
    if held_levels:
        measured = sorted({c.concurrency for c in cells})
        unknown = sorted(held_levels - set(measured))
        if unknown:
            raise ConfigError(
                f"--hold-out-concurrency = {unknown[0]}: not a level of this run; "
                f"fix: use some of {', '.join(map(str, measured))}"
            )
        fitted = [c for c in fitted if c.concurrency not in held_levels]
        if not fitted:
            raise ConfigError(
                "--hold-out-concurrency: holds out every level the fit could use; fix: hold out fewer levels"
            )
    model = fit_model(fitted, rho=rho)
    fitted_names = tuple(dict.fromkeys(c.setting for c in fitted))
    rows = []
    unpredicted = []
    for c in cells:
        try:  # a cell whose kind has no stated error is still shown (interval "-"), not dropped
            p = model.predict(c.params, c.concurrency, stated=False)
        except ConfigError as exc:  # e.g. a drafter the fit never saw: said, with the reason, not dropped
            unpredicted.append((c.setting, c.concurrency, str(exc).removeprefix("model: ")))
            continue
        in_fit = c.setting in fitted_names and c.concurrency not in held_levels
        if c.per_request_tok_s is not None:
            rows.append(
                PlanRow(
                    c.setting,
                    c.concurrency,
                    "per_request_tok_s",
                    c.per_request_tok_s,
                    p.per_request_tok_s,
                    p.per_request_interval,
                    in_fit,
                    c.flags,
                )
            )
        if c.aggregate_tok_s is not None:
            rows.append(
                PlanRow(
                    c.setting,
                    c.concurrency,
                    "aggregate_tok_s",
                    c.aggregate_tok_s,
                    p.aggregate_tok_s,
                    p.aggregate_interval,
                    in_fit,
                    c.flags,
                )
            )
    options = [cand for cand in candidates(model, cells) if model.refusal(cand.params) is None]
    figures = {(c.setting, c.concurrency): c for c in fitted}
    frontier = []
    for level in levels(cells):
        agg = _decide(model, options, figures, level, "aggregate_tok_s")
        req = _decide(model, options, figures, level, "per_request_tok_s")
        frontier.append(PlanLevel(level, agg, req))
    depth = []
    for family in model.cycle.families:
        chain = [c for c in options if not c.params.speculative or (c.params.family == family and c.params.topk == 1)]
        if not any(c.params.speculative for c in chain):
            continue
        per_level: list[tuple[Decision, int | None, Prediction | None]] = []
        for level in levels(cells):
            d = _decide(model, chain, figures, level, "aggregate_tok_s")
            pick = next((c for c in chain if c.name == d.choice), None)
            if pick is None:
                per_level.append((d, None, None))
            else:
                per_level.append((d, pick.params.steps, model.predict(pick.params, level, stated=False)))
        peak = per_level[-1]
        depth.append(DepthChoice(family, tuple(per_level), peak[0].concurrency, peak[1]))
    return Plan(
        model,
        fitted_names,
        tuple(rows),
        tuple(frontier),
        tuple(depth),
        tuple(unpredicted),
        tuple(sorted(held_levels)),
        tuple(c.describe() for c in contradictions(fitted)),
    )


def _decide(
    model: FittedModel,
    cands: Sequence[Candidate],
    figures: dict[tuple[str, int], ModelCell],
    level: int,
    metric: str,
) -> Decision:
    """The answer at `level` among `cands` (`decide`), told where the measured best flips around it."""
    names = {cand.name for cand in cands if cand.measured}
    bests = measured_bests({key: getattr(cell, metric) for key, cell in figures.items() if key[0] in names})
    return decide(level, _options(model, cands, figures, level, metric), metric, crossing=crossover(level, bests))


def _options(
    model: FittedModel,
    cands: Sequence[Candidate],
    figures: dict[tuple[str, int], ModelCell],
    level: int,
    metric: str,
) -> list[Option]:
    """Each candidate at `level`: its fitted cell's figure there, else the model's prediction (without a
    stated error when the model has none for its kind: such an option is named, never offered)."""
    out = []
    for cand in cands:
        cell = figures.get((cand.name, level)) if cand.measured else None
        measured = None if cell is None else getattr(cell, metric)
        try:
            prediction: Prediction | None = model.predict(cand.params, level, stated=False)
        except ConfigError:
            prediction = None
        out.append(Option(cand.name, measured, prediction))
    return out


def _percent_2dp(fraction: float | None) -> float | None:
    """A fraction as a percentage rounded to 2 decimals for the JSON plan (0.12345 -> 12.35); None stays None."""
    return None if fraction is None else round(100 * fraction, 2)


def _interval(iv: tuple[float, float] | None) -> list[float] | None:
    return None if iv is None else [round(iv[0], 2), round(iv[1], 2)]


def _prediction_json(p: Prediction) -> dict[str, Any]:
    return {
        "concurrency": p.concurrency,
        "batch": p.batch,
        "capacity": p.capacity,
        "tau": round(p.tau, 4),
        "cycle_ms": round(p.cycle_ms, 4),
        "per_request_tok_s": round(p.per_request_tok_s, 2),
        "per_request_interval": _interval(p.per_request_interval),
        "aggregate_tok_s": round(p.aggregate_tok_s, 2),
        "aggregate_interval": _interval(p.aggregate_interval),
    }


def decision_json(d: Decision) -> dict[str, Any]:
    """One level's answer: the setting (null: not separated), whether its figure is measured or predicted,
    the stated error and lead of a prediction, what to measure, and the sentence that says it."""
    return {
        "concurrency": d.concurrency,
        "setting": d.choice,
        "source": None if d.choice is None else ("predicted" if d.predicted else "measured"),
        "tok_s": None if d.value is None else round(d.value, 2),
        "stated_error_pct": _percent_2dp(d.halfwidth),
        "lead_pct": None if d.lead_pct is None else round(d.lead_pct, 2),
        "measure": list(d.measure),
        "note": d.note,
    }


def plan_json(plan: Plan, run: RunCells) -> dict[str, Any]:
    """The plan as plain JSON (definitions included, so a reader needs no other document)."""
    m = plan.model
    return {
        "run_id": run.run_id,
        "engine": run.engine,
        "run_kind": run.kind,
        "note": "predictions are model outputs fitted to the listed settings, not measurements",
        "definitions": {
            "per_request_tok_s": "decode tok/s of one request (tokens after the first / time after the first token)",
            "aggregate_tok_s": "output tok/s of the run's cell at concurrency C (closed loop: over its steady span)",
            "interval": "prediction x (1 +/- the stated error of its kind: calibrated on the model's held-out "
            "errors of that kind, each setting and each level left out in turn; null: not stated)",
            "frontier": "per level, the best fitted cell, unless an untested candidate's interval lies wholly above "
            "it (then that prediction); where nothing was fitted, the best prediction only when it leads the second "
            "by more than its stated error and the measured bests of the fitted levels on either side agree; "
            "otherwise setting null and `measure` lists what the model cannot tell apart",
            "error_pct": "100 x (predicted / measured - 1)",
        },
        "fitted_settings": list(plan.fitted_settings),
        "held_out_concurrency": list(plan.held_out_concurrency),
        "model": {
            "form": m.form,
            "shape": m.cycle.shape,
            "terms_ms": m.cycle.terms(),
            "unidentified": [list(group) for group in m.cycle.unidentified],
            "heldout_rms_pct": {k: _percent_2dp(v) for k, v in m.heldout_rms.items()},
            "stated_error_pct": {k: _percent_2dp(m.calibration.halfwidth(k)) for k in m.calibration.errors},
            "heldout_errors": {
                k: {"errors": len(v.errors), "held_out": v.groups} for k, v in m.calibration.errors.items()
            },
            "train_rms_pct": _percent_2dp(m.train_rms),
            "capacity_law": m.capacity_law.describe(),
            "acceptance": {
                f: {"conditional_rates": [round(a, 4) for a in fam.conditional], "source": fam.source}
                for f, fam in m.acceptance.items()
            },
            "description": m.describe(),
        },
        "cells": [
            {
                "setting": r.setting,
                "concurrency": r.concurrency,
                "metric": r.metric,
                "measured": r.measured,
                "predicted": round(r.predicted, 2),
                "interval": _interval(r.interval),
                "error_pct": round(r.error_pct, 2),
                "in_fit": r.in_fit,
                "flags": list(r.flags),
            }
            for r in plan.rows
        ],
        "unpredicted": [{"setting": name, "concurrency": c, "why": why} for name, c, why in plan.unpredicted],
        "contradictions": list(plan.contradictions),
        "frontier": [
            {
                "concurrency": f.concurrency,
                "best_aggregate": decision_json(f.aggregate),
                "best_per_request": decision_json(f.per_request),
            }
            for f in plan.frontier
        ],
        "max_depth": [
            {
                "family": d.family,
                "peak_concurrency": d.peak_concurrency,
                "max_depth": d.max_depth,
                "best_depth_by_concurrency": [
                    {**decision_json(dec), "steps": s, "model": None if p is None else _prediction_json(p)}
                    for dec, s, p in d.by_concurrency
                ],
            }
            for d in plan.depth
        ],
    }


__all__ = [
    "EXTRA_DEPTH",
    "Candidate",
    "DepthChoice",
    "Plan",
    "PlanLevel",
    "PlanRow",
    "RunCells",
    "candidates",
    "decision_json",
    "levels",
    "make_plan",
    "plan_json",
    "run_cells",
]
