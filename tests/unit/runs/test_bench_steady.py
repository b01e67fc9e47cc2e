"""`bench --url` against a server whose timing is known exactly: the steady-state rate is the truth.

The server (its own thread and event loop, so the client's load does not move its clock) streams TOKENS
tokens per request, token i at handler start + (i + 1) x DT on an absolute schedule, one token per chunk,
with unlimited concurrency, and logs when each request arrived and when it emitted each token
(`perf_counter_ns`, the client's clock). The truth of a cell is then exact: the tokens the server produced
inside the cell's steady span (each spread over the gap before its emission), divided by its length.
The client's steady-state figure must match it within 1%, with the tool's own share of C
(MIN_STEADY_CONCURRENCY) in flight inside the span; the whole-window figure (ramp and drain included)
falls short of it.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from aiohttp import web

from specfrontier.analysis import load_run
from specfrontier.analysis.summary import MIN_STEADY_CONCURRENCY
from specfrontier.metrics.steady import steady_span
from specfrontier.runs.bench import BenchOptions, open_bench

TOKENS = 20
DT = 0.05


class KnownServer:
    """The known-timing server in a thread of its own."""

    def __init__(self) -> None:
        self.streams: list[list[int]] = []
        """Per request: its arrival, then the emission of each token (`perf_counter_ns`)."""
        self.url = ""
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)

    async def _stream(self, request: web.Request) -> web.StreamResponse:
        start = time.monotonic()
        emitted = [time.perf_counter_ns()]  # the arrival, then each token's emission
        self.streams.append(emitted)
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for i in range(TOKENS):
            await asyncio.sleep(max(0.0, start + (i + 1) * DT - time.monotonic()))
            finish = "length" if i == TOKENS - 1 else None
            chunk = {"choices": [{"index": 0, "text": " x", "delta": {"content": " x"}, "finish_reason": finish}]}
            emitted.append(time.perf_counter_ns())
            await resp.write(f"data: {json.dumps(chunk)}\n\n".encode())
        usage = {"choices": [], "usage": {"prompt_tokens": 4, "completion_tokens": TOKENS, "total_tokens": TOKENS + 4}}
        await resp.write(f"data: {json.dumps(usage)}\n\ndata: [DONE]\n\n".encode())
        return resp

    async def _models(self, _request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": "known-timing"}]})

    def _serve(self) -> None:
        asyncio.set_event_loop(self._loop)
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._stream)
        app.router.add_post("/v1/completions", self._stream)
        app.router.add_get("/v1/models", self._models)
        self._runner = web.AppRunner(app, access_log=None)
        self._loop.run_until_complete(self._runner.setup())
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        self._loop.run_until_complete(site.start())
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.url = f"http://127.0.0.1:{port}"
        self._ready.set()
        self._loop.run_forever()

    def start(self) -> None:
        self._thread.start()
        self._ready.wait(10)

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()  # else its __del__ warns later, inside another test

    def rate_inside(self, start_ns: int, end_ns: int) -> float:
        """Tokens the server produced inside the span per second, each token's production spread over the
        time since the stream's previous emission (its arrival, for the first). Counting whole emissions
        instead makes the truth jump by up to a token per stream at each edge: the span ends at a request's
        last token, when every other stream, a little out of phase, was a moment from its next one, and
        the truth then read 0.7 % under a client that spreads each gap the same way (1585 vs 1596 tokens
        at C=16)."""
        produced = 0.0
        for times in self.streams:
            edges = np.asarray(times, dtype=np.float64)
            before, after = edges[:-1], edges[1:]
            inside = np.clip(np.minimum(after, end_ns) - np.maximum(before, start_ns), 0.0, None)
            produced += float(np.sum(inside / np.maximum(after - before, 1.0)))
        return produced / ((end_ns - start_ns) / 1e9)


@pytest.fixture
def known_server() -> Iterator[KnownServer]:
    server = KnownServer()
    server.start()
    try:
        yield server
    finally:
        server.stop()


async def test_the_steady_rate_is_the_servers_true_rate_at_every_level(
    known_server: KnownServer, tmp_path: Path
) -> None:
    levels = (1, 4, 16, 64)
    options = BenchOptions(
        known_server.url,
        concurrency=levels,
        repeats=1,
        rounds_per_cell=2,
        warmup_rounds=1,
        max_tokens=TOKENS,
        cell_duration_s=6.0,
        client_workers=1,
        store=tmp_path / "b.db",
    )
    bench, run_id = await open_bench(options)
    await bench.run(run_id)
    data = load_run(bench.store, run_id)
    rows = {row.concurrency: row for row in bench.store.cells(run_id)}
    for level in levels:
        cell = next(c for c in data.cells if c.concurrency == level)
        span = steady_span(rows[level].requests, level)
        assert span is not None
        truth = known_server.rate_inside(*span)
        steady, window = cell.steady_tok_s.median, cell.window_tok_s.median
        assert steady is not None and window is not None
        print(
            f"C={level}: truth {truth:.1f}, steady {steady:.1f}, window {window:.1f} tok/s; in flight "
            f"{cell.steady_concurrency.median:.3f} (window {cell.achieved_concurrency.median:.3f})"
        )
        assert steady == pytest.approx(truth, rel=0.01), (level, steady, truth)
        # In flight inside the span: the tool's own rule (MIN_STEADY_CONCURRENCY of C), not a tighter one.
        # The client re-issues a finished request after a gap that grows with the host's load (server and
        # client share this process): a loaded CI host read 62.77 of 64 (98.1 %) while the rate above was
        # still exact (1206.1 against a truth of 1202.5 tok/s).
        inside = cell.steady_concurrency.median or 0
        assert inside >= MIN_STEADY_CONCURRENCY * level, (level, inside)
        assert inside <= level, (level, inside)
        assert (cell.steady_s.median or 0) >= 3.0  # the duration bound gave the steady span its length
        # Ramp and drain pull the whole-window figure below the truth. At C=4 and C=16 that loss
        # (0.01 % and 0.25 % here) is within the wall-clock jitter of the two spans (a CI run read
        # window 79.717 vs steady 79.711 at C=4), so the strict ordering is asserted only at C=64,
        # where the loss is about 2 %; below that, the window must not exceed the truth beyond jitter.
        assert window <= steady * 1.002, (level, window, steady)
        if level >= 64:
            assert window < steady, (level, window, steady)
        assert cell.aggregate_tok_s.median == steady  # what decisions compare is the steady figure
        assert not cell.steady_too_short
