"""Client health during a measured window: event-loop lag and client CPU, and the saturation flag.

Why: every timestamp the client takes (`perf_counter_ns` when a network read returns) is only as good
as the event loop's promptness. A loop that is busy parsing other streams' chunks, or a process that
waits for a CPU, reads a token late and charges the delay to TTFT and ITL (the workloads reference,
part B: lag grows as C x per-event cost long before the CPU is at 100%). So each window runs a
ticker task next to the load that asks to wake up every `TICK_S` and records how late it woke
(actual - scheduled): the delay any read that became ready at that moment would also have suffered.
Process CPU time over the window, divided by the window's wall time, is the share of one core the
client used; near 1.0 the client is the bottleneck whatever the lag says.

A window is flagged `saturated` (its client may have distorted the latency figures: TTFT and ITL carry
its lag) when, in any worker process:
- the lag p99 exceeds `LAG_P99_LIMIT_MS` (5 ms: the issue's fidelity target for 64 streams, and
  several times the ~1 ms timer granularity of an idle asyncio loop on Linux), or
- the client CPU exceeds `CPU_LIMIT` (90%) of one core.

The idle floor: asyncio rounds epoll timeouts up to whole milliseconds, so an idle loop shows lags of
0-1 ms; lag below ~1 ms is timer granularity, not distortion.

Whether a saturated client still kept up (the server served the cell's C) is judged against the cell's
request lifetime when the cell is summarised (`analysis.summary.CellSummary.keep_up_text`): a cell whose
client could not keep up is not evidence.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Self

import numpy as np

from specfrontier.units import MS_PER_S, ns_to_ms, ns_to_s, s_to_ns

TICK_S = 0.005
"""How often the ticker asks to wake up: 200 samples per second, negligible cost."""
LAG_P99_LIMIT_MS = 5.0
"""Lag p99 above this marks the client saturated (see the module docstring)."""
CPU_LIMIT = 0.9
"""Client CPU time / window wall time above this (of one core) marks the client saturated."""


@dataclass(frozen=True, slots=True)
class WorkerHealth:
    """Raw health of one client process over one window (picklable: workers send it back)."""

    wall_ns: int
    cpu_ns: int
    """Process CPU time (user + system, all threads) spent during the window."""
    lags_ns: tuple[int, ...]
    """Per tick: actual wake-up - scheduled wake-up."""
    reads: int = 0
    """Network reads of streamed bodies during the window."""
    events: int = 0
    """SSE events parsed from those reads."""
    loop: str = "asyncio"
    """The event loop implementation the client ran on ('asyncio' or 'uvloop')."""

    @property
    def cpu_fraction(self) -> float:
        """Share of one core used by the process over the window."""
        return self.cpu_ns / self.wall_ns if self.wall_ns > 0 else 0.0


@dataclass(frozen=True, slots=True)
class ClientHealth:
    """One window's client health over all its worker processes, and whether it was saturated."""

    workers: int
    lag_p50_ms: float | None
    lag_p99_ms: float | None
    lag_max_ms: float | None
    lag_samples: int
    cpu_fraction: tuple[float, ...]
    """Per worker: CPU time / wall time (of one core)."""
    worker_lag_p99_ms: tuple[float | None, ...]
    reads: int
    events: int
    wall_s: float
    loops: tuple[str, ...]
    """Per worker: the event loop implementation ('asyncio' or 'uvloop')."""
    saturated: bool
    reasons: tuple[str, ...]

    @classmethod
    def of(cls, parts: list[WorkerHealth]) -> ClientHealth:
        """Pool the lag samples of every worker; judge saturation per worker (one slow one distorts)."""
        if not parts:
            raise ValueError("ClientHealth.of needs at least one worker's health")
        pooled = [lag for p in parts for lag in p.lags_ns]
        per_worker_p99 = tuple(_percentile_ms(p.lags_ns, 99) for p in parts)
        reasons: list[str] = []
        for i, (p, p99) in enumerate(zip(parts, per_worker_p99, strict=True)):
            who = f"worker {i + 1}/{len(parts)}: " if len(parts) > 1 else ""
            if p99 is not None and p99 > LAG_P99_LIMIT_MS:
                reasons.append(f"{who}event-loop lag p99 {p99:.1f} ms > {LAG_P99_LIMIT_MS:g} ms")
            if p.cpu_fraction > CPU_LIMIT:
                reasons.append(f"{who}client CPU {p.cpu_fraction:.0%} of a core > {CPU_LIMIT:.0%}")
        return cls(
            workers=len(parts),
            lag_p50_ms=_percentile_ms(pooled, 50),
            lag_p99_ms=_percentile_ms(pooled, 99),
            lag_max_ms=ns_to_ms(max(pooled)) if pooled else None,
            lag_samples=len(pooled),
            cpu_fraction=tuple(p.cpu_fraction for p in parts),
            worker_lag_p99_ms=per_worker_p99,
            reads=sum(p.reads for p in parts),
            events=sum(p.events for p in parts),
            wall_s=ns_to_s(max(p.wall_ns for p in parts)),
            loops=tuple(p.loop for p in parts),
            saturated=bool(reasons),
            reasons=tuple(reasons),
        )

    @property
    def events_per_s(self) -> float | None:
        return self.events / self.wall_s if self.wall_s > 0 else None

    @property
    def events_per_read(self) -> float | None:
        return self.events / self.reads if self.reads else None

    def to_json(self) -> dict[str, Any]:
        """What the store keeps (`cell.client_health_json`), with the limits it was judged by."""
        return {
            "workers": self.workers,
            "lag_p50_ms": self.lag_p50_ms,
            "lag_p99_ms": self.lag_p99_ms,
            "lag_max_ms": self.lag_max_ms,
            "lag_samples": self.lag_samples,
            "tick_ms": TICK_S * MS_PER_S,
            "cpu_fraction": list(self.cpu_fraction),
            "worker_lag_p99_ms": list(self.worker_lag_p99_ms),
            "reads": self.reads,
            "events": self.events,
            "events_per_s": self.events_per_s,
            "events_per_read": self.events_per_read,
            "wall_s": self.wall_s,
            "loops": list(self.loops),
            "saturated": self.saturated,
            "reasons": list(self.reasons),
            "limits": {"lag_p99_ms": LAG_P99_LIMIT_MS, "cpu_fraction": CPU_LIMIT},
        }


def _percentile_ms(lags_ns: tuple[int, ...] | list[int], q: float) -> float | None:
    if not lags_ns:
        return None
    return ns_to_ms(float(np.percentile(np.asarray(lags_ns, dtype=np.float64), q)))


class HealthMonitor:
    """Samples this process's event-loop lag and CPU time while the `async with` body runs.

    Use it around exactly the measured window (not warmup) in the process that runs the client:

        async with HealthMonitor() as monitor:
            records = await run_closed_loop(client, ...)
        health = monitor.result(reads=..., events=...)
    """

    def __init__(self, tick_s: float = TICK_S) -> None:
        if tick_s <= 0:
            raise ValueError(f"tick_s must be > 0, got {tick_s}")
        self._tick_ns = s_to_ns(tick_s)
        self._lags: list[int] = []
        self._task: asyncio.Task[None] | None = None
        self._wall0 = self._cpu0 = 0
        self._wall1 = self._cpu1 = 0

    async def _tick(self) -> None:
        # Schedule from the actual wake-up, not a fixed grid: one long block counts once, as one late
        # wake-up, instead of as a burst of catch-up samples.
        due = time.perf_counter_ns() + self._tick_ns
        while True:
            await asyncio.sleep(ns_to_s(max(0, due - time.perf_counter_ns())))
            now = time.perf_counter_ns()
            self._lags.append(max(0, now - due))
            due = now + self._tick_ns

    async def __aenter__(self) -> Self:
        self._lags.clear()
        self._wall0, self._cpu0 = time.perf_counter_ns(), time.process_time_ns()
        self._task = asyncio.create_task(self._tick())
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._wall1, self._cpu1 = time.perf_counter_ns(), time.process_time_ns()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    def result(self, *, reads: int = 0, events: int = 0) -> WorkerHealth:
        """The window's raw health (call after the `async with` block)."""
        loop = type(asyncio.get_running_loop()).__module__.split(".")[0]
        return WorkerHealth(
            wall_ns=self._wall1 - self._wall0,
            cpu_ns=self._cpu1 - self._cpu0,
            lags_ns=tuple(self._lags),
            reads=reads,
            events=events,
            loop="uvloop" if loop == "uvloop" else "asyncio",
        )


def saturated(health_json: dict[str, Any] | None) -> bool:
    """Whether a stored window's client was saturated (None: not recorded, e.g. an older run)."""
    return bool(health_json and health_json.get("saturated"))


__all__ = [
    "CPU_LIMIT",
    "LAG_P99_LIMIT_MS",
    "TICK_S",
    "ClientHealth",
    "HealthMonitor",
    "WorkerHealth",
    "saturated",
]
