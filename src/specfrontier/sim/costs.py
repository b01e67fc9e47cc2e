"""The simulator's reading of the performance theory: a profile and a resolved setting -> capacity and costs.

The formulas are `specfrontier.theory`'s, shared with the fitted model (`perfmodel/`); this module only maps
a profile's fields and SGLang's resolved setting onto them, so the event loop, the calibration surrogate
and reports all ask one place. The prefill cost is the simulator's own (the fitted model is decode-only).

These are model predictions: nothing here is measured.
"""

from __future__ import annotations

from specfrontier.sim.profile import SimProfile
from specfrontier.sim.setting import ResolvedSetting
from specfrontier.theory import cycle as cycle_theory
from specfrontier.theory.capacity import hybrid_state_capacity, kv_capacity, kv_reserved_tokens, with_user_cap


def capacity_law(profile: SimProfile, draft_tokens: int) -> int:
    """The profile's hybrid-state law at D = `draft_tokens`: `floor(M / (S0 + slots_per_draft_token * D))`."""
    cap = profile.capacity
    return hybrid_state_capacity(cap.state_slots, cap.slots_per_request, draft_tokens, cap.slots_per_draft_token)


def kv_law(profile: SimProfile, setting: ResolvedSetting) -> int | None:
    """The KV pool's bound on running requests: context plus the tree's reservation (None: no KV limit)."""
    cap = profile.capacity
    if cap.kv_tokens is None:
        return None
    steps = setting.num_steps if setting.speculative else 0
    reserved = kv_reserved_tokens(steps, setting.eagle_topk, setting.num_draft_tokens)
    return kv_capacity(cap.kv_tokens, cap.kv_context_tokens, reserved)


def capacity(profile: SimProfile, setting: ResolvedSetting) -> int:
    """Running-request capacity of the resolved setting: the laws, capped by max_running_requests
    (which under speculation is SGLang's 48 when the user left it unset)."""
    if not setting.speculative:
        law = profile.capacity.no_spec_capacity
    else:
        law = capacity_law(profile, setting.num_draft_tokens)
    kv = kv_law(profile, setting)
    return with_user_cap(law if kv is None else min(law, kv), setting.max_running_requests)


def setting_cycle_ms(profile: SimProfile, setting: ResolvedSetting, batch: int) -> float:
    """Duration of one decode (draft + verify) iteration of a resolved setting over `batch` running requests,
    in ms: the profile's costs in `theory.cycle.cycle_time_ms`."""
    c, s, m = profile.cycle, setting, profile.model
    return cycle_theory.cycle_time_ms(
        c, batch, s.speculative, s.num_steps, s.eagle_topk, s.num_draft_tokens, m.experts, m.experts_per_token
    )


def zero_step_extend_ms(profile: SimProfile, batch: int) -> float:
    """What an iteration of a per-batch-size schedule at 0 steps costs on top of a plain decode, in ms: SGLang
    0.5.23 verifies a one-token tree then (a decode) and still runs the draft model's extend over each
    request's new token, to keep the draft's KV warm for when the batch shrinks (`eagle_worker_v2.py`
    1463-1497; skipped only under `SGLANG_SPEC_SKIP_ZERO_STEP_DRAFT_EXTEND=1`, default off, `environ.py`
    1577): the speculation overhead and one draft forward over the batch."""
    c = profile.cycle
    return c.spec_overhead_ms + c.draft_step_ms + c.draft_token_ms * batch


def prefill_time_ms(profile: SimProfile, tokens: int) -> float:
    """Duration of one prefill iteration over `tokens` prompt tokens (at most `chunk_tokens`), in ms."""
    return profile.prefill.batch_ms + profile.prefill.token_ms * tokens


__all__ = ["capacity", "capacity_law", "kv_law", "prefill_time_ms", "setting_cycle_ms", "zero_step_extend_ms"]
