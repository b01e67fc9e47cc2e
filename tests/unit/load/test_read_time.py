"""Timestamps are taken when a network read returns, before any parsing: a slow parse of one event is
never charged to the events after it in the same read."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Mapping
from typing import Any

import pytest
from aiohttp import web

from builders import chat_app, serving
from specfrontier.load.client import StreamingClient
from specfrontier.records import Prompt, RequestSpecStats, Sampling

MS = 1_000_000
PROMPT = Prompt(prompt_id="p", category="qa", api="chat", max_tokens=4, messages=(("user", "q"),))


def _event(content: str | None, **extra: Any) -> bytes:
    delta = {} if content is None else {"content": content}
    finish = None if content is not None else "stop"
    body = {"choices": [{"index": 0, "delta": delta, "finish_reason": finish}], **extra}
    return f"data: {json.dumps(body)}\n\n".encode()


async def _handler(request: web.Request) -> web.StreamResponse:
    await request.read()
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await resp.prepare(request)
    # Both content events in one write (one read at the client), then the end.
    await resp.write(_event("slow") + _event(" fast"))
    await resp.write(_event(None, usage={"prompt_tokens": 1, "completion_tokens": 2}) + b"data: [DONE]\n\n")
    await resp.write_eof()
    return resp


@pytest.fixture
async def url() -> AsyncIterator[str]:
    async with serving(chat_app(_handler)) as root:
        yield root


async def test_a_slow_parse_is_not_charged_to_later_events_of_the_same_read(url: str) -> None:
    parse_started: list[int] = []

    def slow_extractor(chunk: Mapping[str, Any]) -> RequestSpecStats | None:
        parse_started.append(time.perf_counter_ns())
        if len(parse_started) == 1:
            time.sleep(0.03)  # 30 ms of "parsing" on the first event
        return None

    async with StreamingClient(url, spec_stats_extractor=slow_extractor) as client:
        record = await client.send(PROMPT, Sampling())
    assert record.ok
    assert record.chunk_ns[0] <= parse_started[0]  # stamped before parsing began
    assert record.chunk_ns[1] == record.chunk_ns[0]  # the second event is not 30 ms late
    assert parse_started[1] - parse_started[0] >= 30 * MS  # the parse really was slow
    assert client.reads >= 1 and client.events == 3  # two content events + the usage event
