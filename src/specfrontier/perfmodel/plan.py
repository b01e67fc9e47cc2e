"""`specfrontier plan RUN`: fit the model to a run's cells and say what it predicts.

- predicted vs measured for every cell with its error (cells held out by `--fit-only` are the honest test);
- the predicted frontier: per concurrency, the best candidate setting by aggregate and by per-request
  tok/s, where candidates are the measured settings plus untested chain depths of each measured drafter
  (1 .. deepest measured + EXTRA_DEPTH) and, for a drafter whose trees were measured, untested trees of
  its measured (topk, draft tokens) shapes at those depths;
- the capacity-aware choice of the maximum speculation depth (theory 6.4): per concurrency
  `s*(C) = argmax_s min(C, MRR(s)) * tau(s) / T(min(C, MRR(s)), s)`, and the depth to size the server
  for at the peak concurrency, because engines size buffers (and lose running slots) for the maximum.

Everything predicted here is a model output; the plan says which cells the fit saw.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from specfrontier.analysis.summary import RunData, summarise_cells
from specfrontier.errors import ConfigError
from specfrontier.perfmodel.cells import cells_from_run, output_tokens_by_cell, setting_params
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
class PredictedBest:
    """The predicted best candidates at one concurrency: by aggregate and by per-request tok/s (the plan's
    frontier is one per level; `analysis.frontier.FrontierPoint` is a measured cell on the trade-off)."""

    concurrency: int
    best_aggregate: tuple[Candidate, Prediction]
    best_per_request: tuple[Candidate, Prediction]
    runner_up_margin_pct: float | None
    """How far (percent of aggregate) the best is ahead of the second best candidate."""


@dataclass(frozen=True, slots=True)
class DepthChoice:
    family: str
    by_concurrency: tuple[tuple[int, int, Prediction], ...]
    """(C, s*(C), its prediction) for every level."""
    peak_concurrency: int
    max_depth: int


@dataclass(frozen=True, slots=True)
class Plan:
    model: FittedModel
    fitted_settings: tuple[str, ...]
    rows: tuple[PlanRow, ...]
    frontier: tuple[PredictedBest, ...]
    depth: tuple[DepthChoice, ...]
    unpredicted: tuple[tuple[str, int, str], ...] = ()
    """(setting, C, why) of every measured cell the model could not predict, so none is dropped silently."""
    held_out_concurrency: tuple[int, ...] = ()
    """Levels left out of the fit for every setting (`--hold-out-concurrency`)."""

    def errors(self, *, in_fit: bool) -> list[float]:
        return [abs(r.error_pct) for r in self.rows if r.in_fit == in_fit]


def candidates(model: FittedModel, cells: Sequence[ModelCell]) -> list[Candidate]:
    """Measured settings, then untested chain depths of every fitted drafter family, then, for a family
    whose trees were measured (its rank share is fitted), untested trees: every depth with each measured
    topk and each draft-token count measured at that topk, within SGLang's bound
    (num_draft_tokens - 1 <= topk + (depth - 1) * topk^2)."""
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
        try:
            p = model.predict(c.params, c.concurrency)
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
    options = [cand for cand in candidates(model, cells) if _predictable(model, cand.params)]
    frontier = []
    for level in levels(cells):
        preds = [(cand, model.predict(cand.params, level)) for cand in options]
        by_agg = sorted(preds, key=lambda cp: -cp[1].aggregate_tok_s)
        by_req = max(preds, key=lambda cp: cp[1].per_request_tok_s)
        margin = None
        if len(by_agg) > 1:
            margin = 100.0 * (by_agg[0][1].aggregate_tok_s / by_agg[1][1].aggregate_tok_s - 1.0)
        frontier.append(PredictedBest(level, by_agg[0], by_req, margin))
    depth = []
    for family in model.cycle.families:
        chain = [cand for cand in options if cand.params.family == family and cand.params.topk == 1]
        chain += [cand for cand in options if not cand.params.speculative]
        per_level = []
        for level in levels(cells):
            cand, pred = max(((c, model.predict(c.params, level)) for c in chain), key=lambda cp: cp[1].aggregate_tok_s)
            per_level.append((level, cand.params.steps, pred))
        peak = per_level[-1]
        depth.append(DepthChoice(family, tuple(per_level), peak[0], peak[1]))
    return Plan(
        model, fitted_names, tuple(rows), tuple(frontier), tuple(depth), tuple(unpredicted), tuple(sorted(held_levels))
    )


def within_model_error(model: FittedModel, point: PredictedBest) -> bool | None:
    """Whether the best candidate's lead over the second is inside the model's error at this level
    (`FittedModel.halfwidth_at`): then the choice between them is not settled by the model; measure both."""
    halfwidth = model.halfwidth_at(point.concurrency)
    if point.runner_up_margin_pct is None or halfwidth is None:
        return None
    return point.runner_up_margin_pct < 100 * halfwidth


def _pct(fraction: float | None) -> float | None:
    return None if fraction is None else round(100 * fraction, 2)


def _predictable(model: FittedModel, params: SettingParams) -> bool:
    try:
        model.predict(params, 1)
    except ConfigError:
        return False
    return True


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
            "interval": "prediction x (1 +/- 2 x leave-one-cell-out RMS relative error of the chosen form)",
            "model_error_pct": "2 x the leave-one-cell-out RMS relative error at that concurrency (the larger of the "
            "measured levels around it); a lead over the second best below it is within model error",
            "error_pct": "100 x (predicted / measured - 1)",
        },
        "fitted_settings": list(plan.fitted_settings),
        "held_out_concurrency": list(plan.held_out_concurrency),
        "model": {
            "form": m.form,
            "shape": m.cycle.shape,
            "terms_ms": m.cycle.terms(),
            "unidentified": [list(group) for group in m.cycle.unidentified],
            "loo_rms_pct": {k: None if v is None else round(100 * v, 2) for k, v in m.loo_rms.items()},
            "train_rms_pct": round(100 * m.train_rms, 2),
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
        "frontier": [
            {
                "concurrency": f.concurrency,
                "best_aggregate": {
                    "setting": f.best_aggregate[0].name,
                    "measured_setting": f.best_aggregate[0].measured,
                    **_prediction_json(f.best_aggregate[1]),
                },
                "best_per_request": {
                    "setting": f.best_per_request[0].name,
                    "measured_setting": f.best_per_request[0].measured,
                    **_prediction_json(f.best_per_request[1]),
                },
                "margin_over_second_pct": None if f.runner_up_margin_pct is None else round(f.runner_up_margin_pct, 2),
                "model_error_pct": _pct(plan.model.halfwidth_at(f.concurrency)),
                "within_model_error": within_model_error(plan.model, f),
            }
            for f in plan.frontier
        ],
        "max_depth": [
            {
                "family": d.family,
                "peak_concurrency": d.peak_concurrency,
                "max_depth": d.max_depth,
                "best_depth_by_concurrency": [
                    {"concurrency": c, "steps": s, **_prediction_json(p)} for c, s, p in d.by_concurrency
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
    "PlanRow",
    "PredictedBest",
    "RunCells",
    "candidates",
    "levels",
    "make_plan",
    "plan_json",
    "run_cells",
    "within_model_error",
]
