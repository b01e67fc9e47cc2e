"""Draft acceptance in the simulator: per-position rates of a workload class, temperature, per-request draws.

All of it is a model (theory.md 1.2-1.4), not a measurement. The acceptance-length formula and SGLang's
tree (`theory.acceptance.tree_reach`: the verified nodes' chances summed per depth, drawn depth by depth
with the conditional rates that give exactly that accepted-length distribution) are the performance
theory's, shared with the fitted model; this module adds what only the simulator needs:

- a workload class's conditional top-1 rates a_j for depths 1..s (the last listed rate repeats);
- temperature: `a_j(T) = a_j(0) * max(0, 1 - drop * T)` (a measured-per-temperature fit is better;
  this is the prior), and the rate after the natural EOS when ignore_eos keeps the model going;
- per-request spread of the miss rate 1 - a, which the event loop draws against depth by depth.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from specfrontier.sim.profile import WorkloadModel
from specfrontier.sim.setting import ResolvedSetting
from specfrontier.theory.acceptance import MAX_RATE, conditional_rates, rates_to_depth, scaled_miss_rate, tree_reach


def chain_rates(base: Sequence[float], steps: int, temperature: float, drop: float) -> list[float]:
    """Conditional top-1 rates for depths 1..steps at `temperature` (the last listed rate repeats)."""
    factor = max(0.0, 1.0 - drop * max(0.0, temperature))
    return [min(MAX_RATE, a * factor) for a in rates_to_depth(base, steps)]


def depth_rates(top1: Sequence[float], setting: ResolvedSetting, rank_share: float) -> list[float]:
    """Per-depth pass probabilities the event loop draws against (the chain rates when topk == 1): for a
    tree, P(L >= j) / P(L >= j - 1) of SGLang's tree down to its deepest verified depth."""
    if setting.eagle_topk == 1:
        return list(top1)
    return conditional_rates(tree_reach(top1, setting.eagle_topk, setting.num_draft_tokens - 1, rank_share))


def workload_rates(
    workload: WorkloadModel,
    setting: ResolvedSetting,
    temperature: float,
    *,
    after_eos: bool = False,
    draft_head: str | None = None,
) -> list[float]:
    """Mean per-depth pass probabilities of a workload class under a setting (before per-request spread).

    A setting whose algorithm is not the deployment's `draft_head` drafts tokens the target never accepts
    (the head is fed features it was not trained on): every rate is 0, acceptance length 1. A setting that
    names no algorithm is not checked."""
    if not setting.speculative:
        return []
    base: Sequence[float] = workload.acceptance_per_position
    if after_eos and workload.post_eos_acceptance is not None:
        base = (workload.post_eos_acceptance,)
    top1 = chain_rates(base, setting.num_steps, temperature, workload.temperature_drop)
    rates = depth_rates(top1, setting, workload.rank_share)
    if draft_head is not None and setting.algorithm is not None and setting.algorithm != draft_head:
        return [0.0] * len(rates)
    return rates


def request_miss_scale(dispersion: float, rng: np.random.Generator) -> float:
    """One request's multiplier of the miss rate 1 - a: Gamma with mean 1 and variance `dispersion` (1.0 if 0).

    Prompts differ in how predictable their continuation is; the spread also desynchronises requests
    that start together, as real ones do."""
    if dispersion <= 0:
        return 1.0
    return float(rng.gamma(1.0 / dispersion, dispersion))


def scaled_rates(rates: Sequence[float], miss_scale: float) -> list[float]:
    """Rates with their miss rate scaled (`theory.acceptance.scaled_miss_rate`: `1 - (1 - a) * miss_scale`).

    A rate of 0 (a drafter that never matches the target) stays 0: the spread models prompts that differ in
    how predictable they are, which cannot make a mismatched drafter right."""
    return [0.0 if a <= 0 else scaled_miss_rate(a, miss_scale) for a in rates]


__all__ = [
    "chain_rates",
    "depth_rates",
    "request_miss_scale",
    "scaled_rates",
    "workload_rates",
]
