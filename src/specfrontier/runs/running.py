"""The running limit as observed under load, for engines that do not report it (vLLM's `max_num_seqs`).

While the warm-up drives the server at the sweep's top concurrency, the adapter's live gauges
(`EngineAdapter.running_now`) are sampled; the peak of running requests, and whether any request had
to wait meanwhile, say what the server actually admitted. A limit is only claimed when requests
waited: a peak below the launched limit with nobody waiting is the client's concurrency, not the
server's. The finding is written into the capacity source in words, never silently replacing the
launched value.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass

import aiohttp

from specfrontier.engines.base import Capacity, RunningNow
from specfrontier.errors import EngineResponseError

SAMPLE_EVERY_S = 0.25


@dataclass
class RunningPeak:
    """Peaks of the live gauges over the samples taken (`samples` 0: the engine has no gauges)."""

    running: int = 0
    waiting: int = 0
    samples: int = 0

    def add(self, now: RunningNow) -> None:
        self.running = max(self.running, now.running)
        self.waiting = max(self.waiting, now.waiting)
        self.samples += 1

    def describe(self, capacity: Capacity, offered: int) -> Capacity:
        """The capacity with what was observed: the effective limit when requests waited, else a note."""
        if self.samples == 0:
            return capacity
        how = f"warm-up at C={offered}, live gauges every {SAMPLE_EVERY_S:g} s"
        seen = f"observed under load ({how}): at most {self.running} running"
        if self.waiting > 0 and 0 < self.running < capacity.max_running_requests:
            return Capacity(
                self.running,
                f"{capacity.source}; effective running limit {self.running} {seen}, "
                f"up to {self.waiting} waiting (the server admitted fewer than that figure)",
                capacity.context_tokens,
            )
        queued = f", up to {self.waiting} waiting" if self.waiting else ", none waiting"
        return Capacity(capacity.max_running_requests, f"{capacity.source}; {seen}{queued}", capacity.context_tokens)


@contextlib.asynccontextmanager
async def watch_running(
    read: Callable[[aiohttp.ClientSession, str], Awaitable[RunningNow | None]],
    session: aiohttp.ClientSession,
    base_url: str,
) -> AsyncIterator[RunningPeak]:
    """Sample `read` every SAMPLE_EVERY_S while the body runs; stop at the first None (no gauges)."""
    peak = RunningPeak()

    async def sample() -> None:
        while True:
            try:
                now = await read(session, base_url)
            except (EngineResponseError, aiohttp.ClientError, OSError, TimeoutError):
                # a missed sample is no observation; the warm-up itself reports real failures
                await asyncio.sleep(SAMPLE_EVERY_S)
                continue
            if now is None:
                return
            peak.add(now)
            await asyncio.sleep(SAMPLE_EVERY_S)

    task = asyncio.create_task(sample())
    try:
        yield peak
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
