"""Client worker processes: the split, the merge, the shared clock, auto sizing and failures."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Mapping
from typing import Any

import pytest

from builders import CountingServer, counting_server
from specfrontier.load.client import StreamingClient
from specfrontier.load.open_loop import OpenLoopSchedule
from specfrontier.load.workers import (
    WORKER_EVENTS_S,
    WORKER_STREAMS,
    WorkerError,
    auto_workers,
    measure_closed_loop,
    measure_open_loop,
    resolve_workers,
    split_evenly,
)
from specfrontier.records import Prompt, RequestSpecStats, Sampling

PROMPTS = [
    Prompt(prompt_id=f"p{i}", category="qa", api="chat", max_tokens=4, messages=(("user", f"q{i}"),)) for i in range(3)
]


@pytest.fixture
async def server() -> AsyncIterator[CountingServer]:
    async with counting_server() as state:
        yield state


async def test_closed_loop_over_two_workers_keeps_c_in_flight_and_merges_in_order(server: CountingServer) -> None:
    server.gate_at = 6
    t0 = time.perf_counter_ns()
    async with StreamingClient(server.url) as client:
        records, health = await measure_closed_loop(
            client, PROMPTS, Sampling(), concurrency=6, num_requests=12, workers=2
        )
    t1 = time.perf_counter_ns()
    assert server.peak == 6 and server.served == 12
    assert [r.prompt_id for r in records] == [f"p{i % 3}" for i in range(12)]  # request i uses prompt i mod n
    assert all(r.ok for r in records)
    # perf_counter_ns is CLOCK_MONOTONIC, one clock for every process: the workers' times fall inside
    # the parent's window and need no conversion.
    assert all(t0 <= r.send_ns <= r.end_ns <= t1 for r in records)
    assert health.workers == 2 and len(health.cpu_fraction) == 2
    assert health.loops == ("uvloop", "uvloop")  # workers run nothing but the client, on uvloop
    assert health.events == 24  # content + usage per request, summed over both workers
    assert health.lag_samples > 0


async def test_open_loop_over_two_workers_sends_on_the_shared_schedule(
    server: CountingServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    server.hold_s = 0.05
    monkeypatch.setenv("SPECFRONTIER_WORKER_LOOP", "asyncio")  # the A/B switch: the standard loop
    async with StreamingClient(server.url) as client:
        records, facts, health = await measure_open_loop(
            client, PROMPTS, Sampling(), OpenLoopSchedule(40.0, requests=10), max_in_flight=4, workers=2
        )
    assert server.served == 10 and len(records) == 10 and all(r.ok for r in records)
    assert [r.prompt_id for r in records] == [f"p{i % 3}" for i in range(10)]
    assert facts["sent"] == 10 and facts["client_workers"] == 2 and facts["max_in_flight"] == 4
    assert facts["send_lag_p50_ms"] >= 0.0  # nobody sends before its scheduled time, on either worker
    assert server.peak <= 4  # the cap, split 2 + 2 over the workers
    assert health.workers == 2 and health.loops == ("asyncio", "asyncio")


def _broken_extractor(chunk: Mapping[str, Any]) -> RequestSpecStats | None:
    raise RuntimeError("extractor bug")


async def test_a_failing_worker_raises_with_its_traceback(server: CountingServer) -> None:
    server.hold_s = 0.0
    async with StreamingClient(server.url, spec_stats_extractor=_broken_extractor) as client:
        with pytest.raises(WorkerError, match=r"client worker \d/2 failed:(.|\n)*extractor bug"):
            await measure_closed_loop(client, PROMPTS, Sampling(), concurrency=2, num_requests=2, workers=2)


def test_auto_workers_follows_the_per_process_budget() -> None:
    assert auto_workers(100.0, streams=1, cpus=16) == 1
    assert auto_workers(WORKER_EVENTS_S * 3, streams=10, cpus=16) == 3
    assert auto_workers(10.0, streams=WORKER_STREAMS * 2 + 1, cpus=16) == 3
    assert auto_workers(WORKER_EVENTS_S * 8, streams=256, cpus=2) == 2  # never more than the CPUs
    # closed loop: C streams x 100 events/s each; 16 streams fit one process, 64 need two
    assert resolve_workers("auto", streams=16) == 1
    assert resolve_workers("auto", streams=4) == 1
    assert resolve_workers(4, streams=2) == 2  # never an idle worker
    assert resolve_workers(3, streams=64) == 3


def test_split_evenly() -> None:
    assert split_evenly(7, 3) == [3, 2, 2]
    assert split_evenly(4, 2) == [2, 2]
    assert sum(split_evenly(257, 4)) == 257


async def test_worker_count_must_be_positive(server: CountingServer) -> None:
    async with StreamingClient(server.url) as client:
        with pytest.raises(ValueError, match="workers must be >= 1"):
            await measure_closed_loop(client, PROMPTS, Sampling(), concurrency=2, num_requests=2, workers=0)
