"""No connection-pool limit silently caps concurrency: C > 100 streams are all open at once.

aiohttp's default connector allows 100 connections; a client built on it would queue request 101 in
the client, and the server would see (and the report would claim) a concurrency it never ran.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import aiohttp
import pytest

from builders import CountingServer, counting_server
from specfrontier.load.client import StreamingClient
from specfrontier.load.closed_loop import run_closed_loop
from specfrontier.load.open_loop import run_open_loop
from specfrontier.load.workers import measure_closed_loop
from specfrontier.records import Prompt, Sampling

STREAMS = 150
PROMPTS = [Prompt(prompt_id="p", category="qa", api="chat", max_tokens=4, messages=(("user", "q"),))]


@pytest.fixture
async def holding() -> AsyncIterator[CountingServer]:
    """Holds every stream until STREAMS are open at once (or 30 s pass: a capped client never gets there,
    and the test fails fast), tracking the peak."""
    async with counting_server(gate_at=STREAMS, gate_timeout_s=30.0) as state:
        yield state


async def test_more_than_100_streams_are_all_in_flight_at_once(holding: CountingServer) -> None:
    async with StreamingClient(holding.url) as client:
        records, health = await measure_closed_loop(
            client, PROMPTS, Sampling(), concurrency=STREAMS, num_requests=STREAMS
        )
    assert holding.peak == STREAMS
    assert all(r.ok for r in records) and len(records) == STREAMS
    assert health.events == 2 * STREAMS  # content and usage per stream ([DONE] ends it), counted by the client
    assert health.reads >= STREAMS and health.workers == 1
    assert health.loops == ("asyncio",)  # in this process: the caller's loop


async def test_an_injected_session_with_a_capped_pool_is_refused_with_the_fix(holding: CountingServer) -> None:
    async with aiohttp.ClientSession() as session:  # aiohttp's default connector: limit=100
        client = StreamingClient(holding.url, session=session)
        client._get_session()
        assert client.pool_limit() == 100
        with pytest.raises(ValueError, match=r"concurrency = 150: .* only 100 connections; fix: .*limit=0"):
            await run_closed_loop(client, PROMPTS, Sampling(), concurrency=STREAMS, num_requests=STREAMS)
        with pytest.raises(ValueError, match=r"max_in_flight = None: .* only 100 connections, .*fix:"):
            await run_open_loop(client, PROMPTS, Sampling(), offsets=[0.0])
    assert holding.peak == 0  # refused before anything was sent


async def test_our_own_session_has_no_pool_cap(holding: CountingServer) -> None:
    async with StreamingClient(holding.url) as client:
        client._get_session()
        assert client.pool_limit() is None
