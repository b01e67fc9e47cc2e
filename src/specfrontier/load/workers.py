"""Run a cell's load with its client health measured: in this process, or split over worker processes.

Why workers: one asyncio process spends tens of microseconds of CPU per streamed event, and every
decode step of the server makes C events arrive together, so the last of them is read about
C x cost later than the first (the workloads reference, part B). Past roughly 32-64 streams or
5-10k events/s per process that lag reaches milliseconds and distorts TTFT and ITL. Splitting the
streams over N processes divides the burst each event loop has to drain.
"""

from __future__ import annotations

from collections.abc import Awaitable, Sequence
from typing import TypeVar

from specfrontier.load.client import StreamingClient
from specfrontier.load.closed_loop import run_closed_loop
from specfrontier.load.health import ClientHealth, HealthMonitor
from specfrontier.records import Prompt, RequestRecord, Sampling

T = TypeVar("T")


async def monitored(client: StreamingClient, load: Awaitable[T]) -> tuple[T, ClientHealth]:
    """Await `load` (driving `client` in this process) with a health monitor running beside it."""
    reads, events = client.reads, client.events
    async with HealthMonitor() as monitor:
        result = await load
    health = monitor.result(reads=client.reads - reads, events=client.events - events)
    return result, ClientHealth.of([health])


async def measure_closed_loop(
    client: StreamingClient,
    prompts: Sequence[Prompt],
    sampling: Sampling,
    *,
    concurrency: int,
    num_requests: int,
) -> tuple[list[RequestRecord], ClientHealth]:
    """One closed-loop window with its client health."""
    return await monitored(
        client, run_closed_loop(client, prompts, sampling, concurrency=concurrency, num_requests=num_requests)
    )


__all__ = ["measure_closed_loop", "monitored"]
