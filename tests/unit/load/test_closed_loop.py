"""run_closed_loop keeps exactly C requests in flight, proven by a server that holds each request."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

import pytest
from aiohttp import web

from builders import chat_app, one_token_reply, serving
from specfrontier.load.client import StreamingClient
from specfrontier.load.closed_loop import run_closed_loop
from specfrontier.records import Prompt, RequestRecord, Sampling

PROMPTS = [
    Prompt(prompt_id=f"p{i}", category="qa", api="chat", max_tokens=4, messages=(("user", f"q{i}"),)) for i in range(3)
]


@dataclass
class GatedServer:
    """Holds request k until `release(k)`; records what was in flight when each request arrived."""

    url: str = ""
    arrivals: list[str] = field(default_factory=list)
    in_flight_at_arrival: list[int] = field(default_factory=list)
    gates: list[asyncio.Event] = field(default_factory=list)
    in_flight: int = 0
    max_in_flight: int = 0
    hold: bool = True

    def release(self, k: int) -> None:
        self.gates[k].set()

    async def handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        gate = asyncio.Event()
        if not self.hold:
            gate.set()
        self.gates.append(gate)
        self.arrivals.append(body["messages"][0]["content"])
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        self.in_flight_at_arrival.append(self.in_flight)
        await gate.wait()
        # Leave the count before the last byte goes out: the client may send its next request
        # as soon as it reads [DONE].
        self.in_flight -= 1
        return await one_token_reply(request)


@pytest.fixture
async def gated() -> AsyncIterator[GatedServer]:
    state = GatedServer()
    async with serving(chat_app(state.handle)) as url:
        state.url = url
        yield state
        for gate in state.gates:  # never leave a handler waiting
            gate.set()


async def wait_until(condition: Callable[[], bool], timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(0.005)


async def test_exactly_c_in_flight_until_all_sent_then_drain(gated: GatedServer) -> None:
    concurrency, num_requests = 3, 7
    async with StreamingClient(gated.url, timeout_s=10) as client:
        task = asyncio.create_task(
            run_closed_loop(client, PROMPTS, Sampling(), concurrency=concurrency, num_requests=num_requests)
        )
        await wait_until(lambda: len(gated.arrivals) == concurrency)
        await asyncio.sleep(0.1)  # nobody else may start while C are held
        assert len(gated.arrivals) == concurrency
        assert gated.in_flight == concurrency

        # Steady state: each finished request is replaced by exactly one new one.
        for k in range(num_requests - concurrency):
            gated.release(k)
            expected = concurrency + k + 1
            await wait_until(lambda: len(gated.arrivals) >= expected)  # noqa: B023 (awaited at once)
            await asyncio.sleep(0.02)
            assert len(gated.arrivals) == expected
            assert gated.in_flight == concurrency
            assert gated.in_flight_at_arrival[-1] == concurrency

        # Drain: all sent; nothing new starts as the last C finish.
        for k in range(num_requests - concurrency, num_requests):
            gated.release(k)
        records = await asyncio.wait_for(task, 5)

    assert len(gated.arrivals) == num_requests
    assert gated.max_in_flight == concurrency
    assert gated.in_flight == 0
    assert all(r.ok for r in records)
    # Records come back in send order, request i using prompts[i % 3].
    assert [r.prompt_id for r in records] == ["p0", "p1", "p2", "p0", "p1", "p2", "p0"]
    # The first C may reach the server in any order; after that, one at a time and in order.
    assert sorted(gated.arrivals[:concurrency]) == ["q0", "q1", "q2"]
    assert gated.arrivals[concurrency:] == ["q0", "q1", "q2", "q0"]
    assert [r.send_ns for r in records[concurrency:]] == sorted(r.send_ns for r in records[concurrency:])


async def test_unheld_run_never_exceeds_c(gated: GatedServer) -> None:
    gated.hold = False
    async with StreamingClient(gated.url, timeout_s=10) as client:
        records = await run_closed_loop(client, PROMPTS, Sampling(), concurrency=4, num_requests=25)
    assert len(records) == 25
    assert len(gated.arrivals) == 25
    assert 1 <= gated.max_in_flight <= 4
    assert [r.prompt_id for r in records] == [PROMPTS[i % 3].prompt_id for i in range(25)]


async def test_fewer_requests_than_workers(gated: GatedServer) -> None:
    gated.hold = False
    async with StreamingClient(gated.url, timeout_s=10) as client:
        records = await run_closed_loop(client, PROMPTS, Sampling(), concurrency=8, num_requests=2)
        assert await run_closed_loop(client, PROMPTS, Sampling(), concurrency=8, num_requests=0) == []
    assert [r.prompt_id for r in records] == ["p0", "p1"]
    assert len(gated.arrivals) == 2


@pytest.mark.parametrize(
    ("concurrency", "num_requests", "prompts"),
    [(0, 1, PROMPTS), (1, -1, PROMPTS), (1, 1, [])],
)
async def test_invalid_arguments(concurrency: int, num_requests: int, prompts: list[Prompt]) -> None:
    client = StreamingClient("http://127.0.0.1:1")
    with pytest.raises(ValueError):
        await run_closed_loop(client, prompts, Sampling(), concurrency=concurrency, num_requests=num_requests)
    await client.aclose()


class _OrderClient:
    """Stands in for StreamingClient: every request ends when `finish` is set, and the client notes when a
    request's end is observed and when the next one is sent, in the order they happen."""

    def __init__(self) -> None:
        self.events: list[str] = []
        self.finish = asyncio.Event()

    def pool_limit(self) -> int | None:
        return None

    async def send(self, prompt: Prompt, sampling: Sampling) -> RequestRecord:
        self.events.append("send")
        await self.finish.wait()
        self.events.append("end")
        return RequestRecord(prompt_id=prompt.prompt_id, send_ns=0, end_ns=1, first_token_ns=None, error="stand-in")


async def test_streams_that_end_together_are_all_observed_before_any_next_send() -> None:
    """When a server ends C requests in one decode step, each stream's end must be stamped before any
    worker spends time sending its next request (else the later streams' stamps wait behind those sends)."""
    client = _OrderClient()
    prompt = Prompt(prompt_id="p", category="c", api="completion", max_tokens=1, text="x")
    run = asyncio.create_task(
        run_closed_loop(client, [prompt], Sampling(), concurrency=3, num_requests=6)  # type: ignore[arg-type]
    )
    await asyncio.sleep(0.01)
    client.finish.set()  # all three in-flight requests end in the same event-loop turn
    await run
    assert client.events[:7] == ["send"] * 3 + ["end"] * 3 + ["send"]


class _TimedClient:
    """Stands in for StreamingClient: every request takes `seconds` (no server)."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.sent = 0

    def pool_limit(self) -> int | None:
        return None

    async def send(self, prompt: Prompt, sampling: Sampling) -> RequestRecord:
        self.sent += 1
        start = time.perf_counter_ns()
        await asyncio.sleep(self.seconds)
        end = time.perf_counter_ns()
        return RequestRecord(prompt.prompt_id, start, end, end, completion_tokens=1)


async def test_a_minimum_duration_keeps_sending_whole_passes_until_it_has_passed() -> None:
    client = _TimedClient(0.02)
    started = time.monotonic()
    records = await run_closed_loop(
        client,  # type: ignore[arg-type]
        PROMPTS,
        Sampling(),
        concurrency=2,
        num_requests=3,
        min_duration_s=0.3,
    )
    elapsed = time.monotonic() - started
    assert elapsed >= 0.3  # sending went on past the 3 requests asked for
    assert len(records) > 3 and len(records) % len(PROMPTS) == 0  # whole passes: every prompt equally often
    assert [r.prompt_id for r in records] == [PROMPTS[i % 3].prompt_id for i in range(len(records))]
    assert len(records) <= 2 * (0.3 / 0.02) + 2 * len(PROMPTS)  # and it stopped: at most a pass per worker more


def test_more_to_send_finishes_the_pass_it_started() -> None:
    from specfrontier.load.closed_loop import more_to_send

    assert more_to_send(2, 3, 3, None) and not more_to_send(3, 3, 3, None)  # no deadline: exactly the count
    past = time.monotonic() - 1
    assert more_to_send(4, 3, 3, past) and more_to_send(5, 3, 3, past)  # a started pass is finished
    assert not more_to_send(6, 3, 3, past)
    assert more_to_send(6, 3, 3, time.monotonic() + 60)  # before the deadline: another pass
