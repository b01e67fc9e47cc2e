"""Running-request capacity inferred from where aggregate throughput stops growing (no capacity read back).

Public sweeps (and imported tables) publish aggregate tok/s only. On a hybrid model every speculative
setting runs at most MRR(D) requests (theory 2.4), so from C = MRR on, raising the concurrency adds
nothing: the aggregate lies flat. A model that does not know this predicts a deep setting at C = 64 with
64 running requests and picks it, where the engine would run 11 (measured on simulated sweeps,
benchmarks/model_accuracy.py: 5-6 % regret at C >= 16 with capacity unknown).

So when no capacity is read back, the plateau of each fitted setting is read as its capacity:

1. A setting's plateau starts at the first measured level whose aggregate is within PLATEAU_GAIN of the
   level below it: both ran the same batch, so the capacity is at most that lower level and above the
   level before it (where the aggregate still grew). A plateau from the lowest level on (a tree of 64
   draft tokens on a hybrid model runs one request: floor(106 / 66)) puts the capacity at or below it.
2. A model fitted on the cells below every plateau (batch = C there for certain) says which batch in that
   range gives the plateau's throughput: that batch is the setting's capacity estimate.
3. The law floor(M / (S0 + D)) is solved from the estimates as from read-back capacities, else fitted
   by least squares on 1 / MRR = (S0 + D) / M, which is linear in D; it needs two depths with a plateau
   and capacities that fall with D. Without a law, each plateaued setting still runs at most its own
   estimate (a server past its KV cache, e.g. the speculators DSpark table at N = 128, queues the rest):
   the estimates stand for that setting as a read-back capacity would, and other settings stay unbounded.

A plateau can also be compute saturation (past the roofline ridge the aggregate is flat too); the caller
keeps the inferred law only when it clearly lowers the leave-one-cell-out error (fit.LAW_MARGIN), and the
model description says the capacity was inferred, not read back.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from specfrontier.perfmodel.capacity import CapacityLaw
from specfrontier.perfmodel.types import ModelCell, Prediction, SettingParams
from specfrontier.theory.capacity import S0_GRID, solve_hybrid_state_law

PLATEAU_GAIN = 0.03
"""Largest relative aggregate gain between two measured levels still read as "no gain" (the same batch):
below a plateau a doubling of C gains 20-50 %; repeats of one cell differ by 1-2 %."""


@dataclass(frozen=True, slots=True)
class Plateau:
    """Where one setting's aggregate lies flat: its capacity lies in (`above`, `at_most`]."""

    params: SettingParams
    above: int
    at_most: int
    aggregate_tok_s: float
    """Mean aggregate of the plateau's cells (all ran `capacity` requests)."""


@dataclass(frozen=True, slots=True)
class InferredCapacity:
    """The law fitted to capacity estimates, the estimates, and the cells the estimates were read from."""

    law: CapacityLaw
    estimates: dict[SettingParams, int]


def find_plateaus(cells: Sequence[ModelCell]) -> list[Plateau]:
    """The plateau of every speculative setting whose aggregate stops growing within its measured levels."""
    by_setting: dict[SettingParams, dict[int, float]] = {}
    for c in cells:
        if c.params.speculative and c.aggregate_tok_s is not None:
            by_setting.setdefault(c.params, {})[c.concurrency] = c.aggregate_tok_s
    found = []
    for params, row in by_setting.items():
        levels = [0, *sorted(row)]  # 0: a plateau from the lowest level on means capacity <= that level
        for i in range(2, len(levels)):
            if row[levels[i]] <= row[levels[i - 1]] * (1 + PLATEAU_GAIN):
                flat = [row[lv] for lv in levels[i - 1 :]]
                found.append(Plateau(params, levels[i - 2], levels[i - 1], sum(flat) / len(flat)))
                break
    return found


def below_plateaus(cells: Sequence[ModelCell], plateaus: Sequence[Plateau]) -> list[ModelCell]:
    """The cells every one of which ran batch = C: at or below each setting's `above` level."""
    limit = {p.params: p.above for p in plateaus}
    return [c for c in cells if c.concurrency <= limit.get(c.params, c.concurrency)]


def estimate_capacity(plateau: Plateau, predict: Callable[[SettingParams, int], Prediction]) -> int | None:
    """The batch in the plateau's range whose predicted aggregate is nearest the plateau's (None when even
    the top of the range predicts less than the plateau by more than PLATEAU_GAIN: not a capacity limit)."""
    batches = range(plateau.above + 1, plateau.at_most + 1)
    predicted = {b: predict(plateau.params, b).aggregate_tok_s for b in batches}
    if predicted[plateau.at_most] * (1 + PLATEAU_GAIN) < plateau.aggregate_tok_s:
        return None
    return min(batches, key=lambda b: abs(predicted[b] - plateau.aggregate_tok_s))


def fit_law(estimates: dict[SettingParams, int]) -> CapacityLaw | None:
    """floor(M / (S0 + D)) through the estimates: solved exactly when some S0 of the grid reproduces every
    one (as for read-back capacities), else by least squares on 1 / MRR = S0 / M + D / M with each MRR at
    the middle of the [MRR, MRR + 1) its floor covers. None: fewer than two depths, capacities that do
    not fall with D, or a negative S0."""
    by_depth: dict[int, int] = {}
    for params, cap in estimates.items():
        by_depth[params.verified] = min(cap, by_depth.get(params.verified, cap))
    if len(by_depth) < 2 or len(set(by_depth.values())) < 2:
        return None
    solved = solve_hybrid_state_law(sorted(by_depth.items()), S0_GRID)
    if solved is not None:
        state_slots, slots_per_request = solved
    else:
        depths = np.array(sorted(by_depth), dtype=float)
        inverse = np.array([1.0 / (by_depth[int(d)] + 0.5) for d in depths])
        slope, intercept = np.polyfit(depths, inverse, 1)
        if slope <= 0 or intercept < 0:
            return None
        state_slots, slots_per_request = 1.0 / slope, intercept / slope
    listed = ", ".join(f"{p.label} ~{cap}" for p, cap in sorted(estimates.items(), key=lambda e: e[0].verified))
    return CapacityLaw(
        "hybrid-state",
        state_slots=float(state_slots),
        slots_per_request=float(slots_per_request),
        note=f"(inferred from where aggregate throughput stops growing: {listed}; no capacity was read back)",
    )


def infer_capacity(
    cells: Sequence[ModelCell], fit: Callable[[Sequence[ModelCell]], Callable[[SettingParams, int], Prediction]]
) -> InferredCapacity | None:
    """The capacity law the plateaus of `cells` imply, or None (no plateau at two depths, too few cells
    below them, or plateaus that are not capacity limits). `fit` fits a capacity-free model and returns its
    predict function."""
    plateaus = find_plateaus(cells)
    if not plateaus:
        return None
    below = below_plateaus(cells, plateaus)
    if len(below) < 3:
        return None
    predict = fit(below)
    estimates = {}
    for plateau in plateaus:
        cap = estimate_capacity(plateau, predict)
        if cap is not None:
            estimates[plateau.params] = cap
    if not estimates:
        return None
    law = fit_law(estimates)
    if law is None:
        listed = ", ".join(f"{p.label} ~{cap}" for p, cap in estimates.items())
        note = f"(no law; each setting's own, inferred from where its aggregate stops growing: {listed})"
        law = CapacityLaw("unknown", note=note)
    return InferredCapacity(law, estimates)


__all__ = ["PLATEAU_GAIN", "InferredCapacity", "Plateau", "find_plateaus", "infer_capacity"]
