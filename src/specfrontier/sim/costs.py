"""The model's cost and capacity equations, kept in one place so the event loop, the calibration
surrogate and reports all use the same formulas (profile.py's docstring writes them out).

These are model predictions: nothing here is measured.
"""

from __future__ import annotations

import math

from specfrontier.sim.profile import SimProfile
from specfrontier.sim.setting import ResolvedSetting


def expert_coverage(tokens: float, experts: int, experts_per_token: int) -> float:
    """Expected distinct experts touched per layer by `tokens` tokens under uniform routing (MoESD):
    `E * (1 - (1 - k/E)^n)`; for a dense model (E == k) it is the constant E, which a fit absorbs into base."""
    if tokens <= 0:
        return 0.0
    if experts_per_token >= experts:
        return float(experts)
    return float(experts * (1.0 - (1.0 - experts_per_token / experts) ** tokens))


def capacity_law(profile: SimProfile, draft_tokens: int) -> int:
    """`floor(M / (S0 + slots_per_draft_token * D))`, the hybrid-state limit on running requests (theory 2.4)."""
    cap = profile.capacity
    slots = cap.slots_per_request + cap.slots_per_draft_token * draft_tokens
    # A tiny epsilon keeps exact quotients (106 / 2.0 ...) from flooring one below through rounding.
    return max(1, math.floor(cap.state_slots / slots + 1e-9)) if slots > 0 else 10**9


def capacity(profile: SimProfile, setting: ResolvedSetting) -> int:
    """Running-request capacity of the resolved setting: the law, capped by max_running_requests
    (which under speculation is SGLang's 48 when the user left it unset)."""
    if not setting.speculative:
        law = profile.capacity.no_spec_capacity
    else:
        law = capacity_law(profile, setting.num_draft_tokens)
    return law if setting.max_running_requests is None else min(law, setting.max_running_requests)


def cycle_time_ms(profile: SimProfile, setting: ResolvedSetting, batch: int) -> float:
    """Duration of one decode (draft + verify) iteration over `batch` running requests, in ms."""
    c = profile.cycle
    m = profile.model
    if batch <= 0:
        return 0.0
    verified = batch * setting.num_draft_tokens
    t = c.base_ms + c.request_ms * batch
    t += c.expert_ms * expert_coverage(verified, m.experts, m.experts_per_token)
    t += c.verify_token_ms * verified
    t += c.compute_token_ms * max(0.0, verified - c.compute_knee_tokens)
    if setting.speculative:
        t += c.spec_overhead_ms
        t += setting.num_steps * (c.draft_step_ms + c.draft_token_ms * batch * setting.eagle_topk)
    return t


def prefill_time_ms(profile: SimProfile, tokens: int) -> float:
    """Duration of one prefill iteration over `tokens` prompt tokens (at most `chunk_tokens`), in ms."""
    return profile.prefill.batch_ms + profile.prefill.token_ms * tokens


__all__ = ["capacity", "capacity_law", "cycle_time_ms", "expert_coverage", "prefill_time_ms"]
