"""Closed-loop decode throughput (theory.md key finding 2): who runs, and how fast.

Under closed-loop concurrency C the engine runs B = min(C, MRR) requests; each gains tau tokens per
cycle of T ms, so its decode rate is `v = 1000 * tau / T` tok/s, and the B together decode `B * v`.
The simulator's steady-state surrogate and the fitted model both predict v this way (and the fitted model
reads measured rates back into cycle times with the inverse, `cycle_ms_from_rate`); their aggregate
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


def cycle_ms_from_rate(tau: float, per_request_tok_s: float) -> float:
    """T = 1000 * tau / v: the cycle time a measured per-request decode rate implies (v's law inverted).

    The fitted model turns each measured rate into an observed cycle time this way, so what it fits is the
    law the simulator and the prediction use, read backwards."""
    return 1000.0 * tau / per_request_tok_s


def cycle_ms_from_aggregate(batch: int, tau: float, aggregate_tok_s: float) -> float:
    """T = 1000 * B * tau / X: the cycle time an aggregate rate X over B running requests implies (X = B * v).

    With a per-request turnaround overhead the figure is T plus that overhead spread over the request's cycles;
    the fitted model carries that part as a term of its own (`perfmodel.cycle.CycleObservation`)."""
    return 1000.0 * batch * tau / aggregate_tok_s


__all__ = ["cycle_ms_from_aggregate", "cycle_ms_from_rate", "per_request_tok_s", "running_requests"]
