"""Streaming OpenAI-compatible client that turns one request into one `RequestRecord`.

Why it is built this way (see the workloads reference, part B):
- aiohttp `iter_any()` plus our own SSE parser: no line-length cap, one event-loop wakeup per read.
- One `perf_counter_ns()` per network read, taken before any parsing and shared by every event of that
  read, so that coalesced events are not given fake microsecond gaps and parsing cost is never charged
  to the next token.
- Output token counts come from the server's `usage`, never from counting chunks: with speculative
  decoding one chunk can carry all tokens accepted in a verify step. (`bench` alone, measuring a server
  that ignores `stream_options.include_usage`, may count chunks instead: `tokens_from_chunks`.)
- Server-side failures never raise. A sweep must keep going and report an error rate; only
  programming errors propagate. The one exception is a server that stopped answering: after
  `max_consecutive_timeouts` timeouts in a row (no success between them) `send` raises `EngineStalled`,
  so the caller abandons the setting instead of waiting the full timeout for every request left
  (at the default 300 s, about an hour for one setting). `stall_guard` lifts that error out of the
  task groups the load patterns run their streams in.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Iterator, Mapping
from types import TracebackType
from typing import Any, Self

import aiohttp

from specfrontier.errors import EngineStalled
from specfrontier.load.sse import SSEEvent, SSEParser
from specfrontier.records import (
    ApiKind,
    Prompt,
    RequestRecord,
    RequestSpecStats,
    Sampling,
    SpecStatsExtractor,
)

_log = logging.getLogger(__name__)
_ERROR_BODY_CHARS = 300
_IDLE_REUSE_S = 4.0
"""Idle connections older than this are not reused: the uvicorn servers of vLLM and SGLang close idle ones
after 5 s by default, and a request sent just as the server closes one would have to be sent again."""
_STALE_LIMIT = 3
"""Stale kept-alive connections tolerated before a client stops reusing connections altogether."""
_NO_AIOHTTP_DEADLINE = aiohttp.ClientTimeout(total=None)
"""Our own `asyncio.timeout` is the only deadline, so an injected session's defaults cannot cut streams."""


TIMEOUT_ERROR_PREFIX = "timeout after "
"""How a request that hit `timeout_s` is recorded (its `error` starts with this)."""
CONNECTION_ERROR_PREFIX = "connection error: "
"""How a request whose connection failed (refused, reset, closed mid-stream) is recorded."""


@contextlib.contextmanager
def stall_guard() -> Iterator[None]:
    """Re-raise an `EngineStalled` from a task group as itself (the group wraps it in an
    ExceptionGroup, and the sweep catches engine errors by type)."""
    try:
        yield
    except BaseExceptionGroup as group:
        stalled = group.subgroup(EngineStalled)
        while stalled is not None:
            first = stalled.exceptions[0]
            if isinstance(first, EngineStalled):
                raise first from None
            stalled = first if isinstance(first, BaseExceptionGroup) else None
        raise


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
        self.stale_connection = False
        """The request failed before any response, as on a connection the server had closed."""

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
    created on first use with `TCPConnector(limit=0)`: no pool limit, because aiohttp's default of 100
    connections would silently cap the concurrency being measured.

    `keep_alive` (default on) reuses connections, as production clients and GuideLLM do: a new loopback
    connection per request is accepted by a server busy streaming to every other client, which put
    +32% on our TTFT at 64 streams (benchmarks/client_fidelity.py). Some servers close a connection
    after each streamed response without saying so (llama-server b11434 answers `Keep-Alive:
    timeout=5, max=100` and closes anyway), so the client's next request can meet a dead socket. Such a
    request never reached the server: it fails before any response with "Can not write request body"
    or "Server disconnected". It is sent again once, on a fresh connection, with its send time stamped
    anew, so the failed attempt is not charged to its TTFT; after `_STALE_LIMIT` of them this client
    opens one connection per request for good (`keep_alive` becomes False). Engines known to close
    (llama.cpp) get `keep_alive=False` from their adapter from the start. A session created here is
    closed by `aclose()`.
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
        keep_alive: bool = True,
        max_consecutive_timeouts: int | None = None,
        tokens_from_chunks: bool = False,
    ) -> None:
        if timeout_s <= 0:
            raise ValueError(f"timeout_s must be > 0, got {timeout_s}")
        if max_consecutive_timeouts is not None and max_consecutive_timeouts < 1:
            raise ValueError(f"max_consecutive_timeouts must be >= 1, got {max_consecutive_timeouts}")
        if session is not None and not keep_alive:
            raise ValueError("keep_alive=False opens a connection per request itself; do not inject a session")
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
        self.keep_alive = keep_alive
        """Whether requests reuse connections; turns False for good once a server keeps closing them."""
        self.stale_retries = 0
        """Requests sent again because a kept-alive connection had been closed by the server."""
        self._session = session
        self._owns_session = session is None
        self._fresh_session: aiohttp.ClientSession | None = None
        """One connection per request (`force_close`): retries, and everything once `keep_alive` is off."""
        self._closed = False
        self.max_consecutive_timeouts = max_consecutive_timeouts
        """Timeouts in a row after which `send` raises EngineStalled (None: never)."""
        self.consecutive_timeouts = 0
        self.tokens_from_chunks = tokens_from_chunks
        """A stream that ends without `usage` counts one output token per content chunk instead of failing
        (`bench`: a server that is not ours may ignore `stream_options.include_usage`). A lower bound where
        the server speculates (one chunk can carry several tokens), so `tune` leaves it off."""
        self.chunk_counted = 0
        """Requests whose output tokens were counted from chunks (`tokens_from_chunks`)."""
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
        if self._fresh_session is not None:
            await self._fresh_session.close()
        self._session = None
        self._fresh_session = None

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

    def _get_session(self, *, fresh: bool = False) -> aiohttp.ClientSession:
        """The session to send on: the kept-alive one, or (`fresh`, or keep-alive off) one that opens a
        new connection per request. Created lazily: aiohttp wants a running event loop for a session."""
        if self._closed:
            raise RuntimeError("StreamingClient.send() called after aclose()")
        if fresh or not self.keep_alive:
            if self._fresh_session is None:
                connector = aiohttp.TCPConnector(limit=0, force_close=True)
                self._fresh_session = aiohttp.ClientSession(connector=connector)
            return self._fresh_session
        if self._session is None:
            connector = aiohttp.TCPConnector(limit=0, keepalive_timeout=_IDLE_REUSE_S)
            self._session = aiohttp.ClientSession(connector=connector)
        return self._session

    async def send(self, prompt: Prompt, sampling: Sampling) -> RequestRecord:
        """Send one streamed request and record what happened; server-side failures set `error`."""
        url = self._urls[prompt.api]
        body = {**build_request_body(prompt, sampling, self.model), **self.extra_body}
        reused = self.keep_alive
        session = self._get_session()
        state = _StreamState(prompt.api, self.spec_stats_extractor)
        send_ns = time.perf_counter_ns()
        error, end_ns = await self._attempt(session, url, body, state)
        if reused and error is not None and state.stale_connection:
            # Nothing reached the server: send again on a new connection, timed from this send.
            self._note_stale()
            session = self._get_session(fresh=True)
            state = _StreamState(prompt.api, self.spec_stats_extractor)
            send_ns = time.perf_counter_ns()
            error, end_ns = await self._attempt(session, url, body, state)
        self._note_outcome(error)
        return state.record(prompt.prompt_id, send_ns, end_ns, error)

    def _note_outcome(self, error: str | None) -> None:
        """Count timeouts in a row (a success resets the count); raise EngineStalled at the limit."""
        if error is None:
            self.consecutive_timeouts = 0
            return
        if not error.startswith(TIMEOUT_ERROR_PREFIX):
            return
        self.consecutive_timeouts += 1
        limit = self.max_consecutive_timeouts
        if limit is not None and self.consecutive_timeouts >= limit:
            raise EngineStalled(
                f"server at {self.base_url} stopped answering: {self.consecutive_timeouts} requests in a row "
                f"timed out after {self.timeout_s:g} s each; the setting is abandoned; fix: see the server log "
                "(raise request_timeout_s if requests are legitimately this slow)"
            )

    def _note_stale(self) -> None:
        self.stale_retries += 1
        if self.keep_alive and self.stale_retries >= _STALE_LIMIT:
            self.keep_alive = False
            _log.warning(
                "%s closed %d kept-alive connections after responses; opening one connection per request from now on",
                self.base_url,
                self.stale_retries,
            )

    async def _attempt(
        self, session: aiohttp.ClientSession, url: str, body: Mapping[str, Any], state: _StreamState
    ) -> tuple[str | None, int]:
        """One try at a request: (error or None, end time). Sets `state.stale_connection` when it failed
        before any response arrived, the way a request on a connection the server had closed fails
        (a refused connect is not that: the server is gone, and sending again would not help)."""
        responded = False
        try:
            async with asyncio.timeout(self.timeout_s):
                async with session.post(
                    url,
                    json=body,
                    headers={"Accept": "text/event-stream"},
                    timeout=_NO_AIOHTTP_DEADLINE,
                ) as resp:
                    responded = True
                    if resp.status >= 400:
                        text = await resp.text(errors="replace")
                        return f"http {resp.status}: {text[:_ERROR_BODY_CHARS]}", time.perf_counter_ns()
                    return await self._consume(resp, state)
        except TimeoutError:
            return f"{TIMEOUT_ERROR_PREFIX}{float(self.timeout_s)} s", time.perf_counter_ns()
        except (aiohttp.ClientError, OSError) as exc:
            end_ns = time.perf_counter_ns()
            stale = isinstance(exc, aiohttp.ServerDisconnectedError | aiohttp.ClientOSError)
            state.stale_connection = stale and not responded and not isinstance(exc, aiohttp.ClientConnectorError)
            return f"{CONNECTION_ERROR_PREFIX}{_describe(exc)}"[:_ERROR_BODY_CHARS], end_ns

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
        if state.completion_tokens is None and self.tokens_from_chunks:
            state.completion_tokens = len(state.chunk_ns)
            self.chunk_counted += 1
        if state.completion_tokens is None:
            return "stream ended without usage (the server ignored stream_options.include_usage)", done_ns
        return None, done_ns


__all__ = ["CONNECTION_ERROR_PREFIX", "TIMEOUT_ERROR_PREFIX", "StreamingClient", "build_request_body", "stall_guard"]
