"""StreamingClient against a real aiohttp server on 127.0.0.1 that streams OpenAI-style chunks."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any

import pytest
from aiohttp import web

from builders import chat_app, serving
from specfrontier.load.client import StreamingClient, build_request_body
from specfrontier.records import Prompt, RequestRecord, RequestSpecStats, Sampling

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
MakeServer = Callable[[Handler], Awaitable[str]]
SendOne = Callable[..., Awaitable[RequestRecord]]

CHAT = Prompt(prompt_id="p-chat", category="qa", api="chat", max_tokens=16, messages=(("user", "hi"),))
COMPLETION = Prompt(prompt_id="p-code", category="code", api="completion", max_tokens=8, text="def f(")
GREEDY = Sampling()
MS = 1_000_000


@pytest.fixture
async def make_server() -> AsyncIterator[MakeServer]:
    """Start one server per handler on 127.0.0.1, port 0; all are closed after the test."""
    async with contextlib.AsyncExitStack() as servers:

        async def start(handler: Handler) -> str:
            app = chat_app(handler)
            app.router.add_post("/v1/completions", handler)
            return await servers.enter_async_context(serving(app))

        yield start


@pytest.fixture
def send_one(make_server: MakeServer) -> SendOne:
    """Serve `handler`, send one prompt (CHAT unless named) through a new client (`options`: StreamingClient's)
    with greedy sampling, and return its record."""

    async def send(handler: Handler, prompt: Prompt = CHAT, **options: Any) -> RequestRecord:
        url = await make_server(handler)
        async with StreamingClient(url, **options) as client:
            return await client.send(prompt, GREEDY)

    return send


def sse(obj: Mapping[str, Any] | str) -> bytes:
    data = obj if isinstance(obj, str) else json.dumps(obj)
    return f"data: {data}\n\n".encode()


def chat_chunk(content: str | None = None, finish: str | None = None, **extra: Any) -> dict[str, Any]:
    delta = {} if content is None else {"content": content}
    return {"choices": [{"index": 0, "delta": delta, "finish_reason": finish}], **extra}


def usage(prompt: int, completion: int) -> dict[str, int]:
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


async def stream(request: web.Request, parts: list[bytes | float]) -> web.StreamResponse:
    """Send each bytes part as one write; a float part is a pause in seconds."""
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await resp.prepare(request)
    for part in parts:
        if isinstance(part, float):
            await asyncio.sleep(part)
        else:
            await resp.write(part)
    await resp.write_eof()
    return resp


async def test_chat_stream_timestamps_usage_and_body(make_server: MakeServer) -> None:
    bodies: list[dict[str, Any]] = []

    async def handler(request: web.Request) -> web.StreamResponse:
        bodies.append(await request.json())
        return await stream(
            request,
            [
                sse({"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}),
                0.2,  # time to first token
                sse(chat_chunk("Hel")),
                0.05,
                b": keep-alive\n\n" + sse(chat_chunk("lo")),
                0.05,
                sse(chat_chunk(" world")),
                sse(chat_chunk(finish="stop")),
                sse({"choices": [], "usage": usage(5, 4)}),
                sse("[DONE]"),
            ],
        )

    url = await make_server(handler)
    sampling = Sampling(temperature=0.5, seed=7)
    async with StreamingClient(url, model="m", timeout_s=10) as client:
        rec = await client.send(CHAT, sampling)

    assert rec.error is None, rec.error
    assert rec.prompt_id == "p-chat"
    assert rec.output_text == "Hello world"
    assert rec.finish_reason == "stop"
    assert (rec.prompt_tokens, rec.completion_tokens) == (5, 4)  # from usage, not the 3 chunks
    assert rec.chunk_tokens is None  # this server reports no per-chunk counts
    assert rec.spec is None
    assert len(rec.chunk_ns) == 3  # the empty role chunk and the finish chunk carry no text
    assert rec.first_token_ns == rec.chunk_ns[0]
    assert rec.send_ns < rec.chunk_ns[0] < rec.chunk_ns[1] < rec.chunk_ns[2] <= rec.end_ns
    ttft_ms = (rec.chunk_ns[0] - rec.send_ns) / MS
    assert 195 <= ttft_ms < 600
    assert (rec.chunk_ns[1] - rec.chunk_ns[0]) / MS >= 45
    assert bodies == [
        {
            "stream": True,
            "stream_options": {"include_usage": True},
            "max_tokens": 16,
            "temperature": 0.5,
            "model": "m",
            "messages": [{"role": "user", "content": "hi"}],
            "seed": 7,
        }
    ]


async def test_multi_token_chunks_take_usage_from_server(send_one: SendOne) -> None:
    """Three chunks of 3 tokens each: completion_tokens must be 9, never the chunk count 3."""

    async def handler(request: web.Request) -> web.StreamResponse:
        # vLLM continuous_usage_stats style: cumulative usage on every chunk.
        return await stream(
            request,
            [
                sse(chat_chunk("a b c", usage=usage(5, 3))),
                0.02,
                sse(chat_chunk(" d e f", usage=usage(5, 6))),
                0.02,
                sse(chat_chunk(" g h i", finish="length", usage=usage(5, 9))),
                sse({"choices": [], "usage": usage(5, 9)}),
                sse("[DONE]"),
            ],
        )

    rec = await send_one(handler)
    assert rec.error is None
    assert rec.completion_tokens == 9
    assert len(rec.chunk_ns) == 3
    assert rec.chunk_tokens == (3, 3, 3)
    assert rec.finish_reason == "length"


async def test_llama_cpp_final_chunk_usage_timings_and_spec(send_one: SendOne) -> None:
    """llama.cpp: per-token timings (predicted_n), usage and spec counts in a final `choices: []` chunk."""

    async def handler(request: web.Request) -> web.StreamResponse:
        timings = {"predicted_n": 9, "draft_n": 12, "draft_n_accepted": 6}
        return await stream(
            request,
            [
                sse({"choices": [{"index": 0, "text": "x = 1"}], "timings": {"predicted_n": 4}}),
                sse(
                    {
                        "choices": [{"index": 0, "text": "\n", "finish_reason": "stop"}],
                        "timings": {"predicted_n": 9},
                    }
                ),
                sse({"choices": [], "usage": usage(3, 9), "timings": timings}),
                sse("[DONE]"),
            ],
        )

    def extractor(chunk: Mapping[str, Any]) -> RequestSpecStats | None:
        t = chunk.get("timings") or {}
        if "draft_n" not in t:
            return None
        return RequestSpecStats(draft_tokens=t["draft_n"], accepted_tokens=t["draft_n_accepted"])

    rec = await send_one(handler, COMPLETION, spec_stats_extractor=extractor)
    assert rec.error is None
    assert rec.output_text == "x = 1\n"
    assert rec.chunk_tokens == (4, 5)
    assert rec.completion_tokens == 9
    assert rec.spec == RequestSpecStats(draft_tokens=12, accepted_tokens=6)


async def test_events_of_one_read_share_one_timestamp(send_one: SendOne) -> None:
    async def handler(request: web.Request) -> web.StreamResponse:
        both = sse(chat_chunk("one")) + sse(chat_chunk(" two"))
        return await stream(
            request,
            [both, 0.2, sse(chat_chunk(finish="stop", usage=usage(1, 2))), sse("[DONE]")],
        )

    rec = await send_one(handler)
    assert rec.error is None
    assert rec.chunk_ns[0] == rec.chunk_ns[1]  # one write -> one read -> one clock reading
    # The end comes from a later read, the pause after the first; on a loaded machine the first read
    # itself can be late by a few tens of ms (seen: 7 ms under 4 busy processes on 2 cores).
    assert rec.end_ns - rec.chunk_ns[1] >= 150 * MS


async def test_reasoning_content_counts_for_ttft_not_for_text(send_one: SendOne) -> None:
    async def handler(request: web.Request) -> web.StreamResponse:
        think = {"choices": [{"index": 0, "delta": {"reasoning_content": "hmm"}}]}
        return await stream(
            request,
            [
                sse(think),
                0.05,
                sse(chat_chunk("ok", finish="stop")),
                sse({"choices": [], "usage": usage(1, 2)}),
                sse("[DONE]"),
            ],
        )

    rec = await send_one(handler)
    assert rec.error is None
    assert rec.output_text == "ok"
    assert len(rec.chunk_ns) == 2
    assert rec.first_token_ns == rec.chunk_ns[0]  # the reasoning chunk, 50 ms before the content
    assert rec.chunk_ns[1] - rec.chunk_ns[0] >= 45 * MS


async def test_http_500_is_recorded_with_truncated_body(send_one: SendOne) -> None:
    async def handler(request: web.Request) -> web.StreamResponse:
        return web.json_response({"error": {"message": "boom " + "x" * 1000}}, status=500)

    rec = await send_one(handler)
    assert rec.error is not None
    assert rec.error.startswith('http 500: {"error": {"message": "boom xxx')
    assert len(rec.error) == len("http 500: ") + 300
    assert rec.first_token_ns is None
    assert rec.send_ns < rec.end_ns


async def test_malformed_json_is_recorded(send_one: SendOne) -> None:
    async def handler(request: web.Request) -> web.StreamResponse:
        return await stream(request, [sse(chat_chunk("a")), b"data: {not json\n\n", sse("[DONE]")])

    rec = await send_one(handler)
    assert rec.error == "malformed SSE data: '{not json'"
    assert rec.output_text == "a"  # what arrived before the failure is kept
    assert rec.end_ns >= rec.chunk_ns[0]


async def test_error_object_in_stream_is_recorded(send_one: SendOne) -> None:
    async def handler(request: web.Request) -> web.StreamResponse:
        return await stream(request, [b'error: {"code": 400, "message": "context full"}\n\n'])

    rec = await send_one(handler)
    assert rec.error == 'server error event: {"code": 400, "message": "context full"}'


async def test_stream_that_ends_early_is_recorded(send_one: SendOne) -> None:
    async def handler(request: web.Request) -> web.StreamResponse:
        return await stream(request, [sse(chat_chunk("a")), sse(chat_chunk("b")), b'data: {"cho'])

    rec = await send_one(handler)
    assert rec.error == "stream ended without [DONE] (an unterminated event was discarded)"
    assert rec.output_text == "ab"
    assert rec.completion_tokens is None
    assert rec.chunk_ns[1] <= rec.end_ns


async def test_connection_dropped_mid_stream_is_recorded(send_one: SendOne) -> None:
    async def handler(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await resp.write(sse(chat_chunk("a")))
        await asyncio.sleep(0.05)
        assert request.transport is not None
        request.transport.close()  # chunked body never terminated
        return resp

    rec = await send_one(handler)
    assert rec.error is not None
    assert rec.error.startswith("connection error: ClientPayloadError"), rec.error
    assert rec.output_text == "a"


async def test_stream_without_usage_is_recorded(send_one: SendOne) -> None:
    async def handler(request: web.Request) -> web.StreamResponse:
        return await stream(request, [sse(chat_chunk("a", finish="stop")), sse("[DONE]")])

    rec = await send_one(handler)
    assert rec.error is not None and rec.error.startswith("stream ended without usage"), rec.error
    assert rec.finish_reason == "stop"


async def test_stream_without_usage_counts_chunks_when_asked(make_server: MakeServer) -> None:
    """`bench` against a server that ignores include_usage: one token per content chunk, not a failure."""

    async def handler(request: web.Request) -> web.StreamResponse:
        chunks = [sse(chat_chunk("a")), sse(chat_chunk("b")), sse(chat_chunk("c", finish="stop")), sse("[DONE]")]
        return await stream(request, chunks)

    url = await make_server(handler)
    async with StreamingClient(url, tokens_from_chunks=True) as client:
        rec = await client.send(CHAT, GREEDY)
    assert rec.error is None and rec.completion_tokens == 3 and rec.output_text == "abc"
    assert client.chunk_counted == 1


async def test_stream_without_finish_reason_is_recorded(send_one: SendOne) -> None:
    async def handler(request: web.Request) -> web.StreamResponse:
        return await stream(request, [sse(chat_chunk("a")), sse({"choices": [], "usage": usage(1, 1)}), sse("[DONE]")])

    rec = await send_one(handler)
    assert rec.error == "stream ended without finish_reason"


async def test_slow_server_hits_the_timeout(send_one: SendOne) -> None:
    async def handler(request: web.Request) -> web.StreamResponse:
        return await stream(request, [sse(chat_chunk("a")), 5.0, sse("[DONE]")])

    rec = await send_one(handler, timeout_s=0.3)
    assert rec.error == "timeout after 0.3 s"
    assert rec.first_token_ns is not None  # the first chunk came before the deadline
    elapsed_ms = (rec.end_ns - rec.send_ns) / MS
    assert 290 <= elapsed_ms < 1000


async def test_connection_refused_is_recorded() -> None:
    with socket.socket() as sock:  # find a port with nothing listening
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    async with StreamingClient(f"http://127.0.0.1:{port}", timeout_s=5) as client:
        started = time.perf_counter_ns()
        rec = await client.send(CHAT, GREEDY)
    assert rec.error is not None
    assert rec.error.startswith("connection error: ClientConnectorError"), rec.error
    assert started <= rec.send_ns <= rec.end_ns


async def test_concurrent_requests_share_one_session(make_server: MakeServer) -> None:
    in_flight = 0
    peak = 0
    all_arrived = asyncio.Event()

    async def handler(request: web.Request) -> web.StreamResponse:
        nonlocal in_flight, peak
        in_flight += 1
        peak = max(peak, in_flight)
        if in_flight == 20:
            all_arrived.set()
        # each request waits until all 20 are open at once (a pool limit would keep this from happening)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(all_arrived.wait(), timeout=10)
        in_flight -= 1
        return await stream(request, [sse(chat_chunk("a", finish="stop", usage=usage(1, 1))), sse("[DONE]")])

    url = await make_server(handler)
    async with StreamingClient(url) as client:
        records = await asyncio.gather(*(client.send(CHAT, GREEDY) for _ in range(20)))
    assert all(r.ok for r in records)
    # Counted at the server, not timed: a busy host cannot fail it, a pool limit below 20 would.
    assert peak == 20


async def test_send_after_close_is_a_programming_error() -> None:
    client = StreamingClient("http://127.0.0.1:1")
    await client.aclose()
    with pytest.raises(RuntimeError):
        await client.send(CHAT, GREEDY)


def test_body_for_completion_with_all_options() -> None:
    body = build_request_body(COMPLETION, Sampling(temperature=0.0, top_p=0.9, ignore_eos=True, seed=1), None)
    assert body == {
        "stream": True,
        "stream_options": {"include_usage": True},
        "max_tokens": 8,
        "temperature": 0.0,
        "prompt": "def f(",
        "top_p": 0.9,
        "seed": 1,
        "ignore_eos": True,
    }


async def _answer_then_close(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *, think_s: float = 0.0
) -> None:
    """Serve one streamed response the way llama-server does: advertise keep-alive, then close the socket
    after the stream without reading the client's next request."""
    head = await reader.readuntil(b"\r\n\r\n")
    length = next(int(h.split(b":")[1]) for h in head.split(b"\r\n") if h.lower().startswith(b"content-length"))
    await reader.readexactly(length)
    await asyncio.sleep(think_s)
    body = sse(chat_chunk("hi")) + sse(chat_chunk(None, "stop")) + sse({"choices": [], "usage": usage(3, 1)})
    body += sse("[DONE]")
    writer.write(
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n"
        b"Keep-Alive: timeout=5, max=100\r\n\r\n" + f"{len(body):x}\r\n".encode() + body + b"\r\n0\r\n\r\n"
    )
    await writer.drain()
    await asyncio.sleep(0.25)  # the client has reused the socket and sent its next request by now
    writer.close()  # unread: that request never reaches the server


async def test_server_that_drops_keepalive_connections_after_a_stream() -> None:
    """llama-server advertises keep-alive but closes the socket after a streamed response; a pooled
    client would reuse the dead socket and fail every second request. Each request must succeed."""
    server = await asyncio.start_server(_answer_then_close, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        async with StreamingClient(f"http://127.0.0.1:{port}", timeout_s=5) as client:
            assert client.keep_alive
            records = []
            for _ in range(8):
                records.append(await client.send(CHAT, GREEDY))  # back to back, as in a closed loop
            # Each dead socket was met once and the request sent again; after 3 the client stopped reusing.
            assert client.stale_retries == 3
            assert not client.keep_alive
    finally:
        await asyncio.sleep(0.35)  # let the last handler close its socket
        server.close()
        await server.wait_closed()
    assert [r.error for r in records] == [None] * 8
    assert [r.completion_tokens for r in records] == [1] * 8


def _peer_counting_handler(peers: list[object]) -> Handler:
    async def handler(request: web.Request) -> web.StreamResponse:
        peers.append(request.transport.get_extra_info("peername") if request.transport else None)
        return await stream(
            request, [sse(chat_chunk("a")), sse(chat_chunk(None, "stop", usage=usage(2, 1))), sse("[DONE]")]
        )

    return handler


async def test_keep_alive_reuses_one_connection_for_sequential_requests(make_server: MakeServer) -> None:
    peers: list[object] = []
    url = await make_server(_peer_counting_handler(peers))
    async with StreamingClient(url) as client:
        records = [await client.send(CHAT, GREEDY) for _ in range(5)]
    assert all(r.ok for r in records)
    assert len(peers) == 5 and len(set(peers)) == 1  # one client port: the connection was reused
    assert client.stale_retries == 0


async def test_without_keep_alive_every_request_opens_its_own_connection(make_server: MakeServer) -> None:
    peers: list[object] = []
    url = await make_server(_peer_counting_handler(peers))
    async with StreamingClient(url, keep_alive=False) as client:
        records = [await client.send(CHAT, GREEDY) for _ in range(5)]
    assert all(r.ok for r in records)
    assert len(set(peers)) == 5


async def test_a_retried_request_is_timed_from_its_second_send() -> None:
    """The first attempt meets a socket the server closed; the record's send stamp is the retry's, so the
    failed attempt is not charged to TTFT (the server answers the retry only after 0.2 s)."""
    answered = 0

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal answered
        answered += 1  # the stale attempt is never read, so the second connection is the resend
        await _answer_then_close(reader, writer, think_s=0.2 if answered == 2 else 0.0)

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        async with StreamingClient(f"http://127.0.0.1:{port}", timeout_s=5) as client:
            first = await client.send(CHAT, GREEDY)
            before_second = time.perf_counter_ns()
            second = await client.send(CHAT, GREEDY)
    finally:
        await asyncio.sleep(0.35)  # let the last handler close its socket
        server.close()
        await server.wait_closed()
    assert first.ok and second.ok
    assert client.stale_retries == 1
    assert second.send_ns >= before_second
    assert second.first_token_ns is not None
    assert 190 <= (second.first_token_ns - second.send_ns) / MS < 1000


async def test_a_refused_connection_is_not_sent_again() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    async with StreamingClient(f"http://127.0.0.1:{port}", timeout_s=5) as client:
        rec = await client.send(CHAT, GREEDY)
    assert rec.error is not None and "ClientConnectorError" in rec.error
    assert client.stale_retries == 0 and client.keep_alive


async def test_keep_alive_off_with_an_injected_session_is_refused() -> None:
    import aiohttp

    async with aiohttp.ClientSession() as session:
        with pytest.raises(ValueError, match="keep_alive=False"):
            StreamingClient("http://127.0.0.1:1", session=session, keep_alive=False)


async def test_extra_body_fields_are_sent_with_every_request(send_one: SendOne) -> None:
    bodies: list[dict[str, Any]] = []

    async def handler(request: web.Request) -> web.StreamResponse:
        bodies.append(await request.json())
        return await stream(
            request, [sse(chat_chunk("a")), sse(chat_chunk(None, "stop", usage=usage(2, 1))), sse("[DONE]")]
        )

    record = await send_one(handler, extra_body={"cache_prompt": False})
    assert record.error is None
    assert bodies[0]["cache_prompt"] is False
    assert bodies[0]["messages"] == [{"role": "user", "content": "hi"}]


async def test_consecutive_timeouts_raise_engine_stalled_and_a_success_resets_the_count(
    make_server: MakeServer,
) -> None:
    """A server that stopped answering costs `max_consecutive_timeouts` timeouts, not one per request left."""
    from specfrontier.errors import EngineStalled

    answer = {"stall": True}

    async def handler(request: web.Request) -> web.StreamResponse:
        if answer["stall"]:
            return await stream(request, [5.0])
        return await stream(request, [sse(chat_chunk("a", finish="stop", usage=usage(3, 1))), sse("[DONE]")])

    url = await make_server(handler)
    async with StreamingClient(url, timeout_s=0.2, max_consecutive_timeouts=2) as client:
        first = await client.send(CHAT, GREEDY)
        assert first.error == "timeout after 0.2 s" and client.consecutive_timeouts == 1
        answer["stall"] = False
        assert (await client.send(CHAT, GREEDY)).ok and client.consecutive_timeouts == 0
        answer["stall"] = True
        await client.send(CHAT, GREEDY)
        with pytest.raises(EngineStalled, match=r"2 requests in a row timed out after 0\.2 s each"):
            await client.send(CHAT, GREEDY)


async def test_a_stall_inside_the_closed_loop_surfaces_as_engine_stalled(make_server: MakeServer) -> None:
    """The task group wraps the error; `stall_guard` lifts it out, so the sweep can catch it by type."""
    from specfrontier.errors import EngineStalled
    from specfrontier.load.closed_loop import run_closed_loop

    async def handler(request: web.Request) -> web.StreamResponse:
        return await stream(request, [5.0])

    url = await make_server(handler)
    async with StreamingClient(url, timeout_s=0.2, max_consecutive_timeouts=3) as client:
        with pytest.raises(EngineStalled):
            await run_closed_loop(client, [CHAT], GREEDY, concurrency=4, num_requests=40)
