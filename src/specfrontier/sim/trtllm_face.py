"""The simulator's HTTP face in TensorRT-LLM's flavour: what `trtllm-serve` answers, over the simulator core.

Everything it serves is a MODEL PREDICTION, not a measurement: the tokens are placeholder words, their timing
and the draft acceptance come from `ServerCore`, paced against the wall clock by the SGLang face's `Pacer`.
It exists so that the TensorRT-LLM adapter (`engines/trtllm.py`: its argv, options file, readiness,
capacity and drained iteration counters) runs end to end without a GPU. It was written from the same
TensorRT-LLM source as the adapter (see that module's docstring for files and versions), not from a
running trtllm-serve, which this project has never had.

The interface it reproduces (`tensorrt_llm/serve/openai_server.py`, `cpp/include/tensorrt_llm/executor/
types.h`): `GET /health` (200, empty), `GET /health_generate` (one 1-token generation, then 200
"Generation health check OK"), `GET /version` (`{"version": ...}`), `GET /v1/models` (`owned_by:
"tensorrt_llm"`), `GET /metrics` (the per-iteration stats since the previous GET, camelCase, drained on
read, at most `max_stats_len` + 1 kept with the oldest dropped, nothing unless `enable_iter_perf_stats`),
streamed and whole `POST /v1/chat/completions` and `/v1/completions` with `usage`.

Per iteration of the core (a prefill or a draft-and-verify decode step) it records one stats entry:
`specDecodingStats` (only under speculation) sums the decode step's requests: `numDraftTokens` = requests x
the step's draft length (`max_draft_len`, or the `draft_len_schedule` entry for the batch),
`numAcceptedTokens` = tokens emitted beyond one per request, `numRequestsWithDraftTokens` = requests;
`maxNumActiveRequests` is the `max_batch_size` the server was given (what TensorRT-LLM's PyTorch executor
reports), while the core admits at most the profile's capacity law below it, which the KV-cache figures (a
nominal pool of `capacity x max_seq_len` tokens in 32-token blocks) reflect. With `return_perf_metrics: true`
the iteration stats are dropped as requests complete, as the real server's Prometheus collector drains them.
Not modelled: `/server_info`, `/perf_metrics`, `/prometheus/metrics`,
aborts of requests whose client left, stop strings, n > 1, logprobs.
"""

from __future__ import annotations

import asyncio
import math
import time
import uuid
from collections import deque
from dataclasses import dataclass
from typing import Any, Literal

from aiohttp import web

from specfrontier.sim.core import ServerCore, SimRequest, StepResult
from specfrontier.sim.http_face import PLACEHOLDER, PacedFace, Pacer, exit_when_it_fails, log, write_event
from specfrontier.sim.http_protocol import Ask, BadRequest, FaceConfig, parse_ask, sse_event

TOKENS_PER_BLOCK = 32
"""KV-cache block size the face reports (TensorRT-LLM's `kv_cache_config.tokens_per_block` default)."""


@dataclass(frozen=True, slots=True)
class TrtllmFaceConfig:
    """The face's own knobs beside the simulator's (`FaceConfig`)."""

    base: FaceConfig
    max_batch_size: int
    max_num_tokens: int
    iter_perf_stats: bool
    max_stats_len: int | None
    """None: keep every iteration (TensorRT-LLM's -1)."""
    drain_on_completion: bool
    """`return_perf_metrics: true`: the real server's background Prometheus collector empties the stats."""
    version: str


class IterationLog:
    """The server's list of iteration stats: appended per iteration, emptied by each `/metrics` read."""

    def __init__(self, *, enabled: bool, max_len: int | None) -> None:
        self.enabled = enabled
        self.max_len = max_len
        self.entries: deque[dict[str, Any]] = deque()
        self.iterations = 0

    def append(self, entry: dict[str, Any]) -> None:
        self.iterations += 1
        if not self.enabled:
            return
        if self.max_len is not None and len(self.entries) > self.max_len:  # as PyExecutor._append_iter_stats
            self.entries.popleft()
        self.entries.append(entry)

    def drain(self) -> list[dict[str, Any]]:
        out = list(self.entries)
        self.entries.clear()
        return out


class IterationPacer(Pacer):
    """The SGLang face's pacer, recording one TensorRT-LLM iteration-stats entry per core step."""

    def __init__(self, core: ServerCore, *, time_scale: float, config: TrtllmFaceConfig, stats: IterationLog) -> None:
        super().__init__(core, time_scale=time_scale)
        self.config = config
        self.stats = stats

    def _deliver(self, result: StepResult) -> None:
        verify, tokens = self.verify_total, self.accept_tokens_total
        super()._deliver(result)
        self.stats.append(self._entry(result, self.verify_total - verify, self.accept_tokens_total - tokens))

    def _entry(self, result: StepResult, verified: int, emitted: int) -> dict[str, Any]:
        core = self.core
        setting = core.setting
        active = len(core.running) + len(core.prefilling)
        latency_ms = (result.end_ns - result.start_ns) / 1e6
        entry: dict[str, Any] = {
            "timestamp": time.strftime("%m-%d-%Y %H:%M:%S"),
            "iter": self.stats.iterations,
            "iterLatencyMS": latency_ms,
            "newActiveRequestsQueueLatencyMS": 0.0,
            "numNewActiveRequests": result.batch if result.kind == "prefill" else 0,
            "numActiveRequests": active + len(result.finished),
            "numQueuedRequests": len(core.waiting),
            "numCompletedRequests": len(result.finished),
            "maxNumActiveRequests": self.config.max_batch_size,
            "maxBatchSizeStatic": 0,
            "maxBatchSizeTunerRecommended": 0,
            "maxBatchSizeRuntime": 0,
            "maxNumTokensStatic": 0,
            "maxNumTokensTunerRecommended": 0,
            "maxNumTokensRuntime": 0,
            "gpuMemUsage": 0,
            "cpuMemUsage": 0,
            "pinnedMemUsage": 0,
            "kvCacheStats": self._kv_stats(),
            "crossKvCacheStats": None,
            "staticBatchingStats": None,
            "inflightBatchingStats": {
                "numScheduledRequests": result.batch,
                "numContextRequests": result.batch if result.kind == "prefill" else 0,
                "numGenRequests": result.batch if result.kind == "decode" else 0,
                "numPausedRequests": 0,
                "numCtxTokens": 0,
                "microBatchId": 0,
                "avgNumDecodedTokensPerIter": 0.0,
            },
            "specDecodingStats": None,
        }
        if setting.speculative:
            drafts = result.depth  # the step's own draft length (a draft_len_schedule changes it with the batch)
            verified = verified if drafts else 0
            accepted = emitted - verified if drafts else 0
            entry["specDecodingStats"] = {
                "numDraftTokens": verified * drafts,
                "numAcceptedTokens": accepted,
                "numRequestsWithDraftTokens": verified,
                "acceptanceLength": (accepted + verified) / verified if verified else 0.0,
                "iterLatencyMS": 0.0,
                "draftOverhead": 0.0,
            }
        return entry

    def _kv_stats(self) -> dict[str, Any]:
        core = self.core
        per_request = math.ceil(self.config.base.context_length / TOKENS_PER_BLOCK)
        max_blocks = core.capacity * per_request
        used = sum(
            math.ceil((r.prompt_tokens + r.generated) / TOKENS_PER_BLOCK) for r in (*core.running, *core.prefilling)
        )
        return {
            "maxNumBlocks": max_blocks,
            "freeNumBlocks": max(0, max_blocks - used),
            "usedNumBlocks": used,
            "tokensPerBlock": TOKENS_PER_BLOCK,
            "allocTotalBlocks": used,
            "allocNewBlocks": 0,
            "reusedBlocks": 0,
            "missedBlocks": 0,
            "cacheHitRate": 0.0,
        }


class TrtllmFace(PacedFace[IterationPacer]):
    """The aiohttp handlers; `build_trtllm_app` wires them."""

    def __init__(self, config: TrtllmFaceConfig) -> None:
        self.config = config
        base = config.base
        self.workload = base.profile.workload(base.workload, where="sim trtllm_serve")
        self.stats = IterationLog(enabled=config.iter_perf_stats, max_len=config.max_stats_len)

    async def on_startup(self, _app: web.Application) -> None:
        base = self.config.base
        core = ServerCore(base.profile, base.setting, seed=base.seed)
        pacer = IterationPacer(core, time_scale=base.time_scale, config=self.config, stats=self.stats)
        self._start(pacer, "sim-trtllm-pacer", exit_when_it_fails("executor loop"))

    # -- health and info ------------------------------------------------------------------------------
    async def health(self, _request: web.Request) -> web.Response:
        if self._task is not None and self._task.done():
            return web.Response(status=503, text="LLM is unavailable. Please check the server logs for more details.")
        return web.Response(status=200)

    async def health_generate(self, _request: web.Request) -> web.Response:
        stream = self.pacer.admit(
            workload=self.workload, temperature=0.0, ignore_eos=False, prompt_tokens=1, max_tokens=1
        )
        while await stream.queue.get() is not None:
            pass
        self._completed()
        return web.Response(status=200, text="Generation health check OK")

    async def version(self, _request: web.Request) -> web.Response:
        return web.json_response({"version": self.config.version})

    async def models(self, _request: web.Request) -> web.Response:
        card = {"id": self.config.base.model_name, "object": "model", "created": int(time.time())}
        return web.json_response({"object": "list", "data": [{**card, "owned_by": "tensorrt_llm"}]})

    async def metrics(self, _request: web.Request) -> web.Response:
        return web.json_response(self.stats.drain())

    # -- generation -----------------------------------------------------------------------------------
    async def _generate(self, request: web.Request, api: Literal["chat", "completion"]) -> web.StreamResponse:
        try:
            ask = parse_ask(await request.json(), api, self.config.base)
        except ValueError:
            return _error(400, "the request body is not valid JSON")
        except BadRequest as exc:
            return _error(400, str(exc))
        stream = self._admit(ask)
        prefix = "chatcmpl" if api == "chat" else "cmpl"
        head = {"id": f"{prefix}-{uuid.uuid4().hex}", "created": int(time.time()), "model": ask.model}
        if ask.stream:
            return await self._stream(request, ask, stream.queue, head, stream.request)
        tokens = 0
        while (item := await stream.queue.get()) is not None:
            tokens += item
        self._completed()
        sim = stream.request
        kind = "chat.completion" if api == "chat" else "text_completion"
        choice: dict[str, Any] = {"index": 0, "finish_reason": sim.finish_reason, "stop_reason": None}
        if api == "chat":
            choice["message"] = {"role": "assistant", "content": PLACEHOLDER * tokens}
        else:
            choice["text"] = PLACEHOLDER * tokens
        usage = _usage(sim.prompt_tokens, sim.generated)
        return web.json_response({**head, "object": kind, "choices": [choice], "usage": usage})

    async def _stream(
        self,
        request: web.Request,
        ask: Ask,
        queue: asyncio.Queue[int | None],
        head: dict[str, Any],
        sim: SimRequest,
    ) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await resp.prepare(request)
        head = {**head, "object": "chat.completion.chunk" if ask.api == "chat" else "text_completion"}
        writing = True
        first = True
        while (tokens := await queue.get()) is not None:
            if not writing:
                continue
            text = PLACEHOLDER * tokens
            if ask.api == "chat":
                delta: dict[str, Any] = {"content": text}
                if first:
                    delta["role"] = "assistant"
                choice: dict[str, Any] = {"index": 0, "delta": delta}
            else:
                choice = {"index": 0, "text": text}
            choice.update(logprobs=None, finish_reason=None, stop_reason=None)
            writing = await write_event(resp, sse_event({**head, "choices": [choice]}))
            first = False
        self._completed()
        if writing:
            last: dict[str, Any] = {
                "index": 0,
                "logprobs": None,
                "finish_reason": sim.finish_reason,
                "stop_reason": None,
            }
            last.update({"delta": {"content": ""}} if ask.api == "chat" else {"text": ""})
            data = sse_event({**head, "choices": [last]})
            if ask.include_usage:
                data += sse_event({**head, "choices": [], "usage": _usage(sim.prompt_tokens, sim.generated)})
            if await write_event(resp, data + b"data: [DONE]\n\n"):
                await resp.write_eof()
        return resp

    def _completed(self) -> None:
        if self.config.drain_on_completion:
            self.stats.drain()


def _usage(prompt: int, completion: int) -> dict[str, int]:
    return {"prompt_tokens": prompt, "total_tokens": prompt + completion, "completion_tokens": completion}


def _error(status: int, message: str) -> web.Response:
    body = {"object": "error", "message": message, "type": "BadRequestError", "param": None, "code": status}
    return web.json_response(body, status=status)


def build_trtllm_app(config: TrtllmFaceConfig) -> web.Application:
    """The aiohttp application: trtllm-serve's paths (see the module docstring)."""
    face = TrtllmFace(config)
    app = face.application(
        {
            "/health": face.health,
            "/health_generate": face.health_generate,
            "/version": face.version,
            "/v1/models": face.models,
            "/metrics": face.metrics,
        }
    )
    log(f"simulated trtllm-serve routes ready (a MODEL, profile {config.base.profile.name})")
    return app


__all__ = ["TOKENS_PER_BLOCK", "IterationLog", "IterationPacer", "TrtllmFace", "TrtllmFaceConfig", "build_trtllm_app"]
