"""`bench --url` against a vLLM-shaped server: the running limit it reports (issue 31 item 6).

vLLM 0.32's /metrics has the KV cache (`vllm:cache_config_info`, 22.75 requests of 2048 tokens in the
recorded tests/data/vllm_metrics.txt) but not `--max-num-seqs`; a server launched with 4 seats runs at
most 4. The stand-in serves that recorded /metrics with live `vllm:num_requests_running` / `_waiting`
gauges and admits `seats` requests at once: real HTTP, real store; only the engine is a stand-in.
"""

from __future__ import annotations

import asyncio
import json
import re
import threading
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

import pytest
from aiohttp import web

from builders import DATA, run_bench
from specfrontier.analysis import load_run
from specfrontier.runs.bench import BenchOptions
from specfrontier.store import Store

METRICS = (DATA / "vllm_metrics.txt").read_text()


class VllmLike:
    """vLLM's face: /version, /v1/models (max_model_len), /metrics (recorded, live gauges), streamed chat
    with usage on every chunk; `seats` requests run at once, the rest wait; /server_info only when
    `dev_mode` (vLLM serves it with VLLM_SERVER_DEV_MODE=1)."""

    def __init__(self, seats: int, *, dev_mode: bool = False) -> None:
        self.seats, self.dev_mode = seats, dev_mode
        self.running = self.waiting = 0
        self.most_running = 0
        self._free: asyncio.Semaphore | None = None

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/version", self.json({"version": "0.32.0"}))
        app.router.add_get("/v1/models", self.json({"data": [{"id": "m", "max_model_len": 2048}]}))
        app.router.add_get("/metrics", self.metrics)
        if self.dev_mode:
            info = {"vllm_config": {"scheduler_config": {"max_num_seqs": self.seats, "max_num_batched_tokens": 2048}}}
            app.router.add_get("/server_info", self.json(info))
        app.router.add_post("/v1/chat/completions", self.chat)
        return app

    @staticmethod
    def json(body: object) -> Callable[[web.Request], Awaitable[web.Response]]:
        async def answer(request: web.Request) -> web.Response:
            return web.json_response(body)

        return answer

    async def metrics(self, request: web.Request) -> web.Response:
        text = re.sub(r"^(vllm:num_requests_running\{[^}]*\}) .*$", rf"\1 {self.running}.0", METRICS, flags=re.M)
        text = re.sub(r"^(vllm:num_requests_waiting\{[^}]*\}) .*$", rf"\1 {self.waiting}.0", text, flags=re.M)
        return web.Response(text=text)

    async def chat(self, request: web.Request) -> web.StreamResponse:
        await request.json()
        if self._free is None:
            self._free = asyncio.Semaphore(self.seats)
        self.waiting += 1
        async with self._free:
            self.waiting -= 1
            self.running += 1
            self.most_running = max(self.most_running, self.running)
            try:
                return await self._stream(request)
            finally:
                self.running -= 1

    async def _stream(self, request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for i in range(4):
            await asyncio.sleep(0.15)
            choice = {"index": 0, "delta": {"content": f"t{i} "}, "finish_reason": "length" if i == 3 else None}
            usage = {"prompt_tokens": 5, "completion_tokens": i + 1, "total_tokens": i + 6}
            await resp.write(f"data: {json.dumps({'choices': [choice], 'usage': usage})}\n\n".encode())
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp


def _serve(fake: VllmLike) -> Iterator[str]:
    loop = asyncio.new_event_loop()
    runner = web.AppRunner(fake.app())
    loop.run_until_complete(runner.setup())
    site = web.TCPSite(runner, "127.0.0.1", 0)
    loop.run_until_complete(site.start())
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}"
    finally:
        asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


@pytest.fixture
def four_seats() -> Iterator[tuple[str, VllmLike]]:
    fake = VllmLike(4)
    for url in _serve(fake):
        yield url, fake


@pytest.fixture
def four_seats_dev_mode() -> Iterator[tuple[str, VllmLike]]:
    fake = VllmLike(4, dev_mode=True)
    for url in _serve(fake):
        yield url, fake


def test_the_running_limit_is_observed_not_the_kv_cache_bound(four_seats: tuple[str, VllmLike], tmp_path: Path) -> None:
    url, fake = four_seats
    store = tmp_path / "b.db"
    run_id = run_bench(BenchOptions(url, concurrency=(1, 4), repeats=1, rounds_per_cell=1, max_tokens=8, store=store))
    (setting,) = load_run(Store(store), run_id).settings
    assert setting.capacity == 4  # it read 22 (the KV cache's 22.75 requests of max_model_len) before
    source = setting.capacity_source or ""
    assert "an upper bound of 22; max_num_seqs not exposed" in source
    assert "effective running limit 4 observed under load (warm-up at C=8" in source
    assert fake.most_running == 4


def test_a_limit_the_server_exposes_is_read_and_the_warm_up_stays_at_the_top_level(
    four_seats_dev_mode: tuple[str, VllmLike], tmp_path: Path
) -> None:
    url, fake = four_seats_dev_mode
    store = tmp_path / "b.db"
    run_id = run_bench(BenchOptions(url, concurrency=(1, 2), repeats=1, rounds_per_cell=1, max_tokens=8, store=store))
    (setting,) = load_run(Store(store), run_id).settings
    assert setting.capacity == 4
    assert "--max-num-seqs 4 read from /server_info scheduler_config (VLLM_SERVER_DEV_MODE=1)" in (
        setting.capacity_source or ""
    )
    assert "warm-up at C=2" in (setting.capacity_source or "")  # no load above the top level was needed
    assert fake.waiting == 0 and fake.most_running == 2
