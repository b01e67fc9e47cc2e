"""Running-request capacity (theory.md 2.4): the hybrid-state law, solving it from readings, the user cap.

SGLang serving a hybrid linear-attention model (Qwen3.5, Qwen3-Next) gives every running request S0
recurrent-state slots plus `slots_per_draft_token` intermediate SSM states per verified draft token,
out of M slots shared by all requests, so speculation costs running slots:

    MRR(D) = floor(M / (S0 + slots_per_draft_token * D))

Attention KV cache bounds running requests too: every running request holds its context plus what one
cycle writes beyond it, the D verified tokens of the verify forward and the num_steps * topk draft tokens
of the draft forwards (SGLang allocates `bs * num_draft_tokens` slots for verify and `bs * topk *
num_steps` for the draft tree), so a tree reserves more than a chain of the same depth:

    MRR_kv = floor(KV / (context + D + num_steps * topk))

The simulator predicts capacity with these laws and the fitted model infers the hybrid-state law from
read-back capacities; predicting and solving floor the same way (one epsilon, one quotient), so a law solved from
readings reproduces them when it predicts.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import overload

FLOOR_EPSILON = 1e-9
"""Added to M / slots before flooring, so an exact quotient (106 / 2.0 ...) does not floor one below."""
S0_GRID = tuple(x / 2 for x in range(0, 33))
"""Candidate recurrent-state slots per request S0 when solving the law, in the order they are tried (0 to 16
in halves): the fitted model and the simulator's calibration solve the same law over the same grid."""
UNBOUNDED = 10**9
"""The law's capacity when a request holds no state slots at all: the law sets no limit."""


def _floor_quotient(state_slots: float, slots: float) -> int:
    return math.floor(state_slots / slots + FLOOR_EPSILON)


def slots_held(slots_per_request: float, draft_tokens: int, slots_per_draft_token: float = 1.0) -> float:
    """S0 + slots_per_draft_token * D: the state slots one running request holds under speculation."""
    return slots_per_request + slots_per_draft_token * draft_tokens


def hybrid_state_capacity(
    state_slots: float, slots_per_request: float, draft_tokens: int, slots_per_draft_token: float = 1.0
) -> int:
    """MRR(D): requests that fit in `state_slots` when each holds `slots_held(...)` slots.

    At least 1 (an engine always runs one request); UNBOUNDED when a request holds no slots."""
    slots = slots_held(slots_per_request, draft_tokens, slots_per_draft_token)
    return max(1, _floor_quotient(state_slots, slots)) if slots > 0 else UNBOUNDED


def solve_hybrid_state_law(
    readings: Sequence[tuple[int, int]], s0_candidates: Iterable[float], slots_per_draft_token: float = 1.0
) -> tuple[float, float] | None:
    """(M, S0) whose law reproduces every (D, read-back capacity) exactly, or None when no candidate S0 does.

    The law is exact (capacities are integers), so this is solving, not fitting: for each candidate S0
    in order, every M in [max(c * slots), min((c + 1) * slots)) floors to the readings; the middle
    integer of that range is taken, the guess least committed to either end for unread D."""
    for s0 in s0_candidates:
        held = [(slots_held(s0, d, slots_per_draft_token), cap) for d, cap in readings]
        lo = max(cap * slots for slots, cap in held)
        hi = min((cap + 1) * slots for slots, cap in held)
        if lo >= hi:
            continue
        integers = [m for m in range(math.ceil(lo), math.ceil(hi)) if m < hi]
        m = float(integers[len(integers) // 2]) if integers else (lo + hi) / 2
        if all(_floor_quotient(m, slots) == cap for slots, cap in held):
            return m, s0
    return None


def kv_reserved_tokens(steps: int, topk: int, draft_tokens: int) -> int:
    """KV slots a running request holds beyond its context per cycle: D verified + steps * topk drafted
    (1 without speculation: the decoded token)."""
    return draft_tokens + steps * topk if steps > 0 else 1


def kv_capacity(kv_tokens: float, context_tokens: float, reserved_tokens: int) -> int:
    """MRR_kv: requests whose context plus reservation fit in a KV pool of `kv_tokens` (at least 1)."""
    return max(1, _floor_quotient(kv_tokens, context_tokens + reserved_tokens))


@overload
def with_user_cap(capacity: int, max_running_requests: int | None) -> int: ...
@overload
def with_user_cap(capacity: int | None, max_running_requests: int | None) -> int | None: ...
def with_user_cap(capacity: int | None, max_running_requests: int | None) -> int | None:
    """The engine's capacity under the user's `max_running_requests` (None on either side: no limit there)."""
    if max_running_requests is None:
        return capacity
    return max_running_requests if capacity is None else min(max_running_requests, capacity)


__all__ = [
    "FLOOR_EPSILON",
    "S0_GRID",
    "UNBOUNDED",
    "hybrid_state_capacity",
    "kv_capacity",
    "kv_reserved_tokens",
    "slots_held",
    "solve_hybrid_state_law",
    "with_user_cap",
]
