"""A deterministic-schedule OpenAI streaming server, so that a client's own lag can be measured.

Why: a real engine's token times are unknown to the client, so a client that adds 5 ms to every
token is indistinguishable from a slow server. This server emits every token at a time fixed in
advance (TTFT after the request arrived, then one chunk every ITL) and records, for every chunk, the
scheduled time and the instant just before it wrote the chunk to the socket. Client and server run on
one machine, so both read the same CLOCK_MONOTONIC (`perf_counter_ns`): a client's "added lag" is
exactly its receive stamp minus the server's send stamp. The server also records the wall clock
(`time_ns`) at each send, for clients that stamp with `time.time()` (GuideLLM).

Schedule (`--align`):
- `step` (default, like a continuously batching engine): chunks go out on a global grid of ITL-spaced
  decode steps; a request's first chunk goes out at the first step at least TTFT after it arrived, so
  every active stream gets its chunk in the same burst, the hardest pattern for a client.
- `request`: first chunk exactly TTFT after arrival, then every ITL; TTFT is then the same for every
  request, which makes medians directly comparable between tools.

Every chunk's text names its stream and index (`s17t3 `), so a tool that keeps the output text lets
the benchmark match its requests to the server's records. `usage` is sent when
`stream_options.include_usage` is set; exactly `max_tokens` tokens are generated (default 128).

Endpoints: POST /v1/completions, POST /v1/chat/completions, GET /v1/models, GET /health,
GET /fidelity/log (every finished stream's schedule; `?clear=1` forgets them), POST /fidelity/reset.
Binds 127.0.0.1 only; prints `READY port=N` once listening; exits on SIGTERM/SIGINT or after
`--max-lifetime-s`. Run: `python benchmarks/fidelity_server.py --port 0`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import signal
import time
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

MODEL_ID = "fidelity-schedule"


@dataclass(frozen=True, slots=True)
class Schedule:
    """How the server paces every stream."""

    ttft_ms: float = 50.0
    itl_ms: float = 10.0
    tokens_per_chunk: int = 1
    align: str = "step"
    default_max_tokens: int = 128

    def first_send_ns(self, arrival_ns: int, origin_ns: int) -> int:
        """When the first chunk of a request that arrived at `arrival_ns` is due."""
        due = arrival_ns + round(self.ttft_ms * 1e6)
        if self.align == "request":
            return due
        itl_ns = round(self.itl_ms * 1e6)
        steps = math.ceil((due - origin_ns) / itl_ns)
        return origin_ns + steps * itl_ns


@dataclass(slots=True)
class StreamLog:
    """One stream as the server served it (times are perf_counter_ns, wall times time_ns)."""

    sid: int
    api: str
    arrival_ns: int
    arrival_wall_ns: int
    max_tokens: int
    tokens_per_chunk: int
    sched_ns: list[int] = field(default_factory=list)
    sent_ns: list[int] = field(default_factory=list)
    sent_wall_ns: list[int] = field(default_factory=list)
    complete: bool = False

    def as_json(self) -> dict[str, Any]:
        return {
            "sid": self.sid,
            "api": self.api,
            "arrival_ns": self.arrival_ns,
            "arrival_wall_ns": self.arrival_wall_ns,
            "max_tokens": self.max_tokens,
            "tokens_per_chunk": self.tokens_per_chunk,
            "sched_ns": self.sched_ns,
            "sent_ns": self.sent_ns,
            "sent_wall_ns": self.sent_wall_ns,
            "complete": self.complete,
        }


def token_text(sid: int, index: int) -> str:
    """The text of token `index` of stream `sid`: it names both, so outputs can be matched to streams."""
    return f"s{sid}t{index} "


def _sse(payload: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(payload, separators=(",", ":")).encode() + b"\n\n"


def _chunk(api: str, sid: int, created: int, text: str, finish: str | None) -> dict[str, Any]:
    if api == "chat":
        delta = {"content": text} if text else {}
        return {
            "id": f"chatcmpl-{sid}",
            "object": "chat.completion.chunk",
            "created": created,
            "model": MODEL_ID,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }
    return {
        "id": f"cmpl-{sid}",
        "object": "text_completion",
        "created": created,
        "model": MODEL_ID,
        "choices": [{"index": 0, "text": text, "finish_reason": finish}],
    }


def _prompt_tokens(body: dict[str, Any]) -> int:
    """A deterministic stand-in for a tokenizer: whitespace words of the prompt or the messages."""
    if "messages" in body and isinstance(body["messages"], list):
        words = 0
        for message in body["messages"]:
            content = message.get("content") if isinstance(message, dict) else None
            if isinstance(content, str):
                words += len(content.split())
            elif isinstance(content, list):
                words += sum(len(str(part.get("text", "")).split()) for part in content if isinstance(part, dict))
        return words
    prompt = body.get("prompt")
    return len(prompt.split()) if isinstance(prompt, str) else 0


class FidelityServer:
    """The aiohttp application and the record of every stream it served."""

    def __init__(self, schedule: Schedule) -> None:
        self.schedule = schedule
        self.origin_ns = time.perf_counter_ns()
        self.next_sid = 0
        self.finished: list[StreamLog] = []
        self.active = 0

    def app(self) -> web.Application:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/v1/completions", self._completions)
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_get("/v1/models", self._models)
        app.router.add_get("/health", self._health)
        app.router.add_get("/fidelity/log", self._log)
        app.router.add_post("/fidelity/reset", self._reset)
        return app

    async def _models(self, _: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": MODEL_ID, "object": "model", "owned_by": "me"}]})

    async def _health(self, _: web.Request) -> web.Response:
        return web.json_response({"status": "ok", "active": self.active})

    async def _log(self, request: web.Request) -> web.Response:
        streams = [s.as_json() for s in self.finished]
        if request.query.get("clear") == "1":
            self.finished = []
        return web.json_response({"origin_ns": self.origin_ns, "streams": streams})

    async def _reset(self, _: web.Request) -> web.Response:
        self.finished = []
        return web.json_response({"ok": True})

    async def _completions(self, request: web.Request) -> web.StreamResponse:
        return await self._stream(request, "completion")

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        return await self._stream(request, "chat")

    async def _stream(self, request: web.Request, api: str) -> web.StreamResponse:
        arrival_ns = time.perf_counter_ns()
        arrival_wall_ns = time.time_ns()
        try:
            body = await request.json()
        except ValueError:
            return web.json_response({"error": {"message": "body is not JSON"}}, status=400)
        if not isinstance(body, dict):
            return web.json_response({"error": {"message": "body is not a JSON object"}}, status=400)
        if not body.get("stream"):
            return web.json_response({"error": {"message": "only stream=true is served"}}, status=400)
        max_tokens = body.get("max_tokens") or body.get("max_completion_tokens") or self.schedule.default_max_tokens
        if not isinstance(max_tokens, int) or max_tokens < 1:
            return web.json_response({"error": {"message": "max_tokens must be a positive integer"}}, status=400)
        options = body.get("stream_options")
        include_usage = isinstance(options, dict) and bool(options.get("include_usage"))
        prompt_tokens = _prompt_tokens(body)

        sid = self.next_sid
        self.next_sid += 1
        k = self.schedule.tokens_per_chunk
        log = StreamLog(sid, api, arrival_ns, arrival_wall_ns, max_tokens, k)
        created = arrival_wall_ns // 1_000_000_000
        n_chunks = math.ceil(max_tokens / k)
        first_ns = self.schedule.first_send_ns(arrival_ns, self.origin_ns)
        itl_ns = round(self.schedule.itl_ms * 1e6)

        response = web.StreamResponse(
            headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"},
        )
        self.active += 1
        try:
            await response.prepare(request)
            loop = asyncio.get_running_loop()
            for c in range(n_chunks):
                lo, hi = c * k, min(max_tokens, (c + 1) * k)
                text = "".join(token_text(sid, i) for i in range(lo, hi))
                finish = "length" if hi == max_tokens else None
                payload = _sse(_chunk(api, sid, created, text, finish))
                due_ns = first_ns + c * itl_ns
                wait_s = (due_ns - time.perf_counter_ns()) / 1e9
                if wait_s > 0:
                    # asyncio's loop clock is CLOCK_MONOTONIC too; epoll wakes at ms granularity, so the
                    # send may slip up to ~1 ms past `due`: that is recorded, and lag counts from the send.
                    fut = loop.create_future()
                    loop.call_at(loop.time() + wait_s, fut.set_result, None)
                    await fut
                log.sched_ns.append(due_ns)
                log.sent_ns.append(time.perf_counter_ns())
                log.sent_wall_ns.append(time.time_ns())
                await response.write(payload)
            if include_usage:
                usage = {
                    "prompt_tokens": prompt_tokens,
                    "completion_tokens": max_tokens,
                    "total_tokens": prompt_tokens + max_tokens,
                }
                final = _chunk(api, sid, created, "", None)
                final["choices"] = []
                final["usage"] = usage
                await response.write(_sse(final))
            await response.write(b"data: [DONE]\n\n")
            await response.write_eof()
            log.complete = True
        except ConnectionResetError:
            pass  # the client went away: keep what was sent, `complete` stays False
        except asyncio.CancelledError:
            self.finished.append(log)  # aiohttp cancels the handler of a closed connection
            raise
        finally:
            self.active -= 1
        self.finished.append(log)
        return response


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--port", type=int, default=0, help="TCP port on 127.0.0.1 (0: any free port)")
    parser.add_argument("--ttft-ms", type=float, default=50.0)
    parser.add_argument("--itl-ms", type=float, default=10.0, help="time between chunks (10 ms = 100 tok/s)")
    parser.add_argument("--tokens-per-chunk", type=int, default=1)
    parser.add_argument("--align", choices=["step", "request"], default="step")
    parser.add_argument("--default-max-tokens", type=int, default=128)
    parser.add_argument("--max-lifetime-s", type=float, default=1800.0, help="exit by itself after this long")
    args = parser.parse_args(argv)
    if args.itl_ms <= 0 or args.ttft_ms < 0 or args.tokens_per_chunk < 1:
        parser.error("--itl-ms must be > 0, --ttft-ms >= 0 and --tokens-per-chunk >= 1")
    return args


async def serve(args: argparse.Namespace) -> None:
    schedule = Schedule(args.ttft_ms, args.itl_ms, args.tokens_per_chunk, args.align, args.default_max_tokens)
    server = FidelityServer(schedule)
    runner = web.AppRunner(server.app(), access_log=None, handle_signals=False)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", args.port, backlog=1024)
    await site.start()
    sockets = site._server.sockets if site._server is not None else []  # type: ignore[union-attr]
    port = sockets[0].getsockname()[1]
    print(f"READY port={port}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), timeout=args.max_lifetime_s)
    await runner.cleanup()


def main(argv: list[str] | None = None) -> None:
    asyncio.run(serve(parse_args(argv)))


if __name__ == "__main__":
    main()
