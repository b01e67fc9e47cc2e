"""Client health: the lag ticker sees a blocked loop, CPU time is counted, and the saturation rule."""

from __future__ import annotations

import asyncio
import time

import pytest

from specfrontier.load.health import (
    CPU_LIMIT,
    LAG_P99_LIMIT_MS,
    ClientHealth,
    HealthMonitor,
    WorkerHealth,
    saturated,
)

MS = 1_000_000


async def test_a_blocked_event_loop_shows_up_as_lag_and_saturation() -> None:
    async with HealthMonitor(tick_s=0.005) as monitor:
        await asyncio.sleep(0.03)
        time.sleep(0.15)  # blocks the loop: the ticker cannot wake up for 150 ms
        await asyncio.sleep(0.03)
    raw = monitor.result()
    health = ClientHealth.of([raw])
    assert health.lag_max_ms is not None and health.lag_max_ms >= 100.0
    assert health.lag_samples == len(raw.lags_ns) >= 2
    assert health.saturated
    assert any("event-loop lag p99" in reason for reason in health.reasons)


async def test_cpu_time_of_the_window_is_measured() -> None:
    async with HealthMonitor() as monitor:
        start = time.process_time_ns()
        while time.process_time_ns() - start < 100 * MS:  # burn 100 ms of CPU, however long that takes
            pass
    raw = monitor.result()
    assert raw.cpu_ns >= 100 * MS
    assert raw.wall_ns >= raw.cpu_ns * 0.9  # one thread cannot use more CPU than wall time (±clock steps)
    assert raw.cpu_fraction > 0.0


def _worker(lag_ms: float, cpu: float, samples: int = 100) -> WorkerHealth:
    return WorkerHealth(
        wall_ns=1000 * MS, cpu_ns=round(cpu * 1000 * MS), lags_ns=(round(lag_ms * MS),) * samples, reads=10, events=30
    )


def test_a_healthy_client_is_not_saturated_and_reports_its_figures() -> None:
    health = ClientHealth.of([_worker(0.5, 0.3)])
    assert not health.saturated and health.reasons == ()
    assert health.lag_p50_ms == pytest.approx(0.5) and health.lag_p99_ms == pytest.approx(0.5)
    assert health.events_per_s == pytest.approx(30.0) and health.events_per_read == pytest.approx(3.0)
    stored = health.to_json()
    assert stored["saturated"] is False and stored["cpu_fraction"] == [pytest.approx(0.3)]
    assert stored["limits"] == {"lag_p99_ms": LAG_P99_LIMIT_MS, "cpu_fraction": CPU_LIMIT}
    assert not saturated(stored) and not saturated(None)


def test_client_cpu_near_a_full_core_is_saturation() -> None:
    health = ClientHealth.of([_worker(0.5, 0.95)])
    assert health.saturated
    assert health.reasons == ("client CPU 95% of a core > 90%",)
    assert saturated(health.to_json())


def test_one_lagging_worker_of_two_saturates_the_window_and_is_named() -> None:
    health = ClientHealth.of([_worker(0.5, 0.3), _worker(LAG_P99_LIMIT_MS * 2, 0.3)])
    assert health.workers == 2 and health.saturated
    assert health.reasons == (f"worker 2/2: event-loop lag p99 10.0 ms > {LAG_P99_LIMIT_MS:g} ms",)
    assert health.reads == 20 and health.events == 60
    assert health.worker_lag_p99_ms == (pytest.approx(0.5), pytest.approx(10.0))


def test_health_needs_a_worker_and_a_positive_tick() -> None:
    with pytest.raises(ValueError, match="at least one"):
        ClientHealth.of([])
    with pytest.raises(ValueError, match="tick_s"):
        HealthMonitor(tick_s=0)
