"""One cell, measured the same way for `tune` (a server it launched) and `bench` (a server it did not).

    counters before -> the window (closed loop, session replay, or open loop) -> timestamps in the
    server's time -> the server still alive? -> any request succeeded? -> counters after -> the
    acceptance of exactly that window

The caller says how counters are read (an adapter's `spec_counters`, or nothing), what the server's
time scale is (a simulator faster than real time), and how to tell that its server died during the
window (given how long to wait for an exit in progress: `EXIT_WAIT_S` when a request of the window lost
its connection); `MeasuredCell.store` writes the cell in one transaction and returns the event for progress.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, fields, replace
from typing import Any, Literal

from specfrontier.errors import EngineResponseError
from specfrontier.load import StreamingClient
from specfrontier.load.client import CONNECTION_ERROR_PREFIX
from specfrontier.load.closed_loop import requests_per_cell
from specfrontier.load.health import ClientHealth
from specfrontier.load.open_loop import OpenLoopSchedule
from specfrontier.load.sessions import run_sessions
from specfrontier.load.workers import (
    ClientWorkers,
    measure_closed_loop,
    measure_open_loop,
    monitored,
    resolve_open_workers,
    resolve_workers,
)
from specfrontier.metrics.counters import window_counters
from specfrontier.metrics.digest import try_digest
from specfrontier.metrics.window import CellMetrics, cell_metrics
from specfrontier.records import RequestRecord, SpecCounters
from specfrontier.store import Store
from specfrontier.units import ns_to_s
from specfrontier.workloads.resolve import ResolvedWorkload


@dataclass(frozen=True, slots=True)
class CellDone:
    setting: str
    concurrency: int
    repeat: int
    metrics: CellMetrics
    counters: SpecCounters | None
    request_rate: float | None = None
    """Open loop: the cell's target rate (req/s); `concurrency` is then the in-flight cap (0: none)."""
    workload: str = ""
    """The cell's workload key."""


@dataclass(frozen=True, slots=True)
class CellLoad:
    """How every cell of a run applies load: closed loop (C users, at least `rounds_per_cell` x C requests
    in whole passes over the prompts) or open loop (a seeded arrival schedule at a rate, see
    `load.open_loop`). Built from a tune config's `load:` block or from bench's options."""

    mode: Literal["closed", "open"]
    rounds_per_cell: int
    client_workers: ClientWorkers
    open_loop: OpenLoopSchedule
    """Open loop: the arrival schedule every cell follows, each at its own rate (`schedule`); its `rate`
    here is a placeholder."""
    max_in_flight: int | None = None
    cell_duration_s: float | None = None
    """Closed loop: the shortest window (server seconds); sending goes on in whole passes until then."""
    sized_by: str | None = None
    """Closed loop: why the cell sends that long, in words (`runs.pacing.CellSize`); stored with the cell
    beside `send_s` (its load facts) so the report can say how long each cell ran and why."""

    @classmethod
    def of(
        cls,
        mode: Literal["closed", "open"],
        rounds_per_cell: int,
        client_workers: ClientWorkers,
        open_loop: Any,
        cell_duration_s: float | None = None,
    ) -> CellLoad:
        """From anything that carries `OpenLoopSchedule`'s fields (but the rate) and `max_in_flight` by
        these names (a tune config's `load:` block, bench's options)."""
        shape = {f.name: getattr(open_loop, f.name) for f in fields(OpenLoopSchedule) if f.name != "rate"}
        schedule = OpenLoopSchedule(0.0, **shape)
        return cls(mode, rounds_per_cell, client_workers, schedule, open_loop.max_in_flight, cell_duration_s)

    def schedule(self, rate: float) -> OpenLoopSchedule:
        """The open-loop schedule of the cell at `rate` req/s."""
        return replace(self.open_loop, rate=rate)


CounterReader = Callable[[], Awaitable[SpecCounters | None]]
"""Reads the server's cumulative speculative counters now (None: it has none)."""

ServerCheck = Callable[[str, float], Awaitable[None]]
"""`check(where, wait_s)` raises when the server exited during the window `where`, waiting up to `wait_s`
for an exit in progress (0: look once)."""

EXIT_WAIT_S = 5.0
"""How long to wait for the server to be reaped after a window in which a request lost its connection.
A crashing server's sockets close (reset, refused) a moment before its exit can be seen; waiting for it
is bounded so that a server that only dropped a connection and lives on costs at most this once per cell."""


@dataclass(frozen=True, slots=True)
class MeasuredCell:
    """One measured window, ready to store: its records, window counters and how the load was kept."""

    concurrency: int
    """C users (closed loop), or the open loop's in-flight cap (0: none)."""
    rate: float | None
    records: list[RequestRecord]
    counters: SpecCounters | None
    acceptance_source: str | None
    load_facts: dict[str, Any] | None
    health: ClientHealth

    def store(self, store: Store, run_id: str, setting: str, workload: str, repeat: int) -> CellDone:
        """Record the cell (one transaction) and return what progress displays show of it (its figures,
        computed once for both)."""
        level = self.concurrency if self.rate is None else None
        digest = try_digest(self.records, level)
        store.record_cell(
            run_id,
            setting_id=setting,
            workload=workload,
            concurrency=self.concurrency,
            repeat=repeat,
            requests=self.records,
            counters=self.counters,
            acceptance_source=self.acceptance_source,
            request_rate=self.rate,
            load=self.load_facts,
            client_health=self.health.to_json(),
            digest=digest,
        )
        metrics = digest.metrics if digest is not None else cell_metrics(self.records, level)
        return CellDone(
            setting, self.concurrency, repeat, metrics, self.counters, request_rate=self.rate, workload=workload
        )


async def measure_cell(
    client: StreamingClient,
    workload: ResolvedWorkload,
    level: float,
    load: CellLoad,
    *,
    read_counters: CounterReader,
    counters_source: str,
    time_scale: float = 1.0,
    server_died: ServerCheck | None = None,
) -> MeasuredCell:
    """One cell at `level` (C, or the rate in req/s of an open loop). `server_died(where, wait_s)` raises
    when the server exited during the window: such a window is not a measurement of its setting."""
    before = await read_counters()
    prompts = list(workload.prompts)
    rate: float | None = None
    facts: dict[str, Any] | None = None
    if load.mode == "open":
        rate, concurrency = float(level), load.max_in_flight or 0
        records, facts, health = await measure_open_loop(
            client,
            prompts,
            workload.sampling,
            load.schedule(rate),
            max_in_flight=load.max_in_flight,
            workers=resolve_open_workers(
                load.client_workers,
                rate=rate,
                max_tokens=max(p.max_tokens for p in prompts),
                max_in_flight=load.max_in_flight,
            ),
        )
    else:
        concurrency = int(level)
        if workload.sessions:  # agentic replay: C sessions in flight, each turn after the previous one
            passes = -(-load.rounds_per_cell * concurrency // len(workload.sessions))
            records, health = await monitored(
                client,
                run_sessions(client, workload.sessions, workload.sampling, concurrency=concurrency, passes=passes),
            )
        else:
            if load.sized_by is not None:
                facts = {"send_s": load.cell_duration_s, "sized_by": load.sized_by}
            records, health = await measure_closed_loop(
                client,
                prompts,
                workload.sampling,
                concurrency=concurrency,
                num_requests=requests_per_cell(load.rounds_per_cell, concurrency, len(prompts)),
                workers=resolve_workers(load.client_workers, streams=concurrency),
                min_duration_s=load.cell_duration_s / time_scale if load.cell_duration_s else None,
            )
    records = to_server_time(records, time_scale)
    if rate is None and facts is not None and records:  # how long the closed loop ran: its window, server time
        facts["window_s"] = ns_to_s(max(r.end_ns for r in records) - min(r.send_ns for r in records))
    if facts is not None and time_scale != 1.0 and facts.get("measured_span_tok_s") is not None:
        facts |= {  # into the server's seconds, like the records
            "measured_span_tok_s": facts["measured_span_tok_s"] / time_scale,
            "measured_span_s": facts["measured_span_s"] * time_scale,
        }
    where = f"rate={rate} req/s" if rate is not None else f"C={concurrency}"
    if server_died is not None:
        await server_died(where, EXIT_WAIT_S if lost_connection(records) else 0.0)
    require_evidence(records, f"the cell {where} of {workload.key}")
    after = await read_counters()
    counters, source = window_counters(before, after, records, counters_source)
    return MeasuredCell(concurrency, rate, records, counters, source, facts, health)


def lost_connection(records: Sequence[RequestRecord]) -> bool:
    """Whether a request of the window failed at the connection (refused, reset, closed mid-stream): the
    way a server that is crashing fails its clients, before its exit can be seen."""
    return any(r.error is not None and r.error.startswith(CONNECTION_ERROR_PREFIX) for r in records)


def require_evidence(records: Sequence[RequestRecord], where: str) -> None:
    """Raise EngineResponseError when every request of a window failed: such a window measures the
    failure, not the setting, so it is not stored and the setting is recorded as failed."""
    if not records or any(r.ok for r in records):
        return
    first = next((r.error for r in records if r.error), "unknown error")
    raise EngineResponseError(
        f"every request of {where} failed ({len(records)} of {len(records)}; first: {first[:200]}); "
        "nothing of it is stored; fix: see the server log"
    )


def to_server_time(records: list[RequestRecord], time_scale: float) -> list[RequestRecord]:
    """Stretch a window's client timestamps by the server's time scale (a simulator serving 10x faster
    than real time), so every stored figure is in simulated seconds. 1.0 leaves records untouched."""
    if time_scale == 1.0 or not records:
        return records
    origin = min(r.send_ns for r in records)

    def t(ns: int) -> int:
        return origin + round((ns - origin) * time_scale)

    return [
        replace(
            r,
            send_ns=t(r.send_ns),
            end_ns=t(r.end_ns),
            first_token_ns=None if r.first_token_ns is None else t(r.first_token_ns),
            chunk_ns=tuple(t(c) for c in r.chunk_ns),
        )
        for r in records
    ]


__all__ = [
    "EXIT_WAIT_S",
    "CellDone",
    "CellLoad",
    "CounterReader",
    "MeasuredCell",
    "ServerCheck",
    "lost_connection",
    "measure_cell",
    "require_evidence",
    "to_server_time",
]
