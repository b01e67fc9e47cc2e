"""Session replay: N concurrent multi-turn conversations, each turn sent when the previous one ended.

Agentic coding sessions grow their context turn by turn (tool calls, file reads, code edits), and the
acceptance of speculative decoding changes along the way. A closed loop over independent prompts would
send turn 5 of a session before turn 4 finished; here each of `concurrency` workers takes the next whole
session and sends its turns in order, so `concurrency` is the number of sessions in flight. The context
of every turn is the recorded conversation (`workloads.resolve`), not the model's own earlier replies,
so every setting sees exactly the same inputs and its outputs stay comparable.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from specfrontier.load.client import StreamingClient, stall_guard
from specfrontier.load.closed_loop import check_pool
from specfrontier.records import Prompt, RequestRecord, Sampling


async def run_sessions(
    client: StreamingClient,
    sessions: Sequence[Sequence[Prompt]],
    sampling: Sampling,
    *,
    concurrency: int,
    passes: int = 1,
) -> list[RequestRecord]:
    """Replay every session `passes` times with `concurrency` sessions in flight; records in session order."""
    if concurrency < 1:
        raise ValueError(f"concurrency must be >= 1, got {concurrency}")
    if not sessions or not all(sessions):
        raise ValueError("sessions must be non-empty lists of turns")
    total = len(sessions) * passes
    check_pool(client, min(concurrency, total))
    records: list[list[RequestRecord]] = [[] for _ in range(total)]
    next_index = 0

    async def worker() -> None:
        nonlocal next_index
        while next_index < total:
            index = next_index  # no await between reading and bumping: workers share it without a lock
            next_index += 1
            for turn in sessions[index % len(sessions)]:
                records[index].append(await client.send(turn, sampling))

    with stall_guard():
        async with asyncio.TaskGroup() as group:
            for _ in range(min(concurrency, total)):
                group.create_task(worker())
    return [r for session in records for r in session]


__all__ = ["run_sessions"]
