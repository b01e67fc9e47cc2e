"""Fit the whole model to measured cells and predict untested (setting, concurrency) pairs.

    B = min(C, capacity(setting))          running requests (capacity: read back, else the fitted law)
    v = 1000 * tau(setting) / T(B, setting)   per-request decode tok/s
    X = B * v                               aggregate tok/s

Each measured figure becomes an observed cycle time (T = 1000*tau/v, or 1000*B*tau/X), and every cycle
form (`cycle.py`) is fitted to them. The form is chosen by leave-one-CELL-out error on the tok/s figures
(a cell held out is refitted around, shape parameter and free acceptance included), because training
error always prefers the form with more terms. Intervals are the prediction x (1 +/- 2 * LOO RMS relative
error) of the chosen form: an empirical band, roughly 95 % if held-out errors were normal.

When no cell of a drafter family reports acceptance (e.g. an imported table of tok/s only), its
constant rate alpha is fitted together with the cycle time (grid, then a finer grid around the best),
one rate per drafter family (family by family, then once more each with the others fixed: an EAGLE head
and an n-gram drafter accept differently even when neither is measured): the report then says so,
because tau and T trade off against each other.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from specfrontier.errors import ConfigError
from specfrontier.perfmodel.acceptance import FamilyAcceptance, fit_acceptance
from specfrontier.perfmodel.capacity import CapacityLaw, fit_capacity
from specfrontier.perfmodel.cycle import FORMS, CycleModel, CycleObservation, fit_form, shapes
from specfrontier.perfmodel.plateau import infer_capacity
from specfrontier.perfmodel.types import ModelCell, Prediction, SettingParams
from specfrontier.theory.acceptance import DEFAULT_RANK_SHARE
from specfrontier.theory.capacity import with_user_cap
from specfrontier.theory.throughput import (
    cycle_ms_from_aggregate,
    cycle_ms_from_rate,
    per_request_tok_s,
    running_requests,
)

ALPHA_COARSE = tuple(float(a) for a in np.linspace(0.40, 0.995, 12))
LAW_MARGIN = 0.5
"""An inferred capacity law is kept only when it at least halves the leave-one-cell-out error. From
aggregate tok/s alone a compute ridge reads as a law with S0 near 0 and fits almost as well; measured on
simulated sweeps (benchmarks/model_accuracy.py) a true capacity limit cut the error to 0.10-0.15 x, a
compute plateau (chat sampling, where depth 2 saturates before its capacity) only to 0.82-0.91 x, and
keeping that law put held-out depths 10 % low."""
SHARE_GRID = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7)
"""Rank shares tried for a drafter whose trees were measured by throughput alone (no acceptance)."""
FROM_THROUGHPUT = "fitted from throughput (no acceptance measured)"
INTERVAL_WIDTH = 2.0
"""Half-width of the prediction interval in units of the LOO RMS relative error."""


@dataclass(frozen=True, slots=True)
class FittedModel:
    """A fitted performance model. `predict` is the stable entry point (used by guided search)."""

    cycle: CycleModel
    acceptance: dict[str, FamilyAcceptance]
    capacity_law: CapacityLaw
    measured_tau: dict[SettingParams, float]
    measured_capacity: dict[SettingParams, int]
    train_rms: float
    """RMS relative error of the chosen form on the fitted cells' tok/s figures."""
    loo_rms: dict[str, float | None] = field(default_factory=dict)
    """Per form: RMS relative leave-one-cell-out error (None: too few cells to hold one out)."""
    cells: int = 0
    rho: float | None = None
    output_tokens: float | None = None
    """Mean output tokens per request of the fitted cells: the L used for predicted aggregates."""
    loo_rms_by_level: dict[int, float] = field(default_factory=dict)
    """The chosen form's leave-one-cell-out RMS relative error per measured concurrency level: the model is
    not equally good at every batch size, and a decision at C should be judged by the error at C."""

    @property
    def form(self) -> str:
        return self.cycle.form

    @property
    def interval_halfwidth(self) -> float | None:
        """Relative half-width of prediction intervals (None when LOO was not possible)."""
        loo = self.loo_rms.get(self.form)
        return None if loo is None else INTERVAL_WIDTH * loo

    def halfwidth_at(self, concurrency: float) -> float | None:
        """Relative half-width of the model's error at `concurrency`: INTERVAL_WIDTH x the LOO RMS at that
        measured level; between measured levels the larger of the two around it, outside them the nearest;
        the overall half-width when no level has its own."""
        if not self.loo_rms_by_level:
            return self.interval_halfwidth
        levels = sorted(self.loo_rms_by_level)
        below = [lv for lv in levels if lv <= concurrency][-1:]
        above = [lv for lv in levels if lv >= concurrency][:1]
        return INTERVAL_WIDTH * max(self.loo_rms_by_level[lv] for lv in below + above)

    def tau(self, params: SettingParams) -> float:
        """Acceptance length: the setting's measured tau if it was measured, else the family model's."""
        if not params.speculative:
            return 1.0
        if params in self.measured_tau:
            return self.measured_tau[params]
        family = self.acceptance.get(params.family)
        if family is None:
            known = ", ".join(sorted(self.acceptance)) or "none"
            raise ConfigError(
                f"model: family = {params.family!r}: no fitted cell uses this drafter (fitted: {known}); "
                "fix: measure at least one setting of it, or predict a fitted family"
            )
        return family.tau(params, params.family)

    def capacity(self, params: SettingParams) -> int | None:
        """Running-request capacity: the setting's read-back value if measured, else the fitted law."""
        if params in self.measured_capacity:
            return with_user_cap(self.measured_capacity[params], params.max_running_requests)
        return self.capacity_law.capacity(params)

    def predict(self, params: SettingParams, concurrency: int) -> Prediction:
        """Per-request and aggregate tok/s of `params` at closed-loop concurrency C, with intervals."""
        if concurrency < 1:
            raise ConfigError(f"model: concurrency = {concurrency}: must be at least 1; fix: pass C >= 1")
        if params.speculative and params.family not in self.cycle.families:
            raise ConfigError(
                f"model: family = {params.family!r}: its draft cost was not fitted "
                f"(fitted: {', '.join(self.cycle.families) or 'none'}); fix: measure one setting of that drafter"
            )
        cap = self.capacity(params)
        batch = running_requests(concurrency, cap)
        tau = self.tau(params)
        cycle = self.cycle.cycle_ms(batch, params)
        if cycle <= 0:
            raise ConfigError(f"model: cycle time at B={batch} is {cycle:.3g} ms; fix: fit on more cells")
        per_request = per_request_tok_s(tau, cycle)
        aggregate = batch * per_request
        if self.output_tokens:
            # L tokens take L / v seconds of decoding plus the turnaround overhead O(B) per request.
            overhead_s = self.cycle.overhead_ms(batch) / 1000.0
            aggregate = batch * self.output_tokens / (overhead_s + self.output_tokens / per_request)
        half = self.interval_halfwidth
        return Prediction(
            concurrency=concurrency,
            batch=batch,
            capacity=cap,
            tau=tau,
            cycle_ms=cycle,
            per_request_tok_s=per_request,
            aggregate_tok_s=aggregate,
            per_request_interval=None if half is None else (per_request * (1 - half), per_request * (1 + half)),
            aggregate_interval=None if half is None else (aggregate * (1 - half), aggregate * (1 + half)),
        )

    def describe(self) -> list[str]:
        """Lines stating what was fitted and from what (for reports)."""
        terms = ", ".join(f"{k}={v:.4g}" for k, v in self.cycle.terms().items() if v > 0)
        shape = ""
        if self.cycle.form == "moe" and self.cycle.shape is not None:
            shape = f" (rho = k/E = {self.cycle.shape:.4g}{', given' if self.rho is not None else ', fitted'})"
        elif self.cycle.form == "roofline" and self.cycle.shape is not None:
            shape = f" (ridge at {self.cycle.shape:.3g} verified tokens)"
        elif self.cycle.form == "moe-roofline" and self.cycle.shape is not None:
            shape = f" (rho = k/E = {self.cycle.rho:.4g}, given; ridge at {self.cycle.shape:.3g} verified tokens)"
        loo = ", ".join(f"{k} {'-' if v is None else f'{100 * v:.1f} %'}" for k, v in self.loo_rms.items())
        lines = [
            f"cycle form: {self.cycle.form}{shape}; {terms}",
            f"chosen by leave-one-cell-out RMS error: {loo}; training RMS {100 * self.train_rms:.1f} % "
            f"over {self.cells} cells",
            f"capacity: {self.capacity_law.describe()}",
        ]
        if self.loo_rms_by_level:
            by_level = ", ".join(f"C={lv} {100 * rms:.1f} %" for lv, rms in self.loo_rms_by_level.items())
            lines.append(f"leave-one-cell-out RMS error by concurrency: {by_level}")
        for group in self.cycle.unidentified:
            *carriers, left_out = group
            lines.append(
                f"not separable from these cells: {left_out} moves with {' and '.join(carriers)} at every fitted "
                f"cell (left out: they carry its cost; measure other batch sizes or depths to split them)"
            )
        for name, fam in sorted(self.acceptance.items()):
            rates = ", ".join(f"{a:.3f}" for a in fam.conditional)
            lines.append(f"acceptance [{name}]: conditional per-position rates {rates} ({fam.source})")
            if fam.rank_share is not None:
                lines.append(f"acceptance [{name}]: tree rank share {fam.rank_share:.3f} ({fam.rank_source})")
            else:
                lines.append(f"acceptance [{name}]: trees (topk > 1) not predictable: none measured")
        return lines


@dataclass(frozen=True, slots=True)
class _Context:
    cells: tuple[ModelCell, ...]
    law: CapacityLaw
    known: dict[str, FamilyAcceptance]
    measured_tau: dict[SettingParams, float]
    measured_capacity: dict[SettingParams, int]
    families: tuple[str, ...]
    free: tuple[str, ...]
    free_trees: tuple[str, ...] = ()
    """Free families with tree cells: their rank share is fitted from throughput too."""

    def model(
        self,
        cycle: CycleModel,
        alphas: dict[str, float],
        train_rms: float,
        rho: float | None,
        shares: dict[str, float] | None = None,
    ) -> FittedModel:
        acceptance = dict(self.known)
        for f in self.free:
            share = None if f not in self.free_trees else (shares or {}).get(f, DEFAULT_RANK_SHARE)
            acceptance[f] = FamilyAcceptance.constant(
                alphas[f], FROM_THROUGHPUT, share, FROM_THROUGHPUT if share is not None else ""
            )
        lengths = [c.output_tokens for c in self.cells if c.output_tokens]
        return FittedModel(
            cycle, acceptance, self.law, self.measured_tau, self.measured_capacity, train_rms, cells=len(self.cells),
            rho=rho, output_tokens=sum(lengths) / len(lengths) if lengths else None,
        )  # fmt: skip


def _context(cells: Sequence[ModelCell]) -> _Context:
    known = fit_acceptance(cells)
    taus: dict[SettingParams, list[float]] = {}
    caps: dict[SettingParams, int] = {}
    for c in cells:
        if c.acceptance_length is not None and c.params.speculative:
            taus.setdefault(c.params, []).append(c.acceptance_length)
        if c.capacity is not None:
            caps[c.params] = c.capacity
    families = tuple(sorted({c.params.family for c in cells if c.params.speculative}))
    free = tuple(f for f in families if f not in known)
    free_trees = tuple(f for f in free if any(c.params.family == f and c.params.topk > 1 for c in cells))
    return _Context(
        tuple(cells),
        fit_capacity(cells),
        known,
        {p: sum(v) / len(v) for p, v in taus.items()},
        caps,
        families,
        free,
        free_trees,
    )


def _observations(
    ctx: _Context, alphas: dict[str, float], cells: Sequence[ModelCell], shares: dict[str, float] | None = None
) -> list[CycleObservation]:
    probe = ctx.model(CycleModel("dense", None, ctx.families, ()), alphas, 0.0, None, shares)
    out = []
    for c in cells:
        batch = running_requests(c.concurrency, probe.capacity(c.params))
        tau = probe.tau(c.params)
        if c.per_request_tok_s is not None:
            out.append(CycleObservation(batch, c.params, cycle_ms_from_rate(tau, c.per_request_tok_s)))
        if c.aggregate_tok_s is not None:
            per_token = tau / c.output_tokens if c.output_tokens else 0.0
            out.append(
                CycleObservation(batch, c.params, cycle_ms_from_aggregate(batch, tau, c.aggregate_tok_s), per_token)
            )
    return out


def _fit_on(
    ctx: _Context,
    cells: Sequence[ModelCell],
    form: str,
    rho: float | None,
    *,
    shape_grid: Sequence[float | None] | None = None,
    alpha_grids: dict[str, list[float]] | None = None,
    shares: dict[str, float] | None = None,
) -> FittedModel:
    """Best shape (and free rate per family, and free rank share per family with trees) for `form` on
    `cells` by training error; grids default to the full ones (a LOO fold passes the full fit's
    neighbourhoods and its shares)."""
    grid = tuple(shape_grid) if shape_grid is not None else shapes(form, rho)
    fixed_shares = shares is not None
    shares = dict(shares or dict.fromkeys(ctx.free_trees, DEFAULT_RANK_SHARE))

    def best_for(alphas: dict[str, float]) -> tuple[float, CycleModel]:
        obs = _observations(ctx, alphas, cells, shares)
        fits = [fit_form(form, shape, ctx.families, obs, rho) for shape in grid]
        model, rms = min(fits, key=lambda f: f[1])
        return _refine_shape(form, grid, ctx.families, obs, model, rms, rho)

    if not ctx.free:
        rms, model = best_for({})
        return ctx.model(model, {}, rms, rho)

    def search(alphas: dict[str, float], family: str, candidates: Sequence[float]) -> tuple[float, CycleModel]:
        scored = [(best_for({**alphas, family: a}), a) for a in candidates if 0.05 <= a <= 0.9995]
        (rms, model), alphas[family] = min(scored, key=lambda s: s[0][0])
        return rms, model

    if alpha_grids is None:
        # One rate for all first (the starting point), then each family's own: coarse, then fine around it.
        common = min(ALPHA_COARSE, key=lambda a: best_for(_same_rate(ctx.free, a))[0])
        alphas = _same_rate(ctx.free, common)
        step = ALPHA_COARSE[1] - ALPHA_COARSE[0]
        for family in ctx.free if len(ctx.free) > 1 else ():
            search(alphas, family, ALPHA_COARSE)
        alpha_grids = {f: [float(a) for a in np.linspace(alphas[f] - step, alphas[f] + step, 9)] for f in ctx.free}
    else:
        alphas = {f: alpha_grids[f][len(alpha_grids[f]) // 2] for f in ctx.free}
    for family in ctx.free:
        rms, model = search(alphas, family, alpha_grids[family])
    if not fixed_shares and ctx.free_trees:
        # A tree's tau depends on the rank share too: each free family's share on a grid at its rate, then
        # the rate once more at that share (tau and the share trade off, as tau and T do).
        for family in ctx.free_trees:
            scored = []
            for share in SHARE_GRID:
                shares[family] = share
                scored.append((best_for(alphas)[0], share))
            shares[family] = min(scored)[1]
            rms, model = search(alphas, family, alpha_grids[family])
    return ctx.model(model, alphas, rms, rho, shares)


def _same_rate(families: Sequence[str], alpha: float) -> dict[str, float]:
    return dict.fromkeys(families, alpha)


def _refine_shape(
    form: str,
    grid: Sequence[float | None],
    families: Sequence[str],
    obs: Sequence[CycleObservation],
    model: CycleModel,
    rms: float,
    rho: float | None = None,
) -> tuple[float, CycleModel]:
    """The shape between the best grid point's neighbours that fits best (bounded Brent search).

    A ridge or a routing ratio is a continuous quantity: the grid only finds its basin. Measured on
    simulated sweeps (benchmarks/model_accuracy.py) a ridge at 45-48 tokens fitted on the nearest grid
    point put held-out depths 5 % off; refined, the error is that of the data."""
    shapes_on_grid = [g for g in grid if g is not None]
    if model.shape is None or len(shapes_on_grid) < 2:
        return rms, model
    i = shapes_on_grid.index(model.shape)
    lo, hi = shapes_on_grid[max(0, i - 1)], shapes_on_grid[min(len(shapes_on_grid) - 1, i + 1)]
    if hi <= lo:
        return rms, model
    cache: dict[float, tuple[CycleModel, float]] = {}

    def score(shape: float) -> float:
        cache[shape] = fit_form(form, shape, families, obs, rho)
        return cache[shape][1]

    from scipy.optimize import minimize_scalar  # here, not at import: every `tune` imports this package

    found = minimize_scalar(score, bounds=(lo, hi), method="bounded", options={"xatol": 1e-3 * (hi - lo)})
    best_shape = float(found.x)
    refined, refined_rms = cache.get(best_shape) or fit_form(form, best_shape, families, obs, rho)
    return (refined_rms, refined) if refined_rms < rms else (rms, model)


def _neighbours(
    full: FittedModel, form: str, rho: float | None
) -> tuple[list[float | None], dict[str, list[float]] | None]:
    """The full fit's shape and alpha with their grid neighbours: the search range of a LOO fold.

    Refitting a fold over the whole grids would cost 20x more for the same answer in practice; the range
    still lets each fold move its shape and alpha, so the held-out cell does not pick them."""
    grid = list(shapes(form, rho))
    shape = full.cycle.shape
    if shape is None or shape in grid:
        i = grid.index(shape)
        shape_grid = grid[max(0, i - 1) : i + 2]
    else:  # refined between grid points: the grid points around it, and it
        on_grid = [g for g in grid if g is not None]
        below = [g for g in on_grid if g < shape][-1:]
        above = [g for g in on_grid if g > shape][:1]
        shape_grid = [*below, shape, *above]
    free = {n: f.alpha for n, f in full.acceptance.items() if f.source == FROM_THROUGHPUT}
    if not free:
        return shape_grid, None
    step = (ALPHA_COARSE[1] - ALPHA_COARSE[0]) / 4
    return shape_grid, {n: [a - 2 * step, a - step, a, a + step, a + 2 * step] for n, a in free.items()}


def _relative_errors(model: FittedModel, cells: Sequence[ModelCell]) -> list[float]:
    errors = []
    for c in cells:
        p = model.predict(c.params, c.concurrency)
        if c.per_request_tok_s is not None:
            errors.append(p.per_request_tok_s / c.per_request_tok_s - 1.0)
        if c.aggregate_tok_s is not None:
            errors.append(p.aggregate_tok_s / c.aggregate_tok_s - 1.0)
    return errors


def _rms(values: Sequence[float]) -> float:
    return math.sqrt(sum(v * v for v in values) / len(values)) if values else 0.0


def _loo(ctx: _Context, form: str, rho: float | None) -> tuple[FittedModel, float | None, dict[int, float]]:
    """The form's fit on all cells, the RMS relative error of each cell predicted by a fit on all the
    other cells (None: fewer than 3 cells), and that RMS per concurrency level."""
    cells = ctx.cells
    full = _fit_on(ctx, cells, form, rho)
    if len(cells) < 3:
        return full, None, {}
    shape_grid, alpha_grids = _neighbours(full, form, rho)
    shares = {n: f.rank_share for n, f in full.acceptance.items() if f.source == FROM_THROUGHPUT and f.rank_share}
    by_level: dict[int, list[float]] = {}
    for i, held in enumerate(cells):
        rest = cells[:i] + cells[i + 1 :]
        if held.params.speculative and held.params.family not in {c.params.family for c in rest}:
            continue  # a drafter seen only in this cell cannot be predicted without it
        sub = _context(rest)
        if sub.law.kind == "unknown":  # an inferred law (nothing read back) holds for every fold
            sub = replace(sub, law=ctx.law)
        try:
            model = _fit_on(sub, rest, form, rho, shape_grid=shape_grid, alpha_grids=alpha_grids, shares=shares)
            held_errors = _relative_errors(model, [held])
        except ConfigError:
            continue
        by_level.setdefault(held.concurrency, []).extend(held_errors)
    errors = [e for level_errors in by_level.values() for e in level_errors]
    return full, (_rms(errors) if errors else None), {lv: _rms(e) for lv, e in sorted(by_level.items())}


_Fits = dict[str, tuple[FittedModel, float | None, dict[int, float]]]


def _score(loo: float | None, form: str) -> tuple[float, int]:
    # Each extra form must beat the simpler ones by more than 1 % of their error: a tie (e.g. the MoE
    # term at rho -> 0, which is linear in B*D like the dense term) keeps the simpler form.
    return (math.inf if loo is None else loo * (1 + 0.01 * FORMS.index(form)), FORMS.index(form))


def _explains_plateaus(loo_with_law: float | None, loo_without: float | None) -> bool:
    """Whether an inferred capacity law clearly beats no law: its leave-one-cell-out error at most
    LAW_MARGIN x the error without it."""
    if loo_with_law is None or loo_without is None:
        return False
    return loo_with_law <= LAW_MARGIN * loo_without


def _fit_forms(ctx: _Context, forms: Sequence[str], rho: float | None) -> tuple[_Fits, str]:
    """Every form's fit and leave-one-cell-out error, and the form chosen by that error."""
    fits = {form: _loo(ctx, form, rho) for form in forms}
    return fits, min(forms, key=lambda form: _score(fits[form][1], form))


def _with_inferred_capacity(
    ctx: _Context, cells: Sequence[ModelCell], forms: Sequence[str], rho: float | None
) -> _Context | None:
    """`ctx` with the capacity law the throughput plateaus imply (plateau.py), or None when they imply none."""

    def fit_free(sub: Sequence[ModelCell]) -> Callable[[SettingParams, int], Prediction]:
        return fit_model(sub, forms=forms, rho=rho, infer_capacity_law=False).predict

    try:
        inferred = infer_capacity(cells, fit_free)
    except ConfigError:  # too few cells below the plateaus to fit: no inference
        return None
    return None if inferred is None else replace(ctx, law=inferred.law)


def fit_model(
    cells: Sequence[ModelCell],
    *,
    forms: Sequence[str] = FORMS,
    rho: float | None = None,
    infer_capacity_law: bool = True,
) -> FittedModel:
    """Fit acceptance, capacity and cycle time to `cells`; choose the cycle form by leave-one-cell-out error.

    `rho` = experts_per_token / experts of an MoE target when known (else the MoE form fits it on a grid).
    With no capacity read back, the capacity law the throughput plateaus imply (plateau.py) is tried too and
    kept when it clearly lowers the leave-one-cell-out error (LAW_MARGIN; `infer_capacity_law=False`: never).
    Raises ConfigError when the cells cannot support a fit (no figures, fewer cells than needed)."""
    usable = [c for c in cells if c.per_request_tok_s is not None or c.aggregate_tok_s is not None]
    if len(usable) < 2:
        raise ConfigError(
            f"model: cells = {len(usable)} with a tok/s figure: at least 2 are needed to fit; "
            "fix: measure more cells (or widen --fit-only)"
        )
    unknown = [f for f in forms if f not in FORMS]
    if unknown:
        raise ConfigError(f"model: form = {unknown[0]!r}: unknown; fix: use some of {', '.join(FORMS)}")
    forms = [f for f in forms if shapes(f, rho)]  # moe-roofline needs a known rho
    ctx = _context(usable)
    fits, chosen = _fit_forms(ctx, forms, rho)
    if infer_capacity_law and ctx.law.kind == "unknown":
        inferred = _with_inferred_capacity(ctx, usable, forms, rho)
        if inferred is not None:
            fits_inferred, chosen_inferred = _fit_forms(inferred, forms, rho)
            if _explains_plateaus(fits_inferred[chosen_inferred][1], fits[chosen][1]):
                fits, chosen = fits_inferred, chosen_inferred
    loo = {form: fit[1] for form, fit in fits.items()}
    model = fits[chosen][0]
    train = _rms(_relative_errors(model, usable))
    return FittedModel(
        model.cycle,
        model.acceptance,
        model.capacity_law,
        model.measured_tau,
        model.measured_capacity,
        train,
        loo,
        len(usable),
        rho,
        model.output_tokens,
        fits[chosen][2],
    )


__all__ = ["FittedModel", "fit_model"]
