"""The simulator's HTTP face: an OpenAI-compatible streaming server that speaks SGLang's flavour.

Everything it serves is a MODEL PREDICTION, not a measurement: the tokens are placeholder words and their
timing comes from `ServerCore`, paced against the wall clock. It exists so that the real adapter, the
streaming client, the sweep and their failure handling run end to end, over real sockets and a real
process boundary, without a GPU (ARCHITECTURE.md, `sim/`).

Pacing: one asyncio task (`Pacer.run`) owns the core. It submits the requests that arrived, runs one
`core.step()`, sleeps until the step's virtual end time, scaled by `1 / time_scale`, has come on the
wall clock, and only then hands each stream the chunks the step produced. Sleep targets are absolute
(origin + end / scale), so a late wakeup does not accumulate into drift. Virtual time only jumps forward
to the wall clock while the core is idle, as the virtual face does when no request is in flight. A
request that arrives while a step runs is seen when the next step starts, as in SGLang's scheduler.

What is not modelled: aborting a request whose client went away (it runs to its end in the core),
KV-token limits (`max_total_num_tokens` is a nominal figure), stop strings, n > 1, logprobs.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import stat
import sys
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, Literal, TypeVar

from aiohttp import web

from specfrontier.sim.core import ServerCore, SimRequest, StepResult
from specfrontier.sim.http_protocol import (
    Ask,
    BadRequest,
    FaceConfig,
    error_response,
    parse_ask,
    spec_details,
    sse_event,
)
from specfrontier.sim.profile import WorkloadModel

PLACEHOLDER = "tok "
"""Text of one generated token: the face models timing and counts, not language."""
MALFORMED_EVENT = b'data: {"choices": [{"index": 0, "delta": {"content": "tok \n\n'
"""Sent once per stream by `--malformed-sse`: a data line whose JSON is cut off."""
STALL_POLL_S = 0.2


def log(message: str, level: str = "INFO") -> None:
    """One SGLang-looking log line (`[time] LEVEL message`) on stderr, flushed at once for log tails."""
    stamp = time.strftime("%Y-%m-%d %H:%M:%S")
    print(f"[{stamp}] {level} {message}", file=sys.stderr, flush=True)


@dataclass(slots=True)
class _Stream:
    """One admitted request: its state in the core and the chunk token counts not yet written."""

    request: SimRequest
    queue: asyncio.Queue[int | None]
    arrived_s: float
    delivered: int = 0


class Pacer:
    """Runs the core in (scaled) real time; see the module docstring for the pacing rules."""

    def __init__(self, core: ServerCore, *, time_scale: float) -> None:
        self.core = core
        self.time_scale = time_scale
        self._arrived: list[_Stream] = []
        self._active: list[_Stream] = []
        self._wake = asyncio.Event()
        self._origin = asyncio.get_running_loop().time()
        self.verify_total = 0
        """Request-verify steps over the server's lifetime (SGLang's spec_total_num_forward_ct)."""
        self.accept_tokens_total = 0
        """Tokens those verify steps emitted, bonus included (SGLang's spec_total_num_accept_tokens)."""

    def _virtual_now_ns(self) -> int:
        return round((asyncio.get_running_loop().time() - self._origin) * self.time_scale * 1e9)

    def admit(
        self, *, workload: WorkloadModel, temperature: float, ignore_eos: bool, prompt_tokens: int, max_tokens: int
    ) -> _Stream:
        """Create the request (its fate is drawn now, from its own seeded stream) and queue it for the next step."""
        request = self.core.new_request(
            f"req-{self.core.created}",
            send_ns=self._virtual_now_ns(),
            workload=workload,
            temperature=temperature,
            ignore_eos=ignore_eos,
            prompt_tokens=prompt_tokens,
            max_tokens=max_tokens,
        )
        stream = _Stream(request, asyncio.Queue(), asyncio.get_running_loop().time())
        self._arrived.append(stream)
        self._wake.set()
        return stream

    @property
    def avg_accept_length(self) -> float | None:
        """Lifetime tokens per request-verify step (cumulative, like SGLang's avg_spec_accept_length)."""
        return self.accept_tokens_total / self.verify_total if self.verify_total else None

    @property
    def idle(self) -> bool:
        return not self._arrived and not self.core.busy

    async def run(self) -> None:
        """The scheduler loop; runs until cancelled."""
        loop = asyncio.get_running_loop()
        core = self.core
        while True:
            if self.idle:
                self._wake.clear()
                await self._wake.wait()
            if not core.busy:
                core.now_ns = max(core.now_ns, self._virtual_now_ns())
            for stream in self._arrived:
                core.submit(stream.request)
                self._active.append(stream)
            self._arrived.clear()
            result = core.step()
            delay = self._origin + result.end_ns / 1e9 / self.time_scale - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            self._deliver(result)

    def _deliver(self, result: StepResult) -> None:
        still: list[_Stream] = []
        for stream in self._active:
            request = stream.request
            new = request.chunk_tokens[stream.delivered :]
            stream.delivered = len(request.chunk_tokens)
            for tokens in new:
                stream.queue.put_nowait(tokens)
            if result.kind == "decode" and new:
                self.verify_total += len(new)
                self.accept_tokens_total += sum(new)
            if request.end_ns is None:
                still.append(stream)
            else:
                stream.queue.put_nowait(None)
        self._active = still


P = TypeVar("P", bound="Pacer")
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class PacedFace(Generic[P]):
    """What every simulated server's handlers share: the pacer task's lifetime and the two generate routes
    (each face writes its own engine's responses in `_generate`)."""

    workload: WorkloadModel
    _pacer: P | None = None
    _task: asyncio.Task[None] | None = None

    @property
    def pacer(self) -> P:
        if self._pacer is None:
            raise RuntimeError("the face has not started")
        return self._pacer

    def _start(self, pacer: P, name: str, on_death: Callable[[asyncio.Task[None]], None]) -> None:
        """Run `pacer` as the task `name`; `on_death` takes the server down if it fails."""
        self._pacer = pacer
        self._task = asyncio.create_task(pacer.run(), name=name)
        self._task.add_done_callback(on_death)

    def application(self, get_routes: Mapping[str, Handler]) -> web.Application:
        """The aiohttp application of this face: its start-up and clean-up, `get_routes` (path -> handler) and
        the two generate routes every OpenAI-compatible server has."""
        app = web.Application()
        app.on_startup.append(self.on_startup)
        app.on_cleanup.append(self.on_cleanup)
        for path, handler in get_routes.items():
            app.router.add_get(path, handler)
        app.router.add_post("/v1/chat/completions", self.chat)
        app.router.add_post("/v1/completions", self.completions)
        return app

    async def on_startup(self, _app: web.Application) -> None:
        raise NotImplementedError

    async def on_cleanup(self, _app: web.Application) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    async def chat(self, request: web.Request) -> web.StreamResponse:
        return await self._generate(request, "chat")

    async def completions(self, request: web.Request) -> web.StreamResponse:
        return await self._generate(request, "completion")

    async def _generate(self, request: web.Request, api: Literal["chat", "completion"]) -> web.StreamResponse:
        raise NotImplementedError

    def _admit(self, ask: Ask) -> _Stream:
        """Admit one parsed request to the pacer under the face's workload class."""
        return self.pacer.admit(
            workload=self.workload,
            temperature=ask.temperature,
            ignore_eos=ask.ignore_eos,
            prompt_tokens=ask.prompt_tokens,
            max_tokens=ask.max_tokens,
        )


class Face(PacedFace["Pacer"]):
    """The aiohttp handlers over one Pacer; `build_app` wires them."""

    def __init__(self, config: FaceConfig) -> None:
        self.config = config
        self.workload = config.profile.workload(config.workload, where="sim serve")
        self.started_s = time.monotonic()
        self._ready = False
        self.completed = 0

    @property
    def ready(self) -> bool:
        """Healthy once the modelled start-up delay is over and the server said so in its log, as SGLang
        does (never with `--hang`): a client that saw it healthy finds the line in the log."""
        return self._ready

    def _become_ready(self) -> None:
        log("The server is fired up and ready to roll! (simulated: a MODEL)")
        self._ready = True

    async def on_startup(self, _app: web.Application) -> None:
        core = ServerCore(self.config.profile, self.config.setting, seed=self.config.seed)
        self._start(Pacer(core, time_scale=self.config.time_scale), "sim-pacer", exit_when_it_fails("scheduler loop"))
        if not self.config.hang:
            delay = max(0.0, self.config.startup_s - (time.monotonic() - self.started_s))
            asyncio.get_running_loop().call_later(delay, self._become_ready)

    # -- health and info --------------------------------------------------------------------------
    async def health(self, _request: web.Request) -> web.Response:
        return web.Response(status=200 if self.ready else 503)

    async def server_info(self, _request: web.Request) -> web.Response:
        state: dict[str, Any] = {"effective_max_running_requests_per_dp": self.pacer.core.capacity}
        avg = self.pacer.avg_accept_length
        if self.config.setting.speculative and avg is not None:
            state["avg_spec_accept_length"] = avg
        info = {
            **self.config.server_args,
            "max_total_num_tokens": self.config.max_total_num_tokens,
            "max_req_input_len": self.config.context_length - 1,
            "internal_states": [state],
            "version": "0.5.23+sim",
            "simulated": True,
            "time_scale": self.config.time_scale,
            "sim_profile": self.config.profile.name,
            "sim_workload": self.config.workload,
            "sim_seed": self.config.seed,
        }
        return web.json_response(info)

    # -- generation -------------------------------------------------------------------------------
    async def _generate(self, request: web.Request, api: Literal["chat", "completion"]) -> web.StreamResponse:
        if not self.ready:
            return error_response(503, "the server is starting")
        try:
            ask = parse_ask(await request.json(), api, self.config)
        except ValueError:
            return error_response(400, "the request body is not valid JSON")
        except BadRequest as exc:
            return error_response(400, str(exc))
        stream = self._admit(ask)
        head = {"id": uuid.uuid4().hex, "created": int(time.time()), "model": ask.model}
        if ask.stream:
            return await self._stream(request, ask, stream, head)
        tokens = 0
        while (item := await stream.queue.get()) is not None:
            tokens += item
        resp = web.json_response(self._whole(ask, stream, head, PLACEHOLDER * tokens))
        await resp.prepare(request)
        await resp.write_eof()
        self._completed()
        return resp

    def _choice(self, ask: Ask, stream: _Stream, text: str | None, *, whole: bool = False) -> dict[str, Any]:
        """One choice: a stream delta (text None = the finish chunk) or, with `whole`, the full message."""
        finish = stream.request.finish_reason if whole or text is None else None
        choice: dict[str, Any] = {"index": 0}
        if ask.api == "completion":
            choice["text"] = text or ""
        elif whole:
            choice["message"] = {"role": "assistant", "content": text}
        else:
            choice["delta"] = {} if text is None else {"role": "assistant", "content": text}
        choice.update(logprobs=None, finish_reason=finish, matched_stop=None)
        if finish is not None and ask.meta_info:
            choice["meta_info"] = self._meta(stream)
        return choice

    def _meta(self, stream: _Stream) -> dict[str, Any]:
        request = stream.request
        meta: dict[str, Any] = {
            "id": request.request_id,
            "prompt_tokens": request.prompt_tokens,
            "completion_tokens": request.generated,
            "cached_tokens": 0,
            "finish_reason": {"type": request.finish_reason},
            "e2e_latency": asyncio.get_running_loop().time() - stream.arrived_s,
        }
        if self.config.setting.speculative:
            meta.update(spec_details(request, self.config.setting))
        return meta

    def _extras(self, ask: Ask, stream: _Stream, *, whole: bool) -> dict[str, Any]:
        """`usage` (always on a whole response, on request in a stream) and `sglext` when asked for."""
        request = stream.request
        extras: dict[str, Any] = {}
        if whole or ask.include_usage:
            total = request.prompt_tokens + request.generated
            extras["usage"] = {
                "prompt_tokens": request.prompt_tokens,
                "completion_tokens": request.generated,
                "total_tokens": total,
            }
        if ask.spec_details and self.config.setting.speculative:
            extras["sglext"] = {"spec_tokens_details": spec_details(request, self.config.setting)}
        return extras

    def _whole(self, ask: Ask, stream: _Stream, head: dict[str, Any], text: str) -> dict[str, Any]:
        """The non-streamed response body."""
        kind = "chat.completion" if ask.api == "chat" else "text_completion"
        choice = self._choice(ask, stream, text, whole=True)
        return {**head, "object": kind, "choices": [choice], **self._extras(ask, stream, whole=True)}

    async def _stream(
        self, request: web.Request, ask: Ask, stream: _Stream, head: dict[str, Any]
    ) -> web.StreamResponse:
        """One SSE chunk per step that gave this request tokens, then finish, usage/sglext and [DONE]."""
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await resp.prepare(request)
        head = {**head, "object": "chat.completion.chunk" if ask.api == "chat" else "text_completion"}
        stall = self.config.stall_stream_after
        sent = 0
        writing = True
        while (tokens := await stream.queue.get()) is not None:
            if not writing or (stall is not None and sent >= stall):
                continue
            choice = self._choice(ask, stream, PLACEHOLDER * tokens)
            writing = await write_event(resp, sse_event({**head, "choices": [choice], "usage": None}))
            if writing and self.config.malformed_sse and sent == 0:
                writing = await write_event(resp, MALFORMED_EVENT)
            sent += tokens
        if stall is not None and sent >= stall:
            await _hold_open(request)
            return resp
        if writing:
            data = sse_event({**head, "choices": [self._choice(ask, stream, None)], "usage": None})
            extras = self._extras(ask, stream, whole=False)
            if extras:
                data += sse_event({**head, "choices": [], **extras})
            if await write_event(resp, data + b"data: [DONE]\n\n"):
                await resp.write_eof()
        self._completed()
        return resp

    def _completed(self) -> None:
        self.completed += 1
        limit = self.config.crash_after
        if crash_due(self.completed, limit, self.config.crash_once_file):
            log(f"simulated crash after {self.completed} completed requests (--crash-after {limit})", "ERROR")
            if self.config.crash_linger_s:
                _close_sockets()
                time.sleep(self.config.crash_linger_s)  # blocks the loop on purpose: nothing is served any more
            os._exit(1)


def crash_due(completed: int, limit: int | None, once_file: str | None) -> bool:
    """Whether a face told to crash after `limit` answered requests (`--crash-after`, `--sim-crash-after`)
    crashes now; with `once_file`, only while that file is absent, which this creates, so a resumed run's
    relaunch of the same command serves on."""
    if limit is None or completed < limit:
        return False
    if once_file is not None:
        if os.path.exists(once_file):
            return False
        with open(once_file, "w", encoding="utf-8") as marker:
            marker.write("crashed once\n")
    return True


def _close_sockets() -> None:
    """`--crash-linger`: close every socket of this process (the listener and each connection), as the
    kernel does when a process exits, so clients see resets and refusals while the process still lives."""
    for name in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            if stat.S_ISSOCK(os.fstat(int(name)).st_mode):
                os.close(int(name))


def exit_when_it_fails(loop_name: str) -> Callable[[asyncio.Task[None]], None]:
    """A done-callback for the face's scheduler loop (`loop_name` in the log line): a loop that dies takes the
    server down, as SGLang's scheduler and trtllm-serve's executor do, instead of leaving streams waiting
    forever."""

    def exit_if_failed(task: asyncio.Task[None]) -> None:
        if not task.cancelled() and task.exception() is not None:
            log(f"{loop_name} failed: {task.exception()!r}", "ERROR")
            os._exit(1)

    return exit_if_failed


async def write_event(resp: web.StreamResponse, data: bytes) -> bool:
    """Write to a stream; False once the client went away (the request still runs to its end in the model)."""
    try:
        await resp.write(data)
    except ConnectionError:
        return False
    return True


async def _hold_open(request: web.Request) -> None:
    """`--stall-stream-after`: keep the connection open, sending nothing, until the client closes it."""
    while request.transport is not None and not request.transport.is_closing():
        await asyncio.sleep(STALL_POLL_S)


def build_app(config: FaceConfig) -> web.Application:
    """The aiohttp application of the face (SGLang's paths; the deprecated `/get_server_info` alias too)."""
    face = Face(config)
    return face.application(
        {
            "/health": face.health,
            "/health_generate": face.health,
            "/server_info": face.server_info,
            "/get_server_info": face.server_info,
        }
    )


__all__ = [
    "FaceConfig",
    "PacedFace",
    "Pacer",
    "build_app",
    "exit_when_it_fails",
    "log",
    "parse_ask",
    "spec_details",
    "write_event",
]
