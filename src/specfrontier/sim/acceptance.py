"""Draft acceptance in the model: per-position rates, the tree approximation, per-request draws.

All of it is a model (theory.md 1.2-1.4), not a measurement:

- chain (topk == 1): draft j is accepted with conditional probability a_j given drafts 1..j-1 were
  accepted; the expected acceptance length is `tau = 1 + sum_i prod_{j<=i} a_j`.
- temperature: `a_j(T) = a_j(0) * max(0, 1 - drop * T)` (a measured-per-temperature fit is better;
  this is the prior).
- tree (topk > 1), an approximation of theory 1.3: the verified tree of D - 1 draft nodes is treated as
  a "widened chain", w_j candidates at depth j along the best path (w_j <= topk). A depth passes when
  one of its candidates matches: `P_j(w) = a_j + (1 - a_j) * (1 - (1 - h)^(w - 1))`, where rank r >= 2
  takes the share h of the mass left by ranks < r. Nodes are given greedily to the depth with the
  largest gain in tau. Side branches that continue below a non-top sibling are ignored (they add
  little under greedy acceptance), so tau for wide trees is slightly pessimistic.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from specfrontier.sim.profile import WorkloadModel
from specfrontier.sim.setting import ResolvedSetting

_MAX_RATE = 0.9999


def acceptance_length(rates: Sequence[float]) -> float:
    """tau = 1 + sum over depths of the probability that every draft up to that depth is accepted."""
    tau, alive = 1.0, 1.0
    for a in rates:
        alive *= a
        tau += alive
    return tau


def chain_rates(base: Sequence[float], steps: int, temperature: float, drop: float) -> list[float]:
    """Conditional top-1 rates for depths 1..steps at `temperature` (the last listed rate repeats)."""
    factor = max(0.0, 1.0 - drop * max(0.0, temperature))
    out = []
    for j in range(steps):
        a = base[j] if j < len(base) else base[-1]
        out.append(min(_MAX_RATE, a * factor))
    return out


def _depth_pass(a: float, width: int, rank_share: float) -> float:
    if width <= 0:
        return 0.0
    return a + (1.0 - a) * (1.0 - (1.0 - rank_share) ** (width - 1))


def tree_widths(top1: Sequence[float], topk: int, draft_nodes: int, rank_share: float) -> list[int]:
    """Candidates verified per depth for `draft_nodes` (= D - 1) nodes, given greedily by gain in tau."""
    widths = [0] * len(top1)
    for _ in range(draft_nodes):
        best, best_gain = -1, -1.0
        current = acceptance_length([_depth_pass(a, w, rank_share) for a, w in zip(top1, widths, strict=True)])
        for j in range(len(top1)):
            if widths[j] >= topk or (j > 0 and widths[j - 1] == 0):
                continue
            trial = list(widths)
            trial[j] += 1
            gain = acceptance_length([_depth_pass(a, w, rank_share) for a, w in zip(top1, trial, strict=True)])
            if gain - current > best_gain:
                best, best_gain = j, gain - current
        if best < 0:
            break
        widths[best] += 1
    return widths


def depth_rates(top1: Sequence[float], setting: ResolvedSetting, rank_share: float) -> list[float]:
    """Per-depth pass probabilities the event loop draws against (the chain rates when topk == 1)."""
    if setting.eagle_topk == 1:
        return list(top1)
    widths = tree_widths(top1, setting.eagle_topk, setting.num_draft_tokens - 1, rank_share)
    return [_depth_pass(a, w, rank_share) for a, w in zip(top1, widths, strict=True) if w > 0]


def workload_rates(
    workload: WorkloadModel, setting: ResolvedSetting, temperature: float, *, after_eos: bool = False
) -> list[float]:
    """Mean per-depth pass probabilities of a workload class under a setting (before per-request spread)."""
    if not setting.speculative:
        return []
    base: Sequence[float] = workload.acceptance_per_position
    if after_eos and workload.post_eos_acceptance is not None:
        base = (workload.post_eos_acceptance,)
    top1 = chain_rates(base, setting.num_steps, temperature, workload.temperature_drop)
    return depth_rates(top1, setting, workload.rank_share)


def request_miss_scale(dispersion: float, rng: np.random.Generator) -> float:
    """One request's multiplier of the miss rate 1 - a: Gamma with mean 1 and variance `dispersion` (1.0 if 0).

    Prompts differ in how predictable their continuation is; the spread also desynchronises requests
    that start together, as real ones do."""
    if dispersion <= 0:
        return 1.0
    return float(rng.gamma(1.0 / dispersion, dispersion))


def scaled_rates(rates: Sequence[float], miss_scale: float) -> list[float]:
    """Rates with their miss rate scaled: `1 - (1 - a) * miss_scale`, kept within [0, 0.9999]."""
    return [min(_MAX_RATE, max(0.0, 1.0 - (1.0 - a) * miss_scale)) for a in rates]


__all__ = [
    "acceptance_length",
    "chain_rates",
    "depth_rates",
    "request_miss_scale",
    "scaled_rates",
    "tree_widths",
    "workload_rates",
]
