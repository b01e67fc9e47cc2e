"""Streaming OpenAI-compatible client that turns one request into one `RequestRecord`.

Why it is built this way (see the workloads reference, part B):
- aiohttp `iter_any()` plus our own SSE parser: no line-length cap, one event-loop wakeup per read.
- One `perf_counter_ns()` per network read, taken before any parsing and shared by every event of that
  read, so that coalesced events are not given fake microsecond gaps and parsing cost is never charged
  to the next token.
- Output token counts come from the server's `usage`, never from counting chunks: with speculative
  decoding one chunk can carry all tokens accepted in a verify step.
- Server-side failures never raise. A sweep must keep going and report an error rate; only
  programming errors propagate.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Mapping
from types import TracebackType
from typing import Any, Self

import aiohttp

from specfrontier.load.sse import SSEEvent, SSEParser
from specfrontier.records import (
    ApiKind,
    Prompt,
    RequestRecord,
    RequestSpecStats,
    Sampling,
    SpecStatsExtractor,
)

_ERROR_BODY_CHARS = 300
_NO_AIOHTTP_DEADLINE = aiohttp.ClientTimeout(total=None)
"""Our own `asyncio.timeout` is the only deadline, so an injected session's defaults cannot cut streams."""


def build_request_body(prompt: Prompt, sampling: Sampling, model: str | None) -> dict[str, Any]:
    """The JSON body for one streamed request; optional sampling fields are sent only when set.

    `temperature` is always sent because engine defaults differ; `ignore_eos` (accepted by llama.cpp,
    SGLang and vLLM) only when true, so strict OpenAI servers are not sent unknown fields needlessly.
    """
    body: dict[str, Any] = {
        "stream": True,
        "stream_options": {"include_usage": True},
        "max_tokens": prompt.max_tokens,
        "temperature": sampling.temperature,
    }
    if model is not None:
        body["model"] = model
    if prompt.api == "chat":
        body["messages"] = [{"role": role, "content": content} for role, content in prompt.messages]
    else:
        body["prompt"] = prompt.text
    if sampling.top_p is not None:
        body["top_p"] = sampling.top_p
    seed = prompt.seed if prompt.seed is not None else sampling.seed
    if seed is not None:
        body["seed"] = seed
    if sampling.ignore_eos:
        body["ignore_eos"] = True
    return body


def _as_int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _describe(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


class _StreamState:
    """What has been observed so far on one stream; turned into a `RequestRecord` at the end."""

    def __init__(self, api: ApiKind, extractor: SpecStatsExtractor | None) -> None:
        self.api = api
        self.extractor = extractor
        self.first_token_ns: int | None = None
        self.chunk_ns: list[int] = []
        self.chunk_cumulative: list[int | None] = []
        """Server-reported completion tokens so far, at each content chunk (None: not reported)."""
        self.text: list[str] = []
        self.finish_reason: str | None = None
        self.prompt_tokens: int | None = None
        self.completion_tokens: int | None = None
        self.spec: RequestSpecStats | None = None

    def on_event(self, event: SSEEvent, t_ns: int) -> str | None:
        """Apply one event that arrived in the read stamped `t_ns`; return an error string to stop."""
        if event.event == "error":
            return f"server error event: {event.data[:_ERROR_BODY_CHARS]}"
        try:
            chunk = json.loads(event.data)
        except ValueError:
            return f"malformed SSE data: {event.data[:200]!r}"
        if not isinstance(chunk, dict):
            return f"malformed SSE data: not a JSON object: {event.data[:200]!r}"
        if "error" in chunk:
            return f"server error in stream: {json.dumps(chunk['error'])[:_ERROR_BODY_CHARS]}"
        if self.extractor is not None:
            spec = self.extractor(chunk)
            if spec is not None:
                self.spec = spec
        choices = chunk.get("choices") or []
        if not isinstance(choices, list):
            return f"malformed SSE data: choices is not a list: {event.data[:200]!r}"
        carries_text = False
        for choice in choices:
            if not isinstance(choice, dict):
                return f"malformed SSE data: choice is not an object: {event.data[:200]!r}"
            content, reasoning = self._choice_text(choice)
            if content:
                self.text.append(content)
            carries_text = carries_text or bool(content) or bool(reasoning)
            finish = choice.get("finish_reason")
            if finish is not None:
                self.finish_reason = str(finish)
        cumulative = self._usage(chunk)
        if carries_text:
            if self.first_token_ns is None:
                self.first_token_ns = t_ns
            self.chunk_ns.append(t_ns)
            self.chunk_cumulative.append(cumulative)
        return None

    def _choice_text(self, choice: Mapping[str, Any]) -> tuple[str, str]:
        """(content, reasoning) of one choice; reasoning counts for timing but not for `output_text`."""
        if self.api == "completion":
            text = choice.get("text")
            return (text if isinstance(text, str) else ""), ""
        delta = choice.get("delta")
        if not isinstance(delta, dict):
            return "", ""
        content = delta.get("content")
        reasoning = delta.get("reasoning_content")
        return (
            content if isinstance(content, str) else "",
            reasoning if isinstance(reasoning, str) else "",
        )

    def _usage(self, chunk: Mapping[str, Any]) -> int | None:
        """Record `usage`; return the cumulative completion-token count this chunk reports, if any.

        Per-chunk counts come from `usage` on every chunk (vLLM `continuous_usage_stats`) or llama.cpp
        `timings.predicted_n` (with `timings_per_token`); we never ask for them, only use them if sent.
        """
        usage = chunk.get("usage")
        cumulative: int | None = None
        if isinstance(usage, dict):
            completion = _as_int(usage.get("completion_tokens"))
            prompt = _as_int(usage.get("prompt_tokens"))
            if completion is not None:
                self.completion_tokens = cumulative = completion
            if prompt is not None:
                self.prompt_tokens = prompt
        if cumulative is None:
            timings = chunk.get("timings")
            if isinstance(timings, dict):
                cumulative = _as_int(timings.get("predicted_n"))
        return cumulative

    def chunk_tokens(self) -> tuple[int, ...] | None:
        """Tokens per content chunk, when every content chunk reported a consistent cumulative count."""
        if not self.chunk_cumulative:
            return None
        counts: list[int] = []
        previous = 0
        for cumulative in self.chunk_cumulative:
            if cumulative is None or cumulative < previous:
                return None
            counts.append(cumulative - previous)
            previous = cumulative
        return tuple(counts)

    def record(self, prompt_id: str, send_ns: int, end_ns: int, error: str | None) -> RequestRecord:
        return RequestRecord(
            prompt_id=prompt_id,
            send_ns=send_ns,
            end_ns=end_ns,
            first_token_ns=self.first_token_ns,
            chunk_ns=tuple(self.chunk_ns),
            chunk_tokens=self.chunk_tokens(),
            prompt_tokens=self.prompt_tokens,
            completion_tokens=self.completion_tokens,
            spec=self.spec,
            finish_reason=self.finish_reason,
            output_text="".join(self.text),
            error=error,
        )


class StreamingClient:
    """Sends streamed requests to one OpenAI-compatible server (`base_url` is the server root).

    `timeout_s` bounds each request from send to end of stream. Without an injected `session`, one is
    created on first use with `TCPConnector(limit=0, force_close=True)`: no pool limit, because aiohttp's
    default of 100 connections would silently cap the concurrency being measured; and one connection per
    request, because llama-server closes a connection after a streamed response and aiohttp would
    otherwise reuse the dead socket ("Can not write request body" on every second request). A loopback
    connect costs tens of microseconds, inside TTFT, as it would for a client without keep-alive.
    A session created here is closed by `aclose()`.
    """

    def __init__(
        self,
        base_url: str,
        *,
        model: str | None = None,
        timeout_s: float = 600.0,
        spec_stats_extractor: SpecStatsExtractor | None = None,
        session: aiohttp.ClientSession | None = None,
        extra_body: Mapping[str, Any] | None = None,
    ) -> None:
        if timeout_s <= 0:
            raise ValueError(f"timeout_s must be > 0, got {timeout_s}")
        root = base_url.rstrip("/")
        self.base_url = root
        self.model = model
        self.extra_body = dict(extra_body or {})
        """Engine-specific fields added to every body (e.g. llama.cpp `cache_prompt: false`)."""
        self.timeout_s = timeout_s
        self.spec_stats_extractor = spec_stats_extractor
        self._urls: dict[ApiKind, str] = {
            "chat": f"{root}/v1/chat/completions",
            "completion": f"{root}/v1/completions",
        }
        self._session = session
        self._owns_session = session is None
        self._closed = False
        self.reads = 0
        """Network reads of streamed bodies so far (client health: events per read, per second)."""
        self.events = 0
        """SSE events parsed so far."""

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the session if this client created it (an injected one belongs to the caller)."""
        self._closed = True
        if self._owns_session and self._session is not None:
            await self._session.close()
        self._session = None

    def pool_limit(self) -> int | None:
        """The connection cap of the session's connector (None: no cap), so a load pattern can refuse a
        concurrency the pool would silently serialise. Our own session has none (`limit=0`); an injected
        session may have aiohttp's default of 100 (or a per-host cap)."""
        if self._session is None:
            return None
        connector = self._session.connector
        if connector is None:
            return None
        caps = [c for c in (connector.limit, connector.limit_per_host) if c]
        return min(caps) if caps else None

    def _get_session(self) -> aiohttp.ClientSession:
        if self._closed:
            raise RuntimeError("StreamingClient.send() called after aclose()")
        if self._session is None:
            # Created lazily: aiohttp wants a running event loop when a session is made.
            self._session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0, force_close=True))
        return self._session

    async def send(self, prompt: Prompt, sampling: Sampling) -> RequestRecord:
        """Send one streamed request and record what happened; server-side failures set `error`."""
        session = self._get_session()
        url = self._urls[prompt.api]
        body = {**build_request_body(prompt, sampling, self.model), **self.extra_body}
        state = _StreamState(prompt.api, self.spec_stats_extractor)
        error: str | None
        end_ns: int
        send_ns = time.perf_counter_ns()
        try:
            async with asyncio.timeout(self.timeout_s):
                async with session.post(
                    url,
                    json=body,
                    headers={"Accept": "text/event-stream"},
                    timeout=_NO_AIOHTTP_DEADLINE,
                ) as resp:
                    if resp.status >= 400:
                        text = await resp.text(errors="replace")
                        end_ns = time.perf_counter_ns()
                        error = f"http {resp.status}: {text[:_ERROR_BODY_CHARS]}"
                    else:
                        error, end_ns = await self._consume(resp, state)
        except TimeoutError:
            end_ns = time.perf_counter_ns()
            error = f"timeout after {float(self.timeout_s)} s"
        except (aiohttp.ClientError, OSError) as exc:
            end_ns = time.perf_counter_ns()
            error = f"connection error: {_describe(exc)}"[:_ERROR_BODY_CHARS]
        return state.record(prompt.prompt_id, send_ns, end_ns, error)

    async def _consume(self, resp: aiohttp.ClientResponse, state: _StreamState) -> tuple[str | None, int]:
        """Read the stream to its end; return (error or None, end time).

        The end time of a good stream is the read that carried `[DONE]`; the rest of the body is still
        read (normally just the chunked-encoding terminator) so the connection returns to the pool.
        """
        parser = SSEParser()
        done_ns: int | None = None
        async for data in resp.content.iter_any():
            t_ns = time.perf_counter_ns()  # first thing after the read returns: parsing is never charged
            self.reads += 1
            for event in parser.feed(data):
                self.events += 1
                error = state.on_event(event, t_ns)
                if error is not None:
                    return error, t_ns
            if done_ns is None and parser.done:
                done_ns = t_ns
        eof_ns = time.perf_counter_ns()
        for event in parser.finish():
            error = state.on_event(event, eof_ns)
            if error is not None:
                return error, eof_ns
        if done_ns is None:
            detail = " (an unterminated event was discarded)" if parser.has_partial else ""
            return f"stream ended without [DONE]{detail}", eof_ns
        if state.finish_reason is None:
            return "stream ended without finish_reason", done_ns
        if state.completion_tokens is None:
            return "stream ended without usage", done_ns
        return None, done_ns


__all__ = ["StreamingClient", "build_request_body"]
