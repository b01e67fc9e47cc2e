"""Run a cell's load with its client health measured: in this process, or split over worker processes.

Why workers: one asyncio process spends tens of microseconds of CPU per streamed event, and every
decode step of the server makes C events arrive together, so the last of them is read about
C x cost later than the first (the workloads reference, part B). Past roughly 32-64 streams or
5-10k events/s per process that lag reaches milliseconds and distorts TTFT and ITL. Splitting the
streams over N processes divides the burst each event loop has to drain.

How: N processes are started with multiprocessing's `spawn` (a fresh interpreter: no forked aiohttp
or event-loop state), each builds the same `StreamingClient` from a picklable `ClientSpec`, reports
ready, and starts only when every worker is ready, so the load does not ramp up worker by worker.
- Closed loop: worker k runs its share of the C streams (C split as evenly as possible); request
  indices come from one shared counter, so exactly C requests are in flight until N were sent and
  request i uses prompt i mod n, as in one process.
- Open loop: request i goes to worker i mod N with its absolute scheduled send time; an in-flight cap
  is split evenly over the workers (each holds its share, so the cap can be hit slightly earlier than
  with one process; every wait is counted as always).
Records come back pickled with their indices and are merged in index order. Their timestamps need no
conversion: `time.perf_counter_ns()` is CLOCK_MONOTONIC on Linux, one system-wide clock (time since
boot), not a per-process one, so a worker's `send_ns` and the parent's readings are on the same axis
(tests/unit/load/test_workers.py checks that the workers' times fall inside the parent's window).
Each worker measures its own health (lag, CPU); the cell's `ClientHealth` pools them.

`auto` picks N from a per-process budget (see `auto_workers`).
"""

from __future__ import annotations

import asyncio
import math
import multiprocessing
import os
import time
import traceback
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from multiprocessing.sharedctypes import Synchronized
from typing import Any, Literal, TypeVar

from specfrontier.errors import EngineStalled
from specfrontier.load.client import StreamingClient, stall_guard
from specfrontier.load.closed_loop import more_to_send, run_closed_loop
from specfrontier.load.health import ClientHealth, HealthMonitor, WorkerHealth
from specfrontier.load.open_loop import (
    OpenLoopResult,
    OpenLoopSchedule,
    measure_schedule,
    run_open_loop,
    send_on_schedule,
)
from specfrontier.process.parent_death import die_with_parent
from specfrontier.records import Prompt, RequestRecord, Sampling, SpecStatsExtractor
from specfrontier.units import NS_PER_MS, s_to_ns

T = TypeVar("T")

WORKER_STREAMS = 64
"""Per-process budget of concurrent streams (part B: about 32-64 streams per process)."""
WORKER_EVENTS_S = 5000.0
"""Per-process budget of SSE events per second (part B: about 5-10k events/s per process)."""
STREAM_EVENTS_S = 100.0
"""Events/s one stream is expected to carry when choosing `auto`: a 100 tok/s stream (a fast GPU
server's decode) with one token per chunk. Slower servers or multi-token chunks carry fewer."""
_START_LEAD_NS = 50 * NS_PER_MS
"""Open loop: the schedule starts this long after `go` is sent, so every worker has it in time."""

ClientWorkers = int | Literal["auto"]


def available_cpus() -> int:
    """CPUs this process may run on (affinity mask), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


def auto_workers(events_s: float, *, streams: int = 0, cpus: int | None = None) -> int:
    """Worker processes so that none exceeds `WORKER_STREAMS` streams or `WORKER_EVENTS_S` events/s,
    but never more than the CPUs available (more processes than cores only add contention)."""
    need = max(1, math.ceil(streams / WORKER_STREAMS), math.ceil(events_s / WORKER_EVENTS_S))
    return min(need, cpus if cpus is not None else available_cpus())


def resolve_workers(setting: ClientWorkers, *, streams: int, events_s: float | None = None) -> int:
    """The worker count for one cell: the configured number (never more than the streams, so no worker
    is idle), or `auto` for `streams` streams carrying `events_s` events/s (default streams x
    `STREAM_EVENTS_S`)."""
    if setting == "auto":
        expected = streams * STREAM_EVENTS_S if events_s is None else events_s
        return max(1, min(auto_workers(expected, streams=streams), max(streams, 1)))
    return max(1, min(setting, max(streams, 1)))


def resolve_open_workers(
    setting: ClientWorkers, *, rate: float, max_tokens: int, max_in_flight: int | None = None
) -> int:
    """The worker count for an open-loop cell: `auto` expects rate x max_tokens events/s (one token
    per chunk, the worst case) over at most `max_in_flight` streams."""
    if setting == "auto":
        return auto_workers(rate * max_tokens, streams=max_in_flight or 0)
    return setting


@dataclass(frozen=True, slots=True)
class ClientSpec:
    """What a worker needs to build the same client (picklable: the extractor must be a module-level
    function or a bound method of a picklable object, as the engine adapters are)."""

    base_url: str
    model: str | None
    timeout_s: float
    spec_stats_extractor: SpecStatsExtractor | None
    extra_body: dict[str, Any] = field(default_factory=dict)
    keep_alive: bool = True
    max_consecutive_timeouts: int | None = None
    tokens_from_chunks: bool = False

    @classmethod
    def of(cls, client: StreamingClient) -> ClientSpec:
        return cls(
            client.base_url,
            client.model,
            client.timeout_s,
            client.spec_stats_extractor,
            client.extra_body,
            client.keep_alive,
            client.max_consecutive_timeouts,
            client.tokens_from_chunks,
        )

    def build(self) -> StreamingClient:
        return StreamingClient(
            self.base_url,
            model=self.model,
            timeout_s=self.timeout_s,
            spec_stats_extractor=self.spec_stats_extractor,
            extra_body=self.extra_body,
            keep_alive=self.keep_alive,
            max_consecutive_timeouts=self.max_consecutive_timeouts,
            tokens_from_chunks=self.tokens_from_chunks,
        )


@dataclass(frozen=True, slots=True)
class _ClosedJob:
    prompts: tuple[Prompt, ...]
    sampling: Sampling
    streams: int
    num_requests: int
    deadline: float | None = None
    """time.monotonic() until which sending goes on past num_requests (`closed_loop.more_to_send`)."""


@dataclass(frozen=True, slots=True)
class _OpenJob:
    prompts: tuple[Prompt, ...]
    sampling: Sampling
    indices: tuple[int, ...]
    scheduled_ns: tuple[int, ...]
    max_in_flight: int | None


@dataclass(frozen=True, slots=True)
class _WorkerResult:
    records: tuple[tuple[int, RequestRecord], ...]
    cap_waits: int
    health: WorkerHealth


def split_evenly(total: int, parts: int) -> list[int]:
    """`total` split into `parts` integers differing by at most one (larger first)."""
    base, extra = divmod(total, parts)
    return [base + (1 if k < extra else 0) for k in range(parts)]


# -- in this process ------------------------------------------------------------------------------


async def monitored(client: StreamingClient, load: Awaitable[T]) -> tuple[T, ClientHealth]:
    """Await `load` (driving `client` in this process) with a health monitor running beside it."""
    reads, events = client.reads, client.events
    async with HealthMonitor() as monitor:
        result = await load
    health = monitor.result(reads=client.reads - reads, events=client.events - events)
    return result, ClientHealth.of([health])


# -- in a worker process ---------------------------------------------------------------------------


async def _run_closed_job(
    client: StreamingClient, job: _ClosedJob, counter: Synchronized[int]
) -> list[tuple[int, RequestRecord]]:
    out: list[tuple[int, RequestRecord]] = []

    async def stream() -> None:
        while True:
            with counter.get_lock():  # held for microseconds: taking an index never waits on the network
                index = int(counter.value)
                if not more_to_send(index, job.num_requests, len(job.prompts), job.deadline):
                    return
                counter.value = index + 1
            out.append((index, await client.send(job.prompts[index % len(job.prompts)], job.sampling)))

    with stall_guard():
        async with asyncio.TaskGroup() as group:
            for _ in range(job.streams):
                group.create_task(stream())
    return out


async def _run_open_job(client: StreamingClient, job: _OpenJob) -> tuple[list[tuple[int, RequestRecord]], int]:
    due = zip(job.indices, job.scheduled_ns, strict=True)
    return await send_on_schedule(client, job.prompts, job.sampling, due, job.max_in_flight)


async def _run_job(spec: ClientSpec, job: _ClosedJob | _OpenJob, counter: Synchronized[int]) -> _WorkerResult:
    async with spec.build() as client:
        cap_waits = 0
        async with HealthMonitor() as monitor:
            if isinstance(job, _ClosedJob):
                records = await _run_closed_job(client, job, counter)
            else:
                records, cap_waits = await _run_open_job(client, job)
        health = monitor.result(reads=client.reads, events=client.events)
    return _WorkerResult(tuple(records), cap_waits, health)


def worker_loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop for worker processes (None: the standard asyncio loop).

    Why: uvloop drains a burst of streamed events with less CPU per event; on the 2-core development
    box (the workloads reference, part B) aiohttp's lag at 64 streams of 100 tok/s fell from p50 2.4 /
    p99 9 ms to 1.0 / 5 ms, and at 256 streams from 17 / 84 ms to 3.3 / 19 ms. It is used only in worker
    processes, which run nothing but the client. `SPECFRONTIER_WORKER_LOOP=asyncio` forces the standard
    loop (for A/B measurements, e.g. benchmarks/client_workers.py)."""
    if os.environ.get("SPECFRONTIER_WORKER_LOOP", "uvloop") == "asyncio":
        return None
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a pinned dependency; a stripped install still works
        return None
    return uvloop.new_event_loop


def _worker_main(spec: ClientSpec, counter: Synchronized[int], conn: Connection) -> None:
    """Entry point of a worker process: ready -> (go, job) -> run -> result, or the traceback."""
    # a worker whose parent was killed must not keep loading the server; the signal follows the thread that
    # started the worker, and `_run_in_workers` joins its workers before that thread returns
    die_with_parent()
    try:
        conn.send(("ready", None))
        message, job = conn.recv()
        if message != "go":
            return
        with asyncio.Runner(loop_factory=worker_loop_factory()) as runner:
            result = runner.run(_run_job(spec, job, counter))
        conn.send(("done", result))
    except EOFError:  # the parent gave up before `go`
        return
    except EngineStalled as exc:  # the server stopped answering: the parent abandons the setting
        conn.send(("stalled", str(exc)))
    except BaseException:
        conn.send(("error", traceback.format_exc()))
    finally:
        conn.close()


# -- the parent ---------------------------------------------------------------------------------


class WorkerError(RuntimeError):
    """A client worker process failed (a bug, not a server failure: those are recorded per request)."""


def _run_in_workers(
    spec: ClientSpec, n: int, make_jobs: Any, counter: Synchronized[int] | None = None
) -> list[_WorkerResult]:
    """Blocking: start `n` workers, wait until all are ready, send each its job, collect the results.

    `make_jobs()` is called once every worker is ready (so an open-loop schedule starts after the
    slowest interpreter start-up, not during it)."""
    ctx = multiprocessing.get_context("spawn")
    shared = counter if counter is not None else ctx.Value("q", 0)
    procs: list[Any] = []
    conns: list[Connection] = []
    try:
        for _ in range(n):
            parent_end, child_end = ctx.Pipe()
            proc = ctx.Process(target=_worker_main, args=(spec, shared, child_end), daemon=True)
            proc.start()
            child_end.close()
            procs.append(proc)
            conns.append(parent_end)
        for k, conn in enumerate(conns):
            _expect(conn, "ready", k, n)
        jobs = make_jobs()
        for conn, job in zip(conns, jobs, strict=True):
            conn.send(("go", job))
        results = []
        for k, conn in enumerate(conns):
            payload = _expect(conn, "done", k, n)
            assert isinstance(payload, _WorkerResult)
            results.append(payload)
        return results
    finally:
        for conn in conns:
            conn.close()
        for proc in procs:
            proc.join(timeout=10)
            if proc.is_alive():  # only on an error path: stop it by its own pid
                proc.terminate()
                proc.join(timeout=5)


def _expect(conn: Connection, want: str, k: int, n: int) -> Any:
    try:
        message, payload = conn.recv()
    except EOFError as exc:
        raise WorkerError(f"client worker {k + 1}/{n} exited without a result") from exc
    if message == "error":
        raise WorkerError(f"client worker {k + 1}/{n} failed:\n{payload}")
    if message == "stalled":
        raise EngineStalled(str(payload))
    if message != want:
        raise WorkerError(f"client worker {k + 1}/{n}: expected {want!r}, got {message!r}")
    return payload


def _merge(results: Sequence[_WorkerResult], expected: int) -> list[RequestRecord]:
    pairs = sorted((pair for r in results for pair in r.records), key=lambda pair: pair[0])
    if [i for i, _ in pairs] != list(range(expected)):
        raise WorkerError(f"client workers returned {len(pairs)} records for {expected} requests")
    return [record for _, record in pairs]


async def measure_closed_loop(
    client: StreamingClient,
    prompts: Sequence[Prompt],
    sampling: Sampling,
    *,
    concurrency: int,
    num_requests: int,
    workers: int = 1,
    min_duration_s: float | None = None,
) -> tuple[list[RequestRecord], ClientHealth]:
    """One closed-loop window with its client health: in this process (`workers` 1) or split over
    `workers` processes (C streams split evenly; records in request order, as from one process).
    `min_duration_s`: keep sending whole passes until that long after the start (`run_closed_loop`)."""
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    workers = min(workers, max(1, min(concurrency, num_requests)))
    if workers == 1:
        load = run_closed_loop(
            client, prompts, sampling, concurrency=concurrency, num_requests=num_requests, min_duration_s=min_duration_s
        )
        return await monitored(client, load)
    if concurrency < 1 or not prompts:
        raise ValueError("concurrency must be >= 1 and prompts must not be empty")
    spec = ClientSpec.of(client)  # each worker builds its own session, without a pool cap
    shares = split_evenly(concurrency, workers)

    def jobs() -> list[_ClosedJob]:
        # Built when the workers are ready to start, so the deadline counts from the first send.
        deadline = time.monotonic() + min_duration_s if min_duration_s else None
        return [_ClosedJob(tuple(prompts), sampling, share, num_requests, deadline) for share in shares]

    results = await asyncio.to_thread(_run_in_workers, spec, workers, jobs)
    sent = sum(len(r.records) for r in results)
    return _merge(results, max(sent, num_requests)), ClientHealth.of([r.health for r in results])


async def measure_open_loop(
    client: StreamingClient,
    prompts: Sequence[Prompt],
    sampling: Sampling,
    schedule: OpenLoopSchedule,
    *,
    max_in_flight: int | None = None,
    workers: int = 1,
) -> tuple[list[RequestRecord], dict[str, Any], ClientHealth]:
    """One open-loop cell (the schedule, the measured requests and the facts: `load.open_loop.measure_schedule`)
    with its client health, in this process or with request i sent by worker i mod `workers`; the stored facts
    add `client_workers`."""
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    if workers == 1:

        async def send_here(offsets: tuple[float, ...]) -> OpenLoopResult:
            return await run_open_loop(client, prompts, sampling, offsets=offsets, max_in_flight=max_in_flight)

        (records, facts), health = await monitored(client, measure_schedule(send_here, schedule, max_in_flight))
        return records, {**facts, "client_workers": 1}, health
    if not prompts:
        raise ValueError("prompts must not be empty")
    spec = ClientSpec.of(client)
    results: list[_WorkerResult] = []
    used = workers

    async def send(offsets: tuple[float, ...]) -> OpenLoopResult:
        nonlocal used
        used = min(workers, len(offsets))
        caps = split_evenly(max_in_flight, used) if max_in_flight is not None else [None] * used
        if any(c == 0 for c in caps):
            raise ValueError(
                f"max_in_flight = {max_in_flight}: fewer than the {used} client workers; "
                "fix: raise max_in_flight or lower client_workers"
            )
        scheduled: list[int] = []

        def jobs() -> list[_OpenJob]:
            start_ns = time.perf_counter_ns() + _START_LEAD_NS
            scheduled.extend(start_ns + s_to_ns(t) for t in offsets)
            return [
                _OpenJob(
                    tuple(prompts),
                    sampling,
                    tuple(range(k, len(offsets), used)),
                    tuple(scheduled[k::used]),
                    caps[k],
                )
                for k in range(used)
            ]

        results.extend(await asyncio.to_thread(_run_in_workers, spec, used, jobs))
        return OpenLoopResult(
            tuple(_merge(results, len(offsets))), tuple(scheduled), sum(r.cap_waits for r in results), max_in_flight
        )

    records, facts = await measure_schedule(send, schedule, max_in_flight)
    return records, {**facts, "client_workers": used}, ClientHealth.of([r.health for r in results])


__all__ = [
    "STREAM_EVENTS_S",
    "WORKER_EVENTS_S",
    "WORKER_STREAMS",
    "ClientSpec",
    "ClientWorkers",
    "WorkerError",
    "auto_workers",
    "available_cpus",
    "measure_closed_loop",
    "measure_open_loop",
    "monitored",
    "resolve_open_workers",
    "resolve_workers",
    "split_evenly",
    "worker_loop_factory",
]
