"""Open-loop schedule (rate, burstiness, determinism), the measured window, and sending on time over HTTP."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import numpy as np
import pytest
from aiohttp import web

from builders import chat_app, one_token_reply, serving
from specfrontier.load.client import StreamingClient
from specfrontier.load.open_loop import (
    OpenLoopResult,
    arrival_offsets,
    measured_indices,
    measured_span_rate,
    run_open_loop,
)
from specfrontier.records import Prompt, RequestRecord, Sampling

PROMPTS = [Prompt(prompt_id="p0", category="qa", api="chat", max_tokens=4, messages=(("user", "q"),))]


def _gaps(offsets: tuple[float, ...]) -> np.ndarray:
    return np.diff(np.asarray(offsets))


def test_mean_rate_matches_the_target() -> None:
    offsets = arrival_offsets(20.0, requests=20_000, seed=1)
    assert offsets[0] == 0.0
    assert len(offsets) == 20_000
    assert 1.0 / _gaps(offsets).mean() == pytest.approx(20.0, rel=0.03)


def test_burstiness_sets_the_coefficient_of_variation() -> None:
    # Gamma gaps with shape k have CV = 1/sqrt(k): 1 for Poisson, 2 for k = 0.25, 0.5 for k = 4.
    for k, cv in ((1.0, 1.0), (0.25, 2.0), (4.0, 0.5)):
        gaps = _gaps(arrival_offsets(10.0, burstiness=k, requests=20_000, seed=2))
        assert gaps.std() / gaps.mean() == pytest.approx(cv, rel=0.06), k
        assert 1.0 / gaps.mean() == pytest.approx(10.0, rel=0.05), k


def test_schedule_is_deterministic_per_seed() -> None:
    a = arrival_offsets(5.0, requests=50, seed=7)
    assert a == arrival_offsets(5.0, requests=50, seed=7)
    assert a != arrival_offsets(5.0, requests=50, seed=8)
    d = arrival_offsets(5.0, duration_s=30.0, seed=7)
    assert d == arrival_offsets(5.0, duration_s=30.0, seed=7)
    assert max(d) < 30.0 and d == tuple(sorted(d))
    assert len(d) == pytest.approx(150, rel=0.25)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"requests": 3, "duration_s": 1.0}, "exactly one"),
        ({}, "exactly one"),
        ({"requests": 3, "burstiness": 0.0}, "burstiness"),
    ],
)
def test_schedule_rejects_bad_arguments(kwargs: dict[str, float], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        arrival_offsets(1.0, **kwargs)  # type: ignore[arg-type]


def test_warmup_and_cooldown_are_sent_but_not_measured() -> None:
    offsets = (0.0, 0.5, 1.0, 2.0, 5.0, 8.9, 9.0, 9.5)
    # span 10 s, warmup 1 s, cooldown 1 s: measured = scheduled in [1, 9].
    assert measured_indices(offsets, span_s=10.0, warmup_s=1.0, cooldown_s=1.0) == [2, 3, 4, 5, 6]
    assert measured_indices(offsets, span_s=10.0) == list(range(8))


class Delayed:
    """Answers every request after `hold_s`, so requests overlap: an open loop must not wait for them."""

    def __init__(self, hold_s: float) -> None:
        self.hold_s = hold_s
        self.in_flight = 0
        self.max_in_flight = 0

    async def handle(self, request: web.Request) -> web.StreamResponse:
        await request.read()
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        await asyncio.sleep(self.hold_s)
        self.in_flight -= 1
        return await one_token_reply(request)


async def _serve(handler: Delayed) -> AsyncIterator[str]:
    async with serving(chat_app(handler.handle)) as url:
        yield url.rstrip("/")


async def test_open_loop_sends_on_schedule_regardless_of_completions() -> None:
    handler = Delayed(hold_s=0.5)
    offsets = arrival_offsets(40.0, requests=60, seed=3)
    async for url in _serve(handler):
        async with StreamingClient(url) as client:
            result = await run_open_loop(client, PROMPTS, Sampling(), offsets=offsets)
    assert len(result.records) == 60 and all(r.ok for r in result.records)
    target = (len(offsets) - 1) / offsets[-1]
    achieved = result.achieved_rate()
    assert achieved is not None and achieved == pytest.approx(target, rel=0.1)
    # Each request is held 0.5 s at ~40 req/s: about 20 overlap; a closed loop of 1 would show 1.
    assert handler.max_in_flight >= 8
    assert result.cap_waits == 0
    lags = result.send_lag_ms()
    assert min(lags) >= 0.0


async def test_in_flight_cap_is_kept_and_reported() -> None:
    handler = Delayed(hold_s=0.3)
    offsets = arrival_offsets(50.0, requests=30, seed=4)
    async for url in _serve(handler):
        async with StreamingClient(url) as client:
            result = await run_open_loop(client, PROMPTS, Sampling(), offsets=offsets, max_in_flight=3)
    assert handler.max_in_flight <= 3
    assert result.cap_waits > 0
    assert max(result.send_lag_ms()) > 100.0  # the cap delayed sends well past their schedule


async def test_measured_cell_keeps_the_window_and_reports_the_schedule() -> None:
    from specfrontier.load.open_loop import OpenLoopSchedule, measure_schedule

    handler = Delayed(hold_s=0.05)
    async for url in _serve(handler):
        async with StreamingClient(url) as client:

            async def send(offsets: tuple[float, ...]) -> OpenLoopResult:
                return await run_open_loop(client, PROMPTS, Sampling(), offsets=offsets)

            schedule = OpenLoopSchedule(20.0, seed=9, duration_s=2.0, warmup_s=0.5, cooldown_s=0.5)
            records, facts = await measure_schedule(send, schedule, max_in_flight=None)
    offsets = arrival_offsets(20.0, duration_s=2.0, seed=9)
    expected = measured_indices(offsets, span_s=2.0, warmup_s=0.5, cooldown_s=0.5)
    assert facts["sent"] == len(offsets) and facts["measured"] == len(expected) == len(records)
    assert facts["achieved_rate"] == pytest.approx(facts["scheduled_rate"], rel=0.1)
    assert facts["cap_waits"] == 0 and facts["send_lag_p99_ms"] >= 0.0


def test_the_rate_counts_every_token_inside_the_measured_part_of_the_schedule() -> None:
    """Ten requests scheduled 1 s apart, each decoding 20 tokens evenly over 2 s (10 tok/s), so 2 are
    always decoding (20 tok/s). Measured: those scheduled at 2..7 s. The span rate counts every
    request's tokens inside 2..7 s (warm-up and cool-down ones too) and is the truth, 20 tok/s; the
    measured requests' own window (2 s to the last end at 9 s) would give 120 / 7 = 17.1 tok/s."""
    s = 1_000_000_000
    records = tuple(
        RequestRecord(prompt_id=f"r{i}", send_ns=i * s, first_token_ns=i * s, end_ns=(i + 2) * s, completion_tokens=20)
        for i in range(10)
    )
    result = OpenLoopResult(records, tuple(i * s for i in range(10)), cap_waits=0, max_in_flight=None)
    rate = measured_span_rate(result, [2, 3, 4, 5, 6, 7])
    assert rate == (pytest.approx(20.0), pytest.approx(5.0))
    assert measured_span_rate(result, [4]) is None  # one measured request: no span
