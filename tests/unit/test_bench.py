"""`bench` against a running server: option and URL checks first, then probing, cells and store.

The server is a local aiohttp app speaking llama.cpp's face (/v1/models, /props, streamed chat with
`timings` carrying draft counts): real HTTP, real store; only the engine is a stand-in.
"""

from __future__ import annotations

import asyncio
import json
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiohttp import web

from builders import run_bench
from specfrontier.analysis import load_run
from specfrontier.cli import main
from specfrontier.config.limits import MAX_CLIENT_WORKERS, MAX_CONCURRENCY, MAX_RATE
from specfrontier.errors import ConfigError, EngineError
from specfrontier.metrics.counters import PER_REQUEST_SOURCE
from specfrontier.runs.bench import BenchOptions, keep_alive, parse_levels, server_root
from specfrontier.store import Store


@pytest.mark.parametrize(
    ("url", "root"),
    [
        ("http://127.0.0.1:8080", "http://127.0.0.1:8080"),
        ("http://127.0.0.1:8080/", "http://127.0.0.1:8080"),
        ("http://127.0.0.1:8080/v1", "http://127.0.0.1:8080"),
        ("https://example.org/llm/v1/", "https://example.org/llm"),
        ("http://[::1]:9000", "http://[::1]:9000"),
    ],
)
def test_server_root_accepts_base_urls(url: str, root: str) -> None:
    assert server_root(url) == root


@pytest.mark.parametrize(
    ("url", "match"),
    [
        ("127.0.0.1:8080", "is not http or https"),
        ("ftp://host", "'ftp' is not http or https"),
        ("http://", "no host"),
        ("http://host:99999", "bad port"),
        ("http://host/v1/chat/completions", "an endpoint, not the server root"),
        ("http://user:pw@host", "credentials"),
    ],
)
def test_server_root_rejects_with_the_fix(url: str, match: str) -> None:
    with pytest.raises(ConfigError, match=match) as info:
        server_root(url)
    assert "fix: pass the server's base URL" in str(info.value)


def test_levels_parse_and_reject() -> None:
    assert parse_levels("64,1, 16,16", "--concurrency", int) == (1, 16, 64)
    assert parse_levels("2.5,1", "--rate", float) == (1.0, 2.5)
    with pytest.raises(ConfigError, match=r"--concurrency = '1,x': 'x' is not a whole number"):
        parse_levels("1,x", "--concurrency", int)
    with pytest.raises(ConfigError, match="must be > 0"):
        parse_levels("0", "--rate", float)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"concurrency": (1,), "rates": (1.0,)}, "both given"),
        ({}, "neither --concurrency nor --rate"),
        ({"rates": (1.0,)}, "exactly one of --duration or --requests"),
        ({"concurrency": (1,), "requests": 5}, "apply to --rate only"),
        ({"rates": (1.0,), "duration_s": 2.0, "warmup_s": 2.0}, "leaves nothing"),
        ({"concurrency": (1,), "api": "embeddings"}, "--api = 'embeddings'"),
        ({"concurrency": (1,), "repeats": 0}, "--repeats = 0"),
        ({"concurrency": (1, 100000)}, r"--concurrency = 100000: more than 4096 .*fix: pass levels from 1 to 4096"),
        ({"rates": (100000.5,), "requests": 5}, r"--rate = 100000.5: more than 100000 req/s .*fix: pass rates up"),
        ({"rates": (1.0,), "requests": 5, "max_in_flight": 4097}, r"--max-in-flight = 4097: more than 4096"),
        ({"concurrency": (1,), "client_workers": 257}, r"--client-workers = 257: more than 256 .*or auto"),
        ({"concurrency": (1,), "max_client_lag_share": 0.0}, r"--max-client-lag-share = 0.0: must be above 0"),
        ({"concurrency": (1,), "cell_lifetimes": 2.0}, r"--cell-lifetimes = 2.0: must be 4..1000"),
    ],
)
def test_bad_options_are_config_errors(kwargs: dict[str, object], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        BenchOptions("http://127.0.0.1:1", **kwargs).validate()  # type: ignore[arg-type]


def test_the_largest_loads_tune_accepts_pass() -> None:
    BenchOptions("http://127.0.0.1:1", concurrency=(MAX_CONCURRENCY,), client_workers=MAX_CLIENT_WORKERS).validate()
    BenchOptions("http://127.0.0.1:1", rates=(MAX_RATE,), requests=5, max_in_flight=MAX_CONCURRENCY).validate()


class LlamaLike:
    """A llama.cpp-shaped server: 4 chunks of 2 tokens per request, draft counts in the final timings."""

    def __init__(self) -> None:
        self.bodies: list[dict[str, object]] = []
        self.peers: list[object] = []

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/v1/models", self.models)
        app.router.add_get("/props", self.props)
        app.router.add_post("/v1/chat/completions", self.chat)
        return app

    async def models(self, request: web.Request) -> web.Response:
        return web.json_response({"data": [{"id": "tiny-model"}]})

    async def props(self, request: web.Request) -> web.Response:
        return web.json_response(
            {"total_slots": 3, "default_generation_settings": {"n_ctx": 2048}, "build_info": "b9999-test"}
        )

    async def chat(self, request: web.Request) -> web.StreamResponse:
        self.bodies.append(await request.json())
        self.peers.append(request.transport.get_extra_info("peername") if request.transport else None)
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for i in range(4):
            await asyncio.sleep(0.01)
            choice = {"index": 0, "delta": {"content": f"t{i} "}, "finish_reason": "length" if i == 3 else None}
            await resp.write(f"data: {json.dumps({'choices': [choice]})}\n\n".encode())
        final = {
            "choices": [],
            "usage": {"prompt_tokens": 5, "completion_tokens": 8},
            "timings": {"predicted_n": 8, "draft_n": 6, "draft_n_accepted": 4},
        }
        await resp.write(f"data: {json.dumps(final)}\n\ndata: [DONE]\n\n".encode())
        await resp.write_eof()
        return resp


@pytest.fixture
def server() -> Iterator[tuple[str, LlamaLike]]:
    """The stand-in server on its own thread and loop, so `bench` (which runs its own loop) can reach it."""
    fake = LlamaLike()
    loop = asyncio.new_event_loop()
    runner = web.AppRunner(fake.app())
    loop.run_until_complete(runner.setup())
    site = web.TCPSite(runner, "127.0.0.1", 0)
    loop.run_until_complete(site.start())
    port = runner.addresses[0][1]
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{port}", fake
    finally:
        asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


def test_closed_loop_bench_stores_cells_capacity_and_acceptance(server: tuple[str, LlamaLike], tmp_path: Path) -> None:
    url, fake = server
    store = tmp_path / "b.db"
    run_id = run_bench(BenchOptions(url + "/v1/", concurrency=(1, 2), repeats=2, max_tokens=8, store=store))
    data = load_run(Store(store), run_id)
    assert data.run.status == "done" and data.run.engine == "llama.cpp"
    assert data.run.environment["engine_version"] == "b9999-test"
    (setting,) = data.settings
    assert setting.name == f"llama.cpp@{url.removeprefix('http://')}"
    assert setting.command is None and setting.startup_s is None and setting.status == "done"
    assert (setting.capacity, setting.context_tokens) == (3, 2048)
    assert setting.capacity_source == "llama.cpp /props total_slots"
    assert setting.speculative  # the warmup showed drafted tokens
    assert [(c.concurrency, c.repeats) for c in data.cells] == [(1, 2), (2, 2)]
    cell = data.cell(setting.name, 2)
    assert cell is not None and cell.acceptance_source == PER_REQUEST_SOURCE
    assert cell.acceptance_rate == pytest.approx(4 / 6)
    assert all(b.get("model") == "tiny-model" and b.get("cache_prompt") is False for b in fake.bodies)
    # Detected as llama.cpp, which closes connections after a stream: one connection per request.
    assert setting.params["keep_alive"] is False
    assert len(set(fake.peers)) == len(fake.peers)


def test_keep_alive_flag_reuses_connections(server: tuple[str, LlamaLike], tmp_path: Path) -> None:
    url, fake = server
    store = tmp_path / "b.db"
    run_id = run_bench(BenchOptions(url, concurrency=(2,), repeats=2, max_tokens=8, store=store, keep_alive=True))
    (setting,) = load_run(Store(store), run_id).settings
    assert setting.params["keep_alive"] is True
    assert len(set(fake.peers)) <= 4 < len(fake.peers)  # 2 streams reuse their connections


def test_keep_alive_follows_the_engine() -> None:
    assert keep_alive("llama.cpp") is False
    assert keep_alive("sglang") is True and keep_alive("vllm") is True and keep_alive("unknown") is True


def test_open_loop_bench_keys_cells_by_rate(server: tuple[str, LlamaLike], tmp_path: Path) -> None:
    url, _ = server
    store = tmp_path / "b.db"
    options = BenchOptions(url, rates=(5.0, 10.0), requests=12, warmup_s=0.2, repeats=1, max_tokens=8, store=store)
    run_id = run_bench(options)
    cells = Store(store).cells(run_id)
    assert sorted(c.request_rate for c in cells if c.request_rate is not None) == [5.0, 10.0]
    for c in cells:
        assert c.load is not None and c.load["sent"] == 12 and c.load["measured"] == len(c.requests) < 12


def test_unreachable_server_fails_before_a_store_is_created(tmp_path: Path) -> None:
    store = tmp_path / "never.db"
    with pytest.raises(EngineError, match=r"no answer .*fix: start the server or correct --url"):
        run_bench(BenchOptions("http://127.0.0.1:1", concurrency=(1,), store=store))
    assert not store.exists()


def test_a_non_utf8_prompts_file_fails_before_the_server_is_contacted(tmp_path: Path) -> None:
    prompts = tmp_path / "p.jsonl"
    prompts.write_bytes(b'{"id": "a", "prompt": "caf\xe9"}\n')
    store = tmp_path / "never.db"
    options = BenchOptions("http://127.0.0.1:1", concurrency=(1,), prompts=str(prompts), store=store)
    with pytest.raises(ConfigError) as exc:
        run_bench(options)  # port 1 is closed: an EngineError would mean the server was contacted first
    assert str(exc.value) == (
        f"--prompts = '{prompts}': not UTF-8 text (byte 0xe9 at offset 26, line 1); fix: save it as UTF-8"
    )
    assert not store.exists()


def test_cli_bench_prints_the_report(
    server: tuple[str, LlamaLike], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    url, _ = server
    store = tmp_path / "b.db"
    args = ["bench", "--url", url, "--concurrency", "1,2", "--repeats", "1", "--max-tokens", "8", "--store", str(store)]
    # the stand-in server shares this process (and its GIL) with the client: its lag is not this test's subject
    monkeypatch.setattr(sys, "argv", ["specfrontier", *args, "--keep-alive", "--max-client-lag-share", "1"])
    with pytest.raises(SystemExit) as exit_info:
        main()
    out = capsys.readouterr().out
    assert exit_info.value.code == 0, out
    assert "capacity 3 (llama.cpp /props total_slots)" in out
    assert "Aggregate tok/s" in out and "stored as run" in out
    (run,) = Store(store).runs()
    (setting,) = load_run(Store(store), run.run_id).settings
    assert setting.params["keep_alive"] is True  # --keep-alive overrides the llama.cpp default


def test_cli_bench_bad_url_exits_2_without_a_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    store = tmp_path / "b.db"
    monkeypatch.setattr(sys, "argv", ["specfrontier", "bench", "--url", "localhost:8080", "--store", str(store)])
    with pytest.raises(SystemExit) as exit_info:
        main()
    assert exit_info.value.code == 2
    assert "--url = 'localhost:8080'" in capsys.readouterr().err
    assert not store.exists()


def test_tune_resume_refuses_a_bench_run(
    server: tuple[str, LlamaLike], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    url, _ = server
    store = tmp_path / "b.db"
    run_id = run_bench(BenchOptions(url, concurrency=(1,), repeats=1, max_tokens=8, store=store))
    monkeypatch.setattr(sys, "argv", ["specfrontier", "tune", "--resume", run_id, "--store", str(store)])
    with pytest.raises(SystemExit) as exit_info:
        main()
    assert exit_info.value.code == 2
    assert "a `bench` run; fix: run `specfrontier bench` again" in capsys.readouterr().err
