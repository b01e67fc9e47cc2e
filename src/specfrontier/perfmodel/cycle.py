"""Fitting the cycle time T(B, setting), one draft + verify iteration over B requests (theory 2.1, 6.1).

The forms and every term's column are the performance theory's (`theory.cycle`, shared with the
simulator, which weighs the same columns with a profile's known costs); each form is linear in
non-negative coefficients once one shape parameter is fixed:

- dense:    T = c0 + c1*B + sum_f [o_f + p_f*B + s*(d_f + e_f*B*k)] + cv*B*D
- moe:      dense + ce * (1 - (1 - rho)^(B*D))   MoESD expert coverage with E folded into ce; rho = k/E
            is known from the model card or chosen on a grid (RHO_GRID)
- roofline: T = c0 + c1*B + sum_f s*(d_f + e_f*B*k) + cc*max(0, B*D - n0)   ridge n0 on a grid (RIDGE_GRID)
- moe-roofline: the expert coverage and the ridge together (rho known only: with rho on a grid too the
            fit would cost 11 x more; without rho the form is not tried)
- kernel-switch: T = c0 + c1*B + sum_f [...] + cm*B*D*[B*D < L] + cq*B*D*[B*D >= L]   switch L on a grid
            (SWITCH_GRID); a threshold, not a continuous quantity: the fit changes only where L passes an
            observed B*D, so it is not refined between grid points

s = draft depth, k = topk, D = verified tokens per request, f = drafter family (each drafter has its own
draft cost, so this module lays the draft columns out per family); o_f + p_f*B is what speculation with
drafter f costs per cycle whatever its depth (`theory.cycle.speculation_terms`: the draft extend pass, tree
building, accept bookkeeping). Without a cell of no speculation o_f and p_f of the first family are the
fixed and per-request costs themselves (every cell speculates), so they are left out without a word.
Coefficients are fitted by non-negative least squares (scipy's `nnls`) on RELATIVE residuals
(T_pred/T_obs - 1), so a 2 ms and a 40 ms cycle weigh the same, and every term stays physical (no
negative costs).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
from numpy.typing import NDArray

from specfrontier.perfmodel.types import SettingParams
from specfrontier.theory.cycle import (
    CYCLE_FORMS,
    VERIFY_TERM_NAMES,
    draft_terms,
    request_terms,
    speculation_terms,
    verified_tokens,
    verify_terms,
)

Matrix = NDArray[np.float64]
FORMS = CYCLE_FORMS
"""The forms the model fits and chooses between: all of the theory's."""
RHO_GRID = tuple(float(x) for x in np.geomspace(1 / 1024, 1 / 4, 11))
RIDGE_GRID = tuple(float(round(x)) for x in np.geomspace(8, 2048, 25))
SWITCH_GRID = (6.0, 8.0, 10.0, 12.0, 14.0, 16.0, 18.0, 24.0, 32.0, 48.0, 64.0, 96.0, 128.0)
"""Where a matrix-vector kernel may give way to a matrix-matrix one, in rows (verified tokens) per forward:
MLX's limits (6, 10, 12, 14, 18, 32 by GPU and matrix size) and powers of two around them."""


@dataclass(frozen=True, slots=True)
class CycleObservation:
    """A cycle time derived from a measured figure: T_obs = 1000 * tau / v (ms) at B running requests.

    From an aggregate figure with known output tokens L per request, `cycle_ms` is 1000 * B * tau / X,
    which also holds the turnaround overhead O(B) = h0 + h1 * B (ms per request) spread over the request's
    L / tau cycles: 1000 * B * tau / X = T + (tau / L) * O(B). `overhead_per_token` is tau / L (0: none)."""

    batch: int
    params: SettingParams
    cycle_ms: float
    overhead_per_token: float = 0.0


@dataclass(frozen=True, slots=True)
class CycleModel:
    """A fitted form: its shape parameter, the drafter families it knows, and the coefficients (ms)."""

    form: str
    shape: float | None
    families: tuple[str, ...]
    coefficients: tuple[float, ...]
    rho: float | None = None
    """The routing ratio of the moe-roofline form (given, not fitted); None for the other forms."""
    unidentified: tuple[tuple[str, ...], ...] = ()
    """Groups of terms the fitted cells cannot tell apart (their columns are linearly dependent there, e.g.
    with topk 1 the verify term B*D = B + s*B is the per-request plus the draft-token term): each group's
    last term is left out of the fit (coefficient 0) and the others carry it, instead of an arbitrary split."""
    column_scale: tuple[float, ...] = ()
    """The norm of each design column over the fitted observations (1 for a column they never use)."""
    null_space: tuple[tuple[float, ...], ...] = ()
    """An orthonormal basis of the directions the fitted observations do not see (the null space of their
    column-scaled design): a prediction whose row has a component along one of them is not determined by
    the cells (`determined`)."""
    switch_gap: tuple[float, float] | None = None
    """kernel-switch only: (the most verified tokens per forward of a fitted cell below the switch, 0 if none;
    the fewest at or above it, inf if none). The fit cannot place the switch inside this gap."""
    switch_step: float = 0.0
    """kernel-switch only: the relative step down the cells show at the switch (`_with_switch`)."""

    def determined(self, batch: int, params: SettingParams, overhead: bool = False) -> bool:
        """Whether the fitted cells determine T(B, setting) (and, with `overhead`, the turnaround O(B)): its
        design row lies in the span of the fitted rows (estimability). Where it does not, the prediction
        leans on how the fit split a cost the cells only saw in sum (a drafter's per-request speculation
        cost fitted at one batch size, its per-step cost at one depth, a term no fitted cell used), which
        the cells say nothing about."""
        if self.in_switch_gap(batch, params):
            return False
        if not self.null_space:
            return True
        basis = np.asarray(self.null_space)
        scale = np.asarray(self.column_scale)
        row = features(self.form, self.shape, self.families, batch, params, self.rho)
        parts = [np.concatenate([row, np.zeros(len(OVERHEAD_TERMS))])]
        if overhead:
            parts.append(np.concatenate([np.zeros(row.size), [1.0, float(batch)]]))
        for x in parts:
            scaled = x / scale
            if np.linalg.norm(basis @ scaled) > DETERMINED_TOL * np.linalg.norm(scaled):
                return False
        return True

    def in_switch_gap(self, batch: int, params: SettingParams) -> bool:
        """Whether a forward of B * D verified tokens lies strictly between the fitted cells' counts on either side
        of the kernel switch (`switch_gap`): every switch in that gap fits the cells alike, so which kernel
        runs it, and what it costs, the cells do not say."""
        if self.switch_gap is None:
            return False
        lo, hi = self.switch_gap
        return lo < verified_tokens(batch, params.verified) < hi

    def cycle_ms(self, batch: int, params: SettingParams) -> float:
        """T(B, setting) in ms (decode only: the overhead terms are left out)."""
        row = features(self.form, self.shape, self.families, batch, params, self.rho)
        return float(row @ np.asarray(self.coefficients[: row.size]))

    def forward_ms(self, batch: int, params: SettingParams) -> float:
        """The part of T(B, setting) that is the target's forward of n = B * D tokens for B requests: the fixed,
        per-request and verify terms, the drafter's own columns left out (for no speculation: all of T)."""
        row = features(self.form, self.shape, self.families, batch, params, self.rho, drafter=False)
        return float(row @ np.asarray(self.coefficients[: row.size]))

    def overhead_ms(self, batch: int) -> float:
        """O(B): per-request turnaround overhead in ms (TTFT, prefill, client gap), 0 when not fitted."""
        h0, h1 = self.coefficients[-2:]
        return h0 + h1 * batch

    def observed_ms(self, o: CycleObservation) -> float:
        """What the form predicts for an observation's cycle time: T(B, setting), plus the turnaround overhead
        an aggregate figure carries (`CycleObservation`)."""
        return self.cycle_ms(o.batch, o.params) + o.overhead_per_token * self.overhead_ms(o.batch)

    def terms(self) -> dict[str, float]:
        """Coefficient per named term, for reports."""
        return dict(zip(term_names(self.form, self.families), self.coefficients, strict=True))


def speculation_term(family: str, which: int) -> str:
    """The name of a family's speculation column: 0 the fixed one, 1 the per-request one."""
    return f"{('spec_fixed_ms', 'spec_request_ms')[which]}[{family}]"


def term_names(form: str, families: Sequence[str]) -> list[str]:
    names = ["fixed_ms", "per_request_ms"]
    for f in families:
        names += [speculation_term(f, 0), speculation_term(f, 1), f"draft_step_ms[{f}]", f"draft_token_ms[{f}]"]
    names += VERIFY_TERM_NAMES.get(form, VERIFY_TERM_NAMES["roofline"])
    return [*names, *OVERHEAD_TERMS]


OVERHEAD_TERMS = ("request_overhead_ms", "request_overhead_per_running_ms")
"""h0, h1 of the per-request turnaround overhead O(B) = h0 + h1 * B (only aggregate figures see it)."""


def features(
    form: str,
    shape: float | None,
    families: Sequence[str],
    batch: int,
    params: SettingParams,
    rho: float | None = None,
    *,
    drafter: bool = True,
) -> Matrix:
    """The design row of one (B, setting) for `form` (`drafter=False`: the drafter's columns 0, the row of the
    target's forward alone)."""
    b = float(batch)
    row = request_terms(b)
    for f in families:
        own = drafter and params.speculative and params.family == f
        row += speculation_terms(b) if own else [0.0, 0.0]
        row += draft_terms(params.steps, b, params.topk) if own else [0.0, 0.0]
    row += verify_terms(form, shape, verified_tokens(b, params.verified), rho)
    return np.asarray(row, dtype=np.float64)


def shapes(form: str, rho: float | None) -> tuple[float | None, ...]:
    """The shape parameters a form is tried with: rho known from the model card, else the grid."""
    if form == "moe":
        return (rho,) if rho is not None else RHO_GRID
    if form == "roofline":
        return RIDGE_GRID
    if form == "moe-roofline":
        return RIDGE_GRID if rho is not None else ()
    if form == "kernel-switch":
        return SWITCH_GRID
    return (None,)


def fit_form(
    form: str,
    shape: float | None,
    families: Sequence[str],
    observations: Sequence[CycleObservation],
    rho: float | None = None,
) -> tuple[CycleModel, float]:
    """Fit one form with a fixed shape; returns the model and its RMS relative residual on `observations`."""
    rows = np.vstack(
        [
            np.concatenate(
                [
                    features(form, shape, families, o.batch, o.params, rho),
                    [o.overhead_per_token, o.overhead_per_token * o.batch],
                ]
            )
            / o.cycle_ms
            for o in observations
        ]
    )
    names = term_names(form, families)
    silent = set()
    if families and all(o.params.speculative for o in observations):
        silent = {names.index(speculation_term(families[0], 0)), names.index(speculation_term(families[0], 1))}
    groups, dropped = dependent_columns(rows, names, silent)
    keep = [i for i in range(rows.shape[1]) if i not in dropped]
    from scipy.optimize import nnls  # here, not at import: scipy.optimize costs ~0.25 s and only a fit needs it

    coef = np.zeros(rows.shape[1])
    coef[keep], _ = nnls(rows[:, keep], np.ones(len(observations)))
    resid = rows @ coef - 1.0
    rms = float(np.sqrt(np.mean(resid**2)))
    kept_rho = rho if form == "moe-roofline" else None
    scale, null = null_space(rows) if dropped else ((), ())  # full column rank: every row is determined
    coefficients = tuple(float(c) for c in coef)
    model = CycleModel(form, shape, tuple(families), coefficients, kept_rho, groups, scale, null)
    return (_with_switch(model, observations) if form == "kernel-switch" else model), rms


def _with_switch(model: CycleModel, observations: Sequence[CycleObservation]) -> CycleModel:
    """The fitted switch's gap among the cells' verified-token counts, and the step it makes in their cost: at
    the fewest tokens at or above it, how much less the cycle costs than the matrix-vector regime's line
    carried there, relative to the observed cycle (mean over those cells). The step is 0 where a regime rests
    on fewer than MIN_REGIME_TOKENS token counts: a regime seen at one count has a cost of its own for those
    cells alone (AngelSlim #163: a switch putting only the (4,4,16) tree at batch 64 above it fitted the table
    to 3.7 % instead of 6.0 %, its per-token cost 0)."""
    assert model.shape is not None
    tokens = {verified_tokens(o.batch, o.params.verified) for o in observations}
    below = [n for n in tokens if n < model.shape]
    above = [n for n in tokens if n >= model.shape]
    gap = (max(below, default=0.0), min(above, default=math.inf))
    if len(below) < MIN_REGIME_TOKENS or len(above) < MIN_REGIME_TOKENS:
        return replace(model, switch_gap=gap)
    names = term_names(model.form, model.families)
    matvec, matmul = (model.coefficients[names.index(n)] for n in VERIFY_TERM_NAMES["kernel-switch"])
    at = [o for o in observations if verified_tokens(o.batch, o.params.verified) == gap[1]]
    step = float(np.mean([(matvec - matmul) * gap[1] / o.cycle_ms for o in at]))
    return replace(model, switch_gap=gap, switch_step=step)


MIN_REGIME_TOKENS = 2
"""The fewest distinct verified-token counts per forward each kernel regime's cells must span."""


DETERMINED_TOL = 1e-6
"""Relative size of a design row's component outside the fitted rows' span above which the prediction is
not determined by them (rank is judged at 1e-9 of the largest singular value, as `dependent_columns`)."""


def null_space(rows: Matrix) -> tuple[tuple[float, ...], tuple[tuple[float, ...], ...]]:
    """(column norms, an orthonormal basis of the null space of the column-scaled `rows`): the directions of
    coefficient space the observations do not see. Row scaling (relative residuals) does not change it."""
    norms = np.linalg.norm(rows, axis=0)
    scale = np.where(norms > 0, norms, 1.0)
    scaled = rows / scale
    _, sing, vt = np.linalg.svd(scaled, full_matrices=scaled.shape[0] < scaled.shape[1])  # V whole either way
    rank = int(np.sum(sing > 1e-9 * sing[0])) if sing.size and sing[0] > 0 else 0
    basis = vt[rank:]
    return tuple(float(v) for v in scale), tuple(tuple(float(v) for v in b) for b in basis)


def dependent_columns(
    rows: Matrix, names: Sequence[str], silent: set[int] | None = None
) -> tuple[tuple[tuple[str, ...], ...], set[int]]:
    """Groups of linearly dependent columns (by the null space of the column-normalised design) and the
    columns to leave out so the rest are independent: per group its last column, the most specific term.
    All-zero columns (a term these cells do not inform at all, e.g. the overhead without output lengths)
    and the `silent` ones (a term another one is by construction, e.g. the first drafter's speculation
    cost when every cell speculates) are left out silently: they have nothing to split."""
    norms = np.linalg.norm(rows, axis=0)
    dropped = {i for i in range(rows.shape[1]) if norms[i] == 0} | (silent or set())
    live = [i for i in range(rows.shape[1]) if i not in dropped]
    groups: list[tuple[str, ...]] = []
    while len(live) > 1:
        sub = rows[:, live] / norms[live]
        # Only V is needed: with at least as many rows as columns the reduced SVD has all of it, and the
        # full one also builds a rows x rows U (tens of ms for a 3-D space's hundreds of cells, per fit).
        _, sing, vt = np.linalg.svd(sub, full_matrices=sub.shape[0] < sub.shape[1])
        if int(np.sum(sing > 1e-9 * sing[0])) == len(live):
            break
        null = vt[-1]  # V square (len(live) rows): the last right-singular vector lies in the null space
        members = [live[j] for j in range(len(live)) if abs(null[j]) > 1e-6]
        groups.append(tuple(names[i] for i in members))
        dropped.add(members[-1])
        live.remove(members[-1])
    return tuple(groups), dropped


__all__ = [
    "DETERMINED_TOL",
    "FORMS",
    "OVERHEAD_TERMS",
    "CycleModel",
    "CycleObservation",
    "dependent_columns",
    "features",
    "fit_form",
    "null_space",
    "shapes",
    "speculation_term",
    "term_names",
]
