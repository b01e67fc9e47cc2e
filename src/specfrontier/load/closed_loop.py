"""Closed-loop load: keep exactly `concurrency` requests in flight until `num_requests` were sent.

Closed loop (a fixed number of users, each sending its next request as soon as the previous one ends)
is the load model in which "concurrency" means what the speculative-decoding trade-off depends on: the
batch the server runs. Warmup is the caller's job: call `run_closed_loop` once and discard the records,
then call it again for the measured window.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence

from specfrontier.load.client import StreamingClient, stall_guard
from specfrontier.records import Prompt, RequestRecord, Sampling


def check_pool(client: StreamingClient, streams: int) -> None:
    """Refuse a load the client's connection pool would silently cap (requests would queue in aiohttp
    instead of in the server, and the measured concurrency would not be the one reported)."""
    cap = client.pool_limit()
    if cap is not None and cap < streams:
        raise ValueError(
            f"concurrency = {streams}: the client's connection pool allows only {cap} connections; "
            "fix: give the session aiohttp.TCPConnector(limit=0, limit_per_host=0) or let StreamingClient create it"
        )


def more_to_send(index: int, num_requests: int, pass_size: int, deadline: float | None) -> bool:
    """Whether request `index` is sent: always below `num_requests`; past it only while `deadline`
    (time.monotonic, the same clock in every process) has not come, and then up to the end of the pass
    over the prompts it started, so every prompt is sent equally often."""
    if index < num_requests:
        return True
    if deadline is None:
        return False
    return index % pass_size != 0 or time.monotonic() < deadline


async def run_closed_loop(
    client: StreamingClient,
    prompts: Sequence[Prompt],
    sampling: Sampling,
    *,
    concurrency: int,
    num_requests: int,
    min_duration_s: float | None = None,
) -> list[RequestRecord]:
    """Send `num_requests` requests with `concurrency` workers; return the records in send order.

    Request i uses `prompts[i % len(prompts)]`. A worker takes the next index the moment its previous
    request ends, so exactly `concurrency` requests are in flight until the last one has been sent,
    after which the remaining ones drain. With `min_duration_s`, sending goes on in whole passes over the
    prompts until that much time has passed since the first send (`more_to_send`), so a cell at high
    concurrency gets a steady state of that length without a huge request count. `client.send` never
    raises for server-side failures; if it raises anyway (a bug), the other workers are cancelled and
    the exception propagates.
    """
    if concurrency < 1:
        raise ValueError(f"concurrency must be >= 1, got {concurrency}")
    if num_requests < 0:
        raise ValueError(f"num_requests must be >= 0, got {num_requests}")
    if not prompts:
        raise ValueError("prompts must not be empty")
    check_pool(client, min(concurrency, num_requests))
    records: dict[int, RequestRecord] = {}
    next_index = 0
    deadline = time.monotonic() + min_duration_s if min_duration_s else None

    async def worker() -> None:
        nonlocal next_index
        while more_to_send(next_index, num_requests, len(prompts), deadline):
            # No await between reading and bumping the index: workers share it without a lock.
            index = next_index
            next_index += 1
            records[index] = await client.send(prompts[index % len(prompts)], sampling)
            # Yield once before the next send: streams whose reads arrived in the same event-loop turn
            # (all of them, when a server ends C requests in one decode step) are then stamped before
            # this worker spends its time sending, instead of after it. The next send is stamped when
            # it is made, so this delays nothing that is measured.
            await asyncio.sleep(0)

    with stall_guard():
        async with asyncio.TaskGroup() as group:
            for _ in range(min(concurrency, num_requests)):
                group.create_task(worker())
    assert sorted(records) == list(range(next_index)), "every index is taken by exactly one worker"
    return [records[i] for i in range(next_index)]


def requests_per_cell(rounds: int, concurrency: int, prompts: int) -> int:
    """At least rounds x concurrency requests, rounded up to whole passes over the prompt set."""
    passes = -(-rounds * concurrency // prompts)
    return passes * prompts


__all__ = ["check_pool", "more_to_send", "requests_per_cell", "run_closed_loop"]
