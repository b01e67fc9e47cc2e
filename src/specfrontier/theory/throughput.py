"""Closed-loop decode throughput (theory.md key finding 2): who runs, and how fast.

Under closed-loop concurrency C the engine runs B = min(C, MRR) requests; each gains tau tokens per
cycle of T ms, so its decode rate is `v = 1000 * tau / T` tok/s, and the B together decode `B * v`.
The simulator's steady-state surrogate and the fitted model both predict v this way; their aggregate
figures differ on purpose (the surrogate's prefill waves vs the model's fitted turnaround overhead).
"""

from __future__ import annotations


def running_requests(concurrency: int, capacity: int | None) -> int:
    """B = min(C, MRR): requests decoding together under closed-loop concurrency C.

    At least one when capped, so a user cap of 0 still models one running request; C itself when the
    capacity is unknown."""
    return concurrency if capacity is None else max(1, min(concurrency, capacity))


def per_request_tok_s(tau: float, cycle_ms: float) -> float:
    """v = 1000 * tau / T: one running request's decode rate in tok/s."""
    return 1000.0 * tau / cycle_ms


__all__ = ["per_request_tok_s", "running_requests"]
