"""Open-loop load: requests sent at scheduled times (Poisson or burstier), whatever the server does.

Closed loop measures a fixed number of users; open loop measures what users arriving at a given rate
experience, including the queueing a closed loop hides (a slow server slows a closed-loop client down,
but not arriving users). The schedule follows vLLM bench's `--request-rate` / `--burstiness`:
inter-arrival times are gamma-distributed with shape k = burstiness and mean 1 / rate, so k = 1 is a
Poisson process (exponential gaps, coefficient of variation 1), k < 1 is burstier (CV = 1/sqrt(k) > 1)
and k > 1 more regular. The schedule is a pure function of (rate, burstiness, seed, length): two runs
with the same seed send at the same offsets.

Measured window: the first request is scheduled at offset 0, and the schedule spans `span_s` (the
configured duration, or the last offset when a request count is given). Requests *scheduled* in the
first `warmup_s` or in the last `cooldown_s` of the span are sent (they load the server like any other)
but left out of the measurement: warmup lets the server reach its steady batch, cooldown drops the
tail where arrivals stop and the batch drains. `measured_indices` applies that rule.

The cell's rate (`measured_span_rate`): every token the server produced, for any request sent (warm-up
and cool-down ones too), between the first and the last measured request's scheduled send, divided by
that span. The measured requests' own window (first send to last end) would end with their drain, when
arrivals have stopped counting; this span is the load the cell is labelled with.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from specfrontier.load.client import StreamingClient, stall_guard
from specfrontier.metrics.steady import tokens_inside
from specfrontier.records import Prompt, RequestRecord, Sampling
from specfrontier.units import ns_to_ms, ns_to_s, s_to_ns


def arrival_offsets(
    rate: float,
    *,
    burstiness: float = 1.0,
    seed: int = 0,
    requests: int | None = None,
    duration_s: float | None = None,
) -> tuple[float, ...]:
    """Send offsets in seconds from the start: 0 for the first request, then cumulative gamma gaps.

    Exactly one of `requests` (that many offsets) or `duration_s` (every offset below it) is given.
    """
    if rate <= 0:
        raise ValueError(f"rate must be > 0 req/s, got {rate}")
    if burstiness <= 0:
        raise ValueError(f"burstiness must be > 0, got {burstiness}")
    if (requests is None) == (duration_s is None):
        raise ValueError("give exactly one of requests or duration_s")
    rng = np.random.default_rng(seed)
    scale = 1.0 / (rate * burstiness)  # mean gap = shape x scale = 1 / rate
    if requests is not None:
        if requests < 0:
            raise ValueError(f"requests must be >= 0, got {requests}")
        gaps = rng.gamma(burstiness, scale, size=max(requests - 1, 0))
        return tuple(float(x) for x in np.concatenate(([0.0], np.cumsum(gaps)))[:requests])
    assert duration_s is not None
    if duration_s <= 0:
        raise ValueError(f"duration_s must be > 0, got {duration_s}")
    offsets = [0.0]
    while True:
        # Blocks of draws (deterministic for a seed): a long schedule costs a few vector draws.
        block = rng.gamma(burstiness, scale, size=max(16, int(rate * duration_s)))
        for gap in block:
            nxt = offsets[-1] + float(gap)
            if nxt >= duration_s:
                return tuple(offsets)
            offsets.append(nxt)


def measured_indices(
    offsets: Sequence[float], *, span_s: float, warmup_s: float = 0.0, cooldown_s: float = 0.0
) -> list[int]:
    """Indices of requests scheduled in [warmup_s, span_s - cooldown_s]: the measured ones."""
    if warmup_s < 0 or cooldown_s < 0:
        raise ValueError("warmup_s and cooldown_s must be >= 0")
    end = span_s - cooldown_s
    return [i for i, t in enumerate(offsets) if warmup_s <= t <= end]


@dataclass(frozen=True, slots=True)
class OpenLoopResult:
    """Every request sent (in schedule order) and how faithfully the schedule was kept."""

    records: tuple[RequestRecord, ...]
    scheduled_ns: tuple[int, ...]
    """Scheduled send time of each request (perf_counter_ns); `records[i].send_ns` is the actual one."""
    cap_waits: int
    """Requests that had to wait for a free in-flight slot (the cap was hit); 0 without a cap."""
    max_in_flight: int | None

    def send_lag_ms(self) -> list[float]:
        """Actual minus scheduled send time per request (ms): the client's (or the cap's) delay."""
        return [ns_to_ms(r.send_ns - s) for r, s in zip(self.records, self.scheduled_ns, strict=True)]

    def achieved_rate(self, indices: Sequence[int] | None = None) -> float | None:
        """(n - 1) / (last send - first send) over the given requests: the rate actually sent (req/s)."""
        chosen = [self.records[i] for i in (range(len(self.records)) if indices is None else indices)]
        if len(chosen) < 2:
            return None
        span = max(r.send_ns for r in chosen) - min(r.send_ns for r in chosen)
        return (len(chosen) - 1) / ns_to_s(span) if span > 0 else None


async def run_open_loop(
    client: StreamingClient,
    prompts: Sequence[Prompt],
    sampling: Sampling,
    *,
    offsets: Sequence[float],
    max_in_flight: int | None = None,
) -> OpenLoopResult:
    """Send request i (prompt i mod n) at `offsets[i]` seconds from now, without waiting for earlier ones.

    With `max_in_flight`, a request due while that many are in flight waits for a slot (counted in
    `cap_waits`): the load is then no longer open. Sleeping is coarse (asyncio timers), so a request is
    sent at or after its scheduled time; the lag is kept per request (`send_lag_ms`).
    """
    if not prompts:
        raise ValueError("prompts must not be empty")
    if max_in_flight is not None and max_in_flight < 1:
        raise ValueError(f"max_in_flight must be >= 1, got {max_in_flight}")
    cap = client.pool_limit()
    if cap is not None and (max_in_flight is None or max_in_flight > cap):
        raise ValueError(
            f"max_in_flight = {max_in_flight}: the client's connection pool allows only {cap} connections, "
            "so arrivals beyond it would wait in the client unseen; fix: give the session "
            "aiohttp.TCPConnector(limit=0, limit_per_host=0) or let StreamingClient create it"
        )
    start_ns = time.perf_counter_ns()
    scheduled = tuple(start_ns + s_to_ns(t) for t in offsets)
    sent, cap_waits = await send_on_schedule(client, prompts, sampling, enumerate(scheduled), max_in_flight)
    records: list[RequestRecord | None] = [None] * len(offsets)
    for index, record in sent:
        records[index] = record
    done = tuple(r for r in records if r is not None)
    assert len(done) == len(offsets), "every scheduled request was sent once"
    return OpenLoopResult(done, scheduled, cap_waits, max_in_flight)


async def send_on_schedule(
    client: StreamingClient,
    prompts: Sequence[Prompt],
    sampling: Sampling,
    due: Iterable[tuple[int, int]],
    max_in_flight: int | None,
) -> tuple[list[tuple[int, RequestRecord]], int]:
    """Send request i (prompt i mod n) at its due `time.perf_counter_ns()`, for each (i, due) in order,
    without waiting for earlier ones: (i, record) pairs as they end, and the cap waits (a request due while
    `max_in_flight` are in flight waits for a slot). The one send loop of this process and of every client
    worker (`load.workers`), so both keep a schedule the same way."""
    slots = asyncio.Semaphore(max_in_flight) if max_in_flight is not None else None
    out: list[tuple[int, RequestRecord]] = []
    cap_waits = 0

    async def one(index: int) -> None:
        try:
            out.append((index, await client.send(prompts[index % len(prompts)], sampling)))
        finally:
            if slots is not None:
                slots.release()

    with stall_guard():
        async with asyncio.TaskGroup() as group:
            for index, due_ns in due:
                delay = ns_to_s(due_ns - time.perf_counter_ns())
                if delay > 0:
                    await asyncio.sleep(delay)
                if slots is not None:
                    if slots.locked():
                        cap_waits += 1
                    await slots.acquire()
                group.create_task(one(index))
    return out, cap_waits


def _scheduled_rate(offsets: Sequence[float]) -> float | None:
    """(n - 1) / scheduled span: the rate this (random) schedule asked for, which the achieved one is held to."""
    span = max(offsets) - min(offsets) if offsets else 0.0
    return (len(offsets) - 1) / span if len(offsets) >= 2 and span > 0 else None


@dataclass(frozen=True, slots=True)
class OpenLoopSchedule:
    """What one open-loop cell asks for: arrivals at `rate` req/s (gamma gaps of shape `burstiness`, drawn
    from `seed`) for `requests` requests or `duration_s` seconds, the first `warmup_s` and last `cooldown_s`
    of the span sent but not measured (module docstring)."""

    rate: float
    burstiness: float = 1.0
    seed: int = 0
    requests: int | None = None
    duration_s: float | None = None
    warmup_s: float = 0.0
    cooldown_s: float = 0.0

    def plan(self) -> tuple[tuple[float, ...], float, list[int]]:
        """(send offsets, span, indices measured); refuses a cell with none measured."""
        offsets = arrival_offsets(
            self.rate, burstiness=self.burstiness, seed=self.seed, requests=self.requests, duration_s=self.duration_s
        )
        span = self.duration_s if self.duration_s is not None else (offsets[-1] if offsets else 0.0)
        chosen = measured_indices(offsets, span_s=span, warmup_s=self.warmup_s, cooldown_s=self.cooldown_s)
        if not chosen:
            raise ValueError(
                f"rate {self.rate} req/s: no request is scheduled between warmup ({self.warmup_s} s) and cooldown "
                f"({self.cooldown_s} s) of a {span:.1f} s schedule; raise the duration or the request count"
            )
        return offsets, span, chosen


async def measure_schedule(
    send: Callable[[tuple[float, ...]], Awaitable[OpenLoopResult]],
    schedule: OpenLoopSchedule,
    max_in_flight: int | None,
) -> tuple[list[RequestRecord], dict[str, Any]]:
    """Plan one open-loop cell's schedule, let `send` carry it out, keep the measured requests and the facts.

    One place for the plan and the facts whoever sends (this process with `run_open_loop`, or several client
    workers: `load.workers.measure_open_loop` does either), so the stored cell means the same thing either way.

    The facts (stored with the cell) say what was asked (target rate, burstiness, seed, span) and what
    happened: requests sent and measured, the send rate the measured requests were scheduled at (a random
    schedule's own rate differs from the target, more so for few requests) and the rate achieved, cap
    waits and the send lag (actual - scheduled send time) p50/p99, so a client or cap that could not keep the
    schedule is visible rather than silently turning the load into something else.
    """
    offsets, span, chosen = schedule.plan()
    result = await send(offsets)
    facts = schedule_facts(result, offsets, chosen, schedule, span=span, max_in_flight=max_in_flight)
    return [result.records[i] for i in chosen], facts


def measured_span_rate(result: OpenLoopResult, chosen: Sequence[int]) -> tuple[float, float] | None:
    """(output tok/s, span s) over the measured part of the schedule (module docstring); None when it has
    no length (one measured request)."""
    start, end = result.scheduled_ns[chosen[0]], result.scheduled_ns[chosen[-1]]
    if end <= start:
        return None
    tokens = sum(tokens_inside(r, start, end) for r in result.records if r.ok)
    return tokens / ns_to_s(end - start), ns_to_s(end - start)


def schedule_facts(
    result: OpenLoopResult,
    offsets: Sequence[float],
    chosen: Sequence[int],
    schedule: OpenLoopSchedule,
    *,
    span: float,
    max_in_flight: int | None,
) -> dict[str, Any]:
    """What was asked of one open-loop cell and how the schedule was kept (stored with the cell)."""
    lags = np.asarray(result.send_lag_ms())
    span_rate = measured_span_rate(result, chosen)
    return {
        "target_rate": schedule.rate,
        "burstiness": schedule.burstiness,
        "seed": schedule.seed,
        "span_s": span,
        "warmup_s": schedule.warmup_s,
        "cooldown_s": schedule.cooldown_s,
        "sent": len(result.records),
        "measured": len(chosen),
        "scheduled_rate": _scheduled_rate([offsets[i] for i in chosen]),
        "achieved_rate": result.achieved_rate(chosen),
        "max_in_flight": max_in_flight,
        "cap_waits": result.cap_waits,
        "send_lag_p50_ms": float(np.percentile(lags, 50)),
        "send_lag_p99_ms": float(np.percentile(lags, 99)),
        "measured_span_tok_s": None if span_rate is None else span_rate[0],
        "measured_span_s": None if span_rate is None else span_rate[1],
    }


__all__ = [
    "OpenLoopResult",
    "OpenLoopSchedule",
    "arrival_offsets",
    "measure_schedule",
    "measured_indices",
    "measured_span_rate",
    "run_open_loop",
    "schedule_facts",
    "send_on_schedule",
]
