"""Fit the whole model to measured cells and predict untested (setting, concurrency) pairs.

    B = min(C, capacity(setting))          running requests (capacity: read back, else the fitted law)
    v = 1000 * tau(setting) / T(B, setting)   per-request decode tok/s
    X = B * v                               aggregate tok/s

Each measured figure becomes an observed cycle time (T = 1000*tau/v, or 1000*B*tau/X), and every cycle
form (`cycle.py`) is fitted to them. The form is chosen by HELD-OUT error: each measured setting in turn,
and each measured level in turn, is left out, the form is refitted without it (shape parameter and free
acceptance included, within a grid step of the full fit's) and predicts what was left out; the form with
the smallest RMS of those relative errors wins, because training error always prefers the form with more
terms, and these two ways of holding out are the two ways the model is used (an untested setting at a
measured level, a measured setting at an untested level). The same held-out errors, filed by the kind of
prediction they are (`calibration.py`), give the error every prediction states.

When no cell of a drafter family reports acceptance (e.g. an imported table of tok/s only), its
constant rate alpha is fitted together with the cycle time (grid, then a finer grid around the best),
one rate per drafter family (family by family, then once more each with the others fixed: an EAGLE head
and an n-gram drafter accept differently even when neither is measured): the report then says so,
because tau and T trade off against each other.

The model predicts only shapes the cells measured: no speculation only when a setting without it was
fitted, a drafter's chains only when one of its chains was, its trees only when one of its trees was
(`FittedModel.predict` refuses the rest with the reason).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from specfrontier.errors import ConfigError
from specfrontier.perfmodel.acceptance import FamilyAcceptance, fit_acceptance
from specfrontier.perfmodel.anchor import SiblingAnchor, TokenAnchor, sibling_anchor, token_anchor
from specfrontier.perfmodel.calibration import (
    AGAINST_BEST,
    BEYOND,
    LEVEL_EXTRAPOLATED,
    LEVEL_INTERPOLATED,
    MIN_GROUPS,
    Calibration,
    setting_class,
)
from specfrontier.perfmodel.capacity import CapacityLaw, fit_capacity, running_short
from specfrontier.perfmodel.cycle import FORMS, CycleModel, CycleObservation, fit_form, shapes
from specfrontier.perfmodel.plateau import infer_capacity
from specfrontier.perfmodel.types import ModelCell, Prediction, SettingParams
from specfrontier.theory.acceptance import DEFAULT_RANK_SHARE
from specfrontier.theory.capacity import with_user_cap
from specfrontier.theory.cycle import verified_tokens
from specfrontier.theory.throughput import (
    cycle_ms_from_aggregate,
    cycle_ms_from_rate,
    per_request_tok_s,
    running_requests,
)

ALPHA_COARSE = tuple(float(a) for a in np.linspace(0.40, 0.995, 12))
LAW_MARGIN = 0.5
"""An inferred capacity law is kept only when it at least halves the held-out error of level predictions. From
aggregate tok/s alone a compute ridge reads as a law with S0 near 0 and fits almost as well; measured on
simulated sweeps (benchmarks/model_accuracy.py) a true capacity limit cut the error to 0.10-0.15 x, a
compute plateau (chat sampling, where depth 2 saturates before its capacity) only to 0.82-0.91 x, and
keeping that law put held-out depths 10 % low."""
SHARE_GRID = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7)
"""Rank shares tried for a drafter whose trees were measured by throughput alone (no acceptance)."""
FROM_THROUGHPUT = "fitted from throughput (no acceptance measured)"
DISCRETE_SHAPES = ("kernel-switch",)
"""Forms whose shape is a threshold: the fit changes only where it passes an observed value, so a search
between grid points finds nothing the grid did not."""
SWITCH_STEP_FACTOR = 3.0
"""How many times its training RMS the cost step at a fitted kernel switch must be for the form to be chosen."""


@dataclass(frozen=True, slots=True)
class FittedModel:
    """A fitted performance model. `predict` is the stable entry point (used by guided search)."""

    cycle: CycleModel
    acceptance: dict[str, FamilyAcceptance]
    capacity_law: CapacityLaw
    measured_tau: dict[SettingParams, dict[int, float]]
    """A setting's measured tau per level it was measured at (acceptance can move with load: batch numerics,
    a server that drafts less under pressure)."""
    measured_capacity: dict[SettingParams, int]
    train_rms: float
    """RMS relative error of the chosen form on the fitted cells' tok/s figures."""
    heldout_rms: dict[str, float | None] = field(default_factory=dict)
    """Per form: RMS relative error of the held-out predictions (leave one setting out, leave one level out;
    None: nothing could be held out and predicted)."""
    cells: int = 0
    rho: float | None = None
    output_tokens: float | None = None
    """Mean output tokens per request of the fitted cells: the L used for predicted aggregates."""
    token_overhead: bool = False
    """The turnaround overhead is fitted per output token (L unknown; cells that give both a decode rate and an
    aggregate tell it apart): aggregate = B / (1 / v + g(B)), g(B) = (h0 + h1 * B) ms per token."""
    inferred_capacity: dict[SettingParams, int] = field(default_factory=dict)
    """Capacities not read back but inferred (aggregate / decode rate short of C, or a plateau): shown."""
    measured_levels: dict[SettingParams, tuple[int, ...]] = field(default_factory=dict)
    """The levels each fitted setting was measured at: what the model saw, so what a prediction leans on."""
    calibration: Calibration = field(default_factory=Calibration)
    """The chosen form's held-out errors per class of prediction, and the error stated for each."""
    anchor: TokenAnchor = field(default_factory=TokenAnchor)
    """The fitted baseline's misfit per verified-token count (`anchor.py`): it moves speculative cycles that
    verify as many tokens; baseline predictions stay the form's."""
    siblings: SiblingAnchor = field(default_factory=SiblingAnchor)
    """Each fitted chain's misfit per batch (`anchor.py`): a chain's cycle at B is scaled by its sibling chains'
    misfit there (same drafter, never its own), shrunk by how much of it the batches share."""

    @property
    def form(self) -> str:
        return self.cycle.form

    @property
    def levels(self) -> tuple[int, ...]:
        """Every level some fitted setting was measured at."""
        return tuple(sorted({lv for lvs in self.measured_levels.values() for lv in lvs}))

    def error_class(self, params: SettingParams, concurrency: int) -> str:
        """What kind of prediction (`calibration`) the model makes for `params` at C: a fitted setting at a level
        between two of its measured ones (or at one of them) is interpolated, beyond them extrapolated; a
        setting the model was not fitted on is an unmeasured chain or tree, at a measured level or not."""
        own = self.measured_levels.get(params)
        if own is not None:
            inside = concurrency in own or (min(own) < concurrency < max(own))
            return LEVEL_INTERPOLATED if inside else LEVEL_EXTRAPOLATED
        tree = params.topk > 1
        fitted = [
            p for p in self.measured_levels if p.speculative and p.family == params.family and (p.topk > 1) == tree
        ]
        shape = _tree_shape if tree else _chain_shape
        beyond = not fitted or any(
            not min(shape(p)[i] for p in fitted) <= value <= max(shape(p)[i] for p in fitted)
            for i, value in enumerate(shape(params))
        )
        return setting_class(tree, beyond, concurrency in self.levels)

    def halfwidth_against_best(self, params: SettingParams, concurrency: int) -> float | None:
        """The stated error of the RATIO of an unmeasured setting's prediction to the model's prediction of the
        best fitted cell at C (`calibration.AGAINST_BEST`): what "it beats the best measured one" rests on.
        None for a fitted setting, at an unmeasured level, or without held-out ratios of its kind."""
        if params in self.measured_levels or concurrency not in self.levels:
            return None
        if self.beyond(params) > self.calibration.reach or not self.determined(params, concurrency):
            return None
        return self.calibration.halfwidth(self.error_class(params, concurrency) + AGAINST_BEST)

    def beyond(self, params: SettingParams) -> int:
        """How far an unfitted chain lies beyond its family's fitted depths (depth steps; 0 inside or fitted);
        an unfitted tree outside its family's fitted shapes counts 1."""
        if params in self.measured_levels or not params.speculative:
            return 0
        tree = params.topk > 1
        fitted = [
            p for p in self.measured_levels if p.speculative and p.family == params.family and (p.topk > 1) == tree
        ]
        if not fitted:
            return 0
        if tree:
            return 0 if self.error_class(params, self.levels[0]).find(BEYOND) < 0 else 1
        depths = [p.steps for p in fitted]
        return max(0, min(depths) - params.steps, params.steps - max(depths))

    def determined(self, params: SettingParams, concurrency: int) -> bool:
        """Whether the fitted cells determine the prediction of `params` at C (`CycleModel.determined`): not
        where it leans on a cost the cells saw only in sum with another (a drafter's per-request speculation
        cost when every one of its cells ran at one batch size, its per-step cost when it ran at one depth)."""
        batch = running_requests(concurrency, self.capacity(params))
        return self.cycle.determined(batch, params, overhead=bool(self.output_tokens) or self.token_overhead)

    def halfwidth(self, params: SettingParams, concurrency: int) -> float | None:
        """The relative half-width the model states for its prediction of `params` at C (None: not known). A
        chain further beyond the fitted depths than any held-out setting lay has none: the held-out errors
        say nothing about how a longer extrapolation goes; nor has a prediction the cells do not determine
        (`determined`)."""
        if self.beyond(params) > self.calibration.reach or not self.determined(params, concurrency):
            return None
        return self.calibration.halfwidth(self.error_class(params, concurrency))

    def tau(self, params: SettingParams, concurrency: int | None = None) -> float:
        """Acceptance length: the setting's measured tau if it was measured (at C: the level's own, between
        measured levels interpolated in log C, beyond them the nearest; without C the mean), else the family
        model's."""
        if not params.speculative:
            return 1.0
        if params in self.measured_tau:
            return _tau_at(self.measured_tau[params], concurrency)
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

    def refusal(self, params: SettingParams) -> str | None:
        """Why the model does not predict `params` at all (a shape the fitted cells did not measure), or None."""
        fitted = self.measured_levels
        if not params.speculative:
            if fitted and not any(not p.speculative for p in fitted):
                return (
                    f"{params.label}: not predictable: no setting without speculation was fitted, so what a plain "
                    "decode step costs apart from speculation is not known; fix: measure the baseline"
                )
            return None
        if params.family not in self.cycle.families:
            return (
                f"family = {params.family!r}: its draft cost was not fitted "
                f"(fitted: {', '.join(self.cycle.families) or 'none'}); fix: measure one setting of that drafter"
            )
        own = [p for p in fitted if p.speculative and p.family == params.family]
        if params.topk == 1 and own and all(p.topk > 1 for p in own) and params not in self.measured_tau:
            return (
                f"{params.label}: not predictable: drafter {params.family!r} was measured only as trees "
                "(topk > 1), so how its chains accept and cost is unknown; fix: measure one chain setting of "
                f"{params.family} (topk 1)"
            )
        return None

    def predict(self, params: SettingParams, concurrency: int, *, stated: bool = True) -> Prediction:
        """Per-request and aggregate tok/s of `params` at closed-loop concurrency C, with the intervals of the
        error the model states for that kind of prediction (`halfwidth`). Raises ConfigError for a shape the
        fitted cells did not measure (`refusal`) and, with `stated` (the default), for a prediction whose
        error the model cannot state (too few held-out errors of its class); `stated=False` returns it
        without intervals then: an ordering, not a claim (guided search ranks its moves with it)."""
        if concurrency < 1:
            raise ConfigError(f"model: concurrency = {concurrency}: must be at least 1; fix: pass C >= 1")
        why = self.refusal(params)
        if why is not None:
            raise ConfigError(f"model: {why}")
        cap = self.capacity(params)
        batch = running_requests(concurrency, cap)
        tau = self.tau(params, concurrency)
        cycle = self.cycle_ms(batch, params)
        if cycle <= 0:
            raise ConfigError(f"model: cycle time at B={batch} is {cycle:.3g} ms; fix: fit on more cells")
        error_class = self.error_class(params, concurrency)
        half = self.halfwidth(params, concurrency)
        if half is None and stated:
            held = self.calibration.errors.get(error_class)
            far = self.beyond(params)
            if far > self.calibration.reach:
                why = (
                    f"{far} steps beyond the fitted depths, farther than any held-out setting lay "
                    f"({self.calibration.reach})"
                )
            elif self.cycle.in_switch_gap(batch, params):
                lo, hi = self.cycle.switch_gap or (0.0, math.inf)
                tokens = verified_tokens(batch, params.verified)
                why = (
                    f"it verifies {tokens:g} tokens per forward, between the fitted cells' {lo:g} and {hi:g}, "
                    "where the kernel switch lies: which kernel runs it is not known"
                )
            elif not self.determined(params, concurrency):
                why = (
                    f"the fitted cells do not determine it: it leans on costs they saw only in sum "
                    f"({'; '.join(' with '.join(g) for g in self.cycle.unidentified) or 'a term no fitted cell used'})"
                )
            else:
                why = f"{error_class}: {0 if held is None else held.groups} held out, at least {MIN_GROUPS} are needed"
            raise ConfigError(
                f"model: {params.label} at C={concurrency}: no stated error for a prediction of this kind ({why}); "
                "fix: measure it, or measure more settings and levels of its kind"
            )
        per_request = per_request_tok_s(tau, cycle)
        aggregate = batch * per_request
        if self.output_tokens:
            # L tokens take L / v seconds of decoding plus the turnaround overhead O(B) per request.
            overhead_s = self.cycle.overhead_ms(batch) / 1000.0
            aggregate = batch * self.output_tokens / (overhead_s + self.output_tokens / per_request)
        elif self.token_overhead:
            aggregate = batch / (self.cycle.overhead_ms(batch) / 1000.0 + 1.0 / per_request)
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
            error_class=error_class,
            halfwidth=half,
            halfwidth_against_best=self.halfwidth_against_best(params, concurrency),
        )

    def cycle_ms(self, batch: int, params: SettingParams) -> float:
        """T(B, setting) in ms: the fitted form's; a speculative cycle moved by the baseline's misfit at the
        tokens it verifies and scaled by its siblings' misfit at B (`anchor.py`)."""
        anchored = self.cycle.cycle_ms(batch, params) + self.anchor.offset_ms(self.cycle, batch, params)
        return anchored * (1.0 + self.siblings.misfit_at(batch, params))

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
        elif self.cycle.form == "kernel-switch" and self.cycle.shape is not None:
            shape = f" (matrix-vector kernel below {self.cycle.shape:.3g} verified tokens per forward, tiled above)"
        held = ", ".join(f"{k} {'-' if v is None else f'{100 * v:.1f} %'}" for k, v in self.heldout_rms.items())
        lines = [
            f"cycle form: {self.cycle.form}{shape}; {terms}",
            f"chosen by held-out RMS error (each setting, then each level, left out and predicted): {held}; "
            f"training RMS {100 * self.train_rms:.1f} % over {self.cells} cells",
            f"capacity: {self.capacity_law.describe()}",
            self.anchor.describe(),
            self.siblings.describe(),
            f"stated error (calibrated on the held-out errors, per kind of prediction): {self.calibration.describe()}",
        ]
        if self.inferred_capacity:
            shown = ", ".join(f"{p.label} {cap}" for p, cap in self.inferred_capacity.items())
            lines.append(
                f"capacity inferred, not read back (aggregate / decode rate short of C, or a plateau): {shown}"
            )
        if self.token_overhead:
            lines.append("turnaround overhead fitted per output token (cells give a decode rate and an aggregate)")
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
    measured_tau: dict[SettingParams, dict[int, float]]
    measured_capacity: dict[SettingParams, int]
    families: tuple[str, ...]
    free: tuple[str, ...]
    free_trees: tuple[str, ...] = ()
    """Free families with tree cells: their rank share is fitted from throughput too."""
    token_overhead: bool = False
    """No output lengths, but cells with both a decode rate and an aggregate: the overhead is fitted per token."""
    inferred: dict[SettingParams, int] = field(default_factory=dict)
    """The capacities among `measured_capacity` that were inferred, not read back."""

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
        measured: dict[SettingParams, set[int]] = {}
        for c in self.cells:
            measured.setdefault(c.params, set()).add(c.concurrency)
        return FittedModel(
            cycle, acceptance, self.law, self.measured_tau, self.measured_capacity, train_rms, cells=len(self.cells),
            rho=rho, output_tokens=sum(lengths) / len(lengths) if lengths else None,
            token_overhead=self.token_overhead and not lengths,
            measured_levels={p: tuple(sorted(levels)) for p, levels in measured.items()},
            inferred_capacity=dict(self.inferred),
        )  # fmt: skip


def _chain_shape(params: SettingParams) -> tuple[int, ...]:
    return (params.steps,)


def _tree_shape(params: SettingParams) -> tuple[int, ...]:
    return (params.steps, params.topk, params.verified)


def _tau_at(by_level: dict[int, float], concurrency: int | None) -> float:
    """A measured setting's tau at C (`FittedModel.tau`)."""
    if concurrency is None:
        return sum(by_level.values()) / len(by_level)
    if concurrency in by_level:
        return by_level[concurrency]
    levels = sorted(by_level)
    below = [lv for lv in levels if lv < concurrency]
    above = [lv for lv in levels if lv > concurrency]
    if not below or not above:
        return by_level[(below or above)[-1 if below else 0]]
    lo, hi = below[-1], above[0]
    w = math.log(concurrency / lo) / math.log(hi / lo)
    return by_level[lo] + w * (by_level[hi] - by_level[lo])


def _context(cells: Sequence[ModelCell]) -> _Context:
    known = fit_acceptance(cells)
    taus: dict[SettingParams, dict[int, float]] = {}
    short = running_short(cells)
    caps: dict[SettingParams, int] = dict(short)
    for c in cells:
        if c.acceptance_length is not None and c.params.speculative:
            taus.setdefault(c.params, {})[c.concurrency] = c.acceptance_length
        if c.capacity is not None:
            caps[c.params] = c.capacity
    families = tuple(sorted({c.params.family for c in cells if c.params.speculative}))
    free = tuple(f for f in families if f not in known)
    free_trees = tuple(f for f in free if any(c.params.family == f and c.params.topk > 1 for c in cells))
    both = any(c.per_request_tok_s is not None and c.aggregate_tok_s is not None for c in cells)
    return _Context(
        tuple(cells),
        fit_capacity(cells),
        known,
        taus,
        caps,
        families,
        free,
        free_trees,
        token_overhead=both and not any(c.output_tokens for c in cells),
        inferred=short,
    )


def _observations(
    ctx: _Context, alphas: dict[str, float], cells: Sequence[ModelCell], shares: dict[str, float] | None = None
) -> list[CycleObservation]:
    probe = ctx.model(CycleModel("dense", None, ctx.families, ()), alphas, 0.0, None, shares)
    out = []
    for c in cells:
        batch = running_requests(c.concurrency, probe.capacity(c.params))
        tau = probe.tau(c.params, c.concurrency)
        if c.per_request_tok_s is not None:
            out.append(CycleObservation(batch, c.params, cycle_ms_from_rate(tau, c.per_request_tok_s)))
        if c.aggregate_tok_s is not None:
            per_token = tau / c.output_tokens if c.output_tokens else (tau if ctx.token_overhead else 0.0)
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
        return _anchored(ctx, cells, model, {}, rms, rho, shares)

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
    return _anchored(ctx, cells, model, alphas, rms, rho, shares)


def _anchored(
    ctx: _Context,
    cells: Sequence[ModelCell],
    cycle: CycleModel,
    alphas: dict[str, float],
    rms: float,
    rho: float | None,
    shares: dict[str, float],
) -> FittedModel:
    """The fitted model with the anchors of `cells` (`anchor.py`: the baseline's misfit per verified tokens,
    the siblings' per batch), taken after the fit from the cells this fit saw: a held-out fold's anchors know
    only its own cells."""
    model = ctx.model(cycle, alphas, rms, rho, shares)
    observations = _observations(ctx, alphas, cells, shares)
    tokens = token_anchor(cycle, observations)
    return replace(model, anchor=tokens, siblings=sibling_anchor(cycle, tokens, observations))


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
    if model.shape is None or len(shapes_on_grid) < 2 or form in DISCRETE_SHAPES:
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


def _relative_errors(model: FittedModel, cells: Sequence[ModelCell], *, stated: bool = False) -> list[float]:
    errors = []
    for c in cells:
        p = model.predict(c.params, c.concurrency, stated=stated)
        if c.per_request_tok_s is not None:
            errors.append(p.per_request_tok_s / c.per_request_tok_s - 1.0)
        if c.aggregate_tok_s is not None:
            errors.append(p.aggregate_tok_s / c.aggregate_tok_s - 1.0)
    return errors


def _rms(values: Sequence[float]) -> float:
    return math.sqrt(sum(v * v for v in values) / len(values)) if values else 0.0


_Errors = dict[str, dict[int, list[float]]]
"""Held-out relative errors per class, per held-out group (the index of the setting or level left out)."""


def _held_out(ctx: _Context, form: str, rho: float | None) -> tuple[FittedModel, tuple[_Errors, int]]:
    """The form's fit on all cells, and the relative errors of its held-out predictions by class: each
    measured setting, then each measured level, left out, the form refitted on the rest (its shape and free
    rates within a grid step of the full fit's, so the held-out cells do not pick them) predicts them. A
    prediction the refitted model refuses (a shape it no longer has a cell of) is no error: the model would
    not make it in use either."""
    cells = ctx.cells
    full = _fit_on(ctx, cells, form, rho)
    shape_grid, alpha_grids = _neighbours(full, form, rho)
    shares = {n: f.rank_share for n, f in full.acceptance.items() if f.source == FROM_THROUGHPUT and f.rank_share}
    groups = [[c for c in cells if c.params == p] for p in dict.fromkeys(c.params for c in cells)]
    groups += [[c for c in cells if c.concurrency == lv] for lv in sorted({c.concurrency for c in cells})]
    errors: _Errors = {}
    reach = 0
    for group, held in enumerate(groups):
        rest = [c for c in cells if c not in held]
        if len(held) == len(cells) or len(rest) < 2:
            continue
        sub = _context(rest)
        if sub.law.kind == "unknown":  # an inferred law (nothing read back) holds for every fold
            kept = {p: cap for p, cap in ctx.inferred.items() if any(c.params == p for c in rest)}
            sub = replace(
                sub, law=ctx.law, measured_capacity={**kept, **sub.measured_capacity}, inferred={**kept, **sub.inferred}
            )
        try:
            model = _fit_on(sub, rest, form, rho, shape_grid=shape_grid, alpha_grids=alpha_grids, shares=shares)
        except ConfigError:
            continue
        for c in held:
            if model.refusal(c.params) is not None or not model.determined(c.params, c.concurrency):
                continue
            try:
                figures = _relative_errors(model, [c])
                against = _against_best(model, c, rest)
            except ConfigError:
                continue
            error_class = model.error_class(c.params, c.concurrency)
            errors.setdefault(error_class, {}).setdefault(group, []).extend(figures)
            if against:
                errors.setdefault(error_class + AGAINST_BEST, {}).setdefault(group, []).extend(against)
            reach = max(reach, model.beyond(c.params))
    return full, (errors, reach)


def _against_best(model: FittedModel, held: ModelCell, rest: Sequence[ModelCell]) -> list[float]:
    """For an unmeasured setting at a fitted level: the error of its predicted RATIO to the best fitted cell
    there (by aggregate, else by decode rate), against the measured ratio; what a decision "it beats the best
    measured one" rests on, and smaller than either prediction's own error when the two share it."""
    if held.params in model.measured_levels:
        return []
    at_level = [c for c in rest if c.concurrency == held.concurrency]
    figure = "aggregate_tok_s" if any(c.aggregate_tok_s for c in at_level) else "per_request_tok_s"
    at_level = [c for c in at_level if getattr(c, figure)]
    if not at_level:
        return []
    best = max(at_level, key=lambda c: getattr(c, figure) or 0.0)
    p_held = model.predict(held.params, held.concurrency, stated=False)
    p_best = model.predict(best.params, best.concurrency, stated=False)
    out = []
    for figure in ("aggregate_tok_s", "per_request_tok_s"):
        h, b = getattr(held, figure), getattr(best, figure)
        if h and b:
            out.append((getattr(p_held, figure) / getattr(p_best, figure)) / (h / b) - 1.0)
    return out


_Fits = dict[str, tuple[FittedModel, tuple[_Errors, int]]]
"""Per form: the fit, and its held-out errors with the farthest distance beyond the fitted depths held out."""


def _pooled_rms(held: tuple[_Errors, int]) -> float | None:
    """The RMS of every held-out prediction's error (the ratios against the best fitted setting left out:
    they are the same predictions seen another way)."""
    pooled = [
        e
        for name, by_group in held[0].items()
        if not name.endswith(AGAINST_BEST)
        for errs in by_group.values()
        for e in errs
    ]
    return _rms(pooled) if pooled else None


def _score(loo: float | None, form: str) -> tuple[float, int]:
    # Each extra form must beat the simpler ones by more than 1 % of their error: a tie (e.g. the MoE
    # term at rho -> 0, which is linear in B*D like the dense term) keeps the simpler form.
    return (math.inf if loo is None else loo * (1 + 0.01 * FORMS.index(form)), FORMS.index(form))


def _level_rms(held: tuple[_Errors, int]) -> float | None:
    """The RMS of the held-out errors of levels left out (a fitted setting at another level), else of all."""
    levels = {k: v for k, v in held[0].items() if k in (LEVEL_INTERPOLATED, LEVEL_EXTRAPOLATED)}
    return _pooled_rms((levels, held[1])) if levels else _pooled_rms(held)


def _explains_plateaus(with_law: tuple[_Errors, int], without: tuple[_Errors, int]) -> bool:
    """Whether an inferred capacity law clearly beats no law: the held-out error of its LEVEL predictions at
    most LAW_MARGIN x the error without it. A capacity shows where the batch stops growing with C, which is
    what holding out a level tests; an unmeasured depth predicted from one or two others is off for other
    reasons (its acceptance), and with two depths fitted those errors swamped the pooled figure (the
    simulated dense and late-knee sweeps fitted on steps 1-2: level errors 3.2-9.8 % without the law, 0.3 %
    with it, pooled 6.4 % against 5.9 %)."""
    law, no_law = _level_rms(with_law), _level_rms(without)
    if law is None or no_law is None:
        return False
    return law <= LAW_MARGIN * no_law


def _fit_forms(ctx: _Context, forms: Sequence[str], rho: float | None) -> tuple[_Fits, str]:
    """Every form's fit and held-out errors, and the form chosen by their RMS."""
    fits = {form: _held_out(ctx, form, rho) for form in forms}
    shown = [form for form in forms if _shows_its_terms(fits[form][0])] or list(forms)
    return fits, min(shown, key=lambda form: _score(_pooled_rms(fits[form][1]), form))


def _shows_its_terms(model: FittedModel) -> bool:
    """Whether the cells show what the form adds: a kernel switch only where its step down is beyond the fit's
    own scatter (SWITCH_STEP_FACTOR x its training RMS), each regime spanning two token counts. Otherwise the
    switch is one more free parameter: on a smooth simulated chain sweep with 3 % noise a switch "step" of
    1.8 % won the held-out comparison by refusing the level it left in its gap."""
    if model.cycle.form != "kernel-switch":
        return True
    return model.cycle.switch_step > SWITCH_STEP_FACTOR * model.train_rms


def _with_inferred_capacity(
    ctx: _Context, cells: Sequence[ModelCell], forms: Sequence[str], rho: float | None
) -> _Context | None:
    """`ctx` with the capacities the throughput plateaus imply (plateau.py): the law through them, and each
    plateaued setting's own estimate as if read back; None when they imply none."""

    def fit_free(sub: Sequence[ModelCell]) -> Callable[[SettingParams, int], Prediction]:
        model = fit_model(sub, forms=forms, rho=rho, infer_capacity_law=False)
        return lambda params, c: model.predict(params, c, stated=False)

    try:
        inferred = infer_capacity(cells, fit_free)
    except ConfigError:  # too few cells below the plateaus to fit: no inference
        return None
    if inferred is None:
        return None
    return replace(
        ctx,
        law=inferred.law,
        measured_capacity={**inferred.estimates, **ctx.measured_capacity},
        inferred={**inferred.estimates, **ctx.inferred},
    )


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
    if not forms:
        raise ConfigError(
            "model: form = moe-roofline alone needs the routing ratio (experts, experts_per_token); "
            "fix: give the model's experts, or add another form"
        )
    ctx = _context(usable)
    fits, chosen = _fit_forms(ctx, forms, rho)
    if infer_capacity_law and ctx.law.kind == "unknown":
        inferred = _with_inferred_capacity(ctx, usable, forms, rho)
        if inferred is not None:
            fits_inferred, chosen_inferred = _fit_forms(inferred, forms, rho)
            if _explains_plateaus(fits_inferred[chosen_inferred][1], fits[chosen][1]):
                fits, chosen = fits_inferred, chosen_inferred
    held = {form: _pooled_rms(fit[1]) for form, fit in fits.items()}
    model, (errors, reach) = fits[chosen]
    train = _rms(_relative_errors(model, usable, stated=False))
    calibration = Calibration.of(errors, reach)
    return replace(model, train_rms=train, heldout_rms=held, cells=len(usable), rho=rho, calibration=calibration)


__all__ = ["FittedModel", "fit_model"]
