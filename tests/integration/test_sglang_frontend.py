"""The SGLang adapter against SGLang 0.5.23's own server code (`.venv-sglang`, `scripts/install.sh --sglang`):
SGLang's parser and start-up resolution, TokenizerManager, DetokenizerManager and FastAPI app, with the
simulator standing in for its scheduler (`specfrontier.sim.sglang_frontend`). Every response below is
formatted by SGLang's code, and `spec_accept_rate` / `spec_accept_length` are computed by its
TokenizerManager (srt/managers/tokenizer_manager.py:3138 `_calculate_spec_decoding_metrics`).

One server (NGRAM, `--max-running-requests` unset) is shared by the request-level tests (a launch imports
SGLang in three processes: ~20-100 s on 2 cores); the sweep launches its own per setting."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import pytest_asyncio

from builders import run_bench
from sglang_frontend import (  # noqa: F401 (frontend_tagged: the module's autouse fixture)
    SGLANG_VERSION,
    frontend_engine,
    frontend_server,
    frontend_tagged,
    require_sglang,
)
from specfrontier.analysis import load_run
from specfrontier.config.load import parse_config
from specfrontier.engines.sglang import SGLangAdapter, SGLangEngine, SGLangSetting
from specfrontier.errors import EngineTimeout
from specfrontier.load import StreamingClient
from specfrontier.metrics.counters import PER_REQUEST_EXACT_SOURCE
from specfrontier.process.launch import ServerProcess, free_port
from specfrontier.records import Prompt, RequestRecord, Sampling
from specfrontier.runs.bench import BenchOptions
from specfrontier.runs.sweep import open_sweep
from specfrontier.store import Store

pytestmark = [pytest.mark.sglang, pytest.mark.slow]

NGRAM = SGLangSetting(name="ngram-d4", algorithm="NGRAM", num_draft_tokens=4)
COPY = "Repeat exactly: the quick brown fox jumps over the lazy dog. the quick brown fox"
PROMPTS = (
    Prompt("copy", "test", "chat", 24, messages=(("user", COPY),)),
    Prompt("list", "test", "completion", 24, text="Count from one to twenty in words, separated by commas."),
)


class Served:
    """The shared server: its root URL, the adapter that launched it and its process."""

    def __init__(self, root: str, adapter: SGLangAdapter, server: ServerProcess) -> None:
        self.root, self.adapter, self.server = root, adapter, server


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def served(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Served]:
    require_sglang()
    adapter = SGLangAdapter(SGLangEngine.model_validate(frontend_engine()))
    adapter.prepare((NGRAM,))
    port = free_port()
    argv = adapter.command(NGRAM, port=port, max_concurrency=4)
    async with frontend_server(argv, port, tmp_path_factory.mktemp("sglang") / "server.log") as server:
        yield Served(f"http://127.0.0.1:{port}", adapter, server)


def _recording(adapter: SGLangAdapter, seen: list[Mapping[str, Any]]) -> Any:
    """The adapter's per-request extractor, keeping every sglext chunk SGLang sent (what SGLang reported)."""

    def extract(chunk: Mapping[str, Any]) -> Any:
        ext = chunk.get("sglext")
        if isinstance(ext, Mapping) and isinstance(ext.get("spec_tokens_details"), Mapping):
            seen.append(ext["spec_tokens_details"])
        return adapter.request_spec_stats(chunk)

    return extract


async def _send(served: Served, prompts: tuple[Prompt, ...], seen: list[Mapping[str, Any]]) -> list[RequestRecord]:
    async with StreamingClient(
        served.root,
        timeout_s=120,
        spec_stats_extractor=_recording(served.adapter, seen),
        extra_body=served.adapter.request_extras(),
    ) as client:
        return [await client.send(p, Sampling(temperature=t)) for p in prompts for t in (0.0, 0.7)]


@pytest.mark.asyncio(loop_scope="module")
async def test_streamed_chat_and_completions_carry_sglangs_own_acceptance(served: Served) -> None:
    """Both endpoints, streaming, with the adapter's extras: every request answered (issue 37: SGLang refused
    every streamed chat request that asked for return_meta_info), and the acceptance stored per request is
    what SGLang's TokenizerManager reported: its spec_accept_rate = correct / proposed and spec_accept_length
    = completion tokens / verify steps agree with the stored counts within 0.1 %."""
    seen: list[Mapping[str, Any]] = []
    records = await _send(served, PROMPTS, seen)
    assert all(r.ok for r in records), [r.error for r in records if not r.ok]
    assert len(seen) == len(records) == 4
    for record, details in zip(records, seen, strict=True):
        spec = record.spec
        assert spec is not None and spec.verify_steps == details["spec_verify_ct"] > 0
        assert spec.accepted_tokens == details["spec_num_correct_drafts"]
        assert spec.draft_tokens == details["spec_num_proposed_drafts"] == spec.verify_steps * (4 - 1)
        assert spec.accepted_tokens / spec.draft_tokens == pytest.approx(details["spec_accept_rate"], rel=1e-3)
        assert record.completion_tokens is not None
        assert record.completion_tokens / spec.verify_steps == pytest.approx(details["spec_accept_length"], rel=1e-3)


@pytest.mark.asyncio(loop_scope="module")
async def test_streaming_chat_refuses_return_meta_info_and_whole_chat_carries_it(served: Served) -> None:
    """SGLang's own refusal (srt/entrypoints/openai/serving_chat.py:1321-1325), and the meta_info a
    non-streaming chat carries, read by the adapter as the sglext figures."""
    body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 12, "temperature": 0}
    async with aiohttp.ClientSession() as session:
        async with session.post(
            served.root + "/v1/chat/completions", json={**body, "stream": True, "return_meta_info": True}
        ) as resp:
            refused = await resp.json()
            assert resp.status == 400
        assert "return_meta_info is not supported with streaming" in refused["message"]
        async with session.post(
            served.root + "/v1/chat/completions",
            json={**body, "return_meta_info": True, "return_spec_tokens_details": True},
        ) as resp:
            whole = await resp.json()
            assert resp.status == 200
    meta = whole["choices"][0]["meta_info"]
    from_meta = SGLangAdapter.request_spec_stats({"choices": [{"meta_info": meta}]})
    from_sglext = SGLangAdapter.request_spec_stats({"sglext": whole["sglext"]})
    assert from_meta is not None and from_meta == from_sglext and from_meta.verify_steps > 0


@pytest.mark.asyncio(loop_scope="module")
async def test_server_info_reports_sglangs_resolution_and_the_adapter_reads_it(served: Served) -> None:
    """SGLang's own start-up hooks resolved the NGRAM setting (speculative_hook.py `_handle_ngram`): topk
    becomes the BFS breadth 10, steps 0, and the unset --max-running-requests is reset to 48, which the
    adapter reports from /server_info internal_states."""
    async with aiohttp.ClientSession() as session:
        async with session.get(served.root + "/server_info") as resp:
            info = await resp.json()
        capacity = await served.adapter.capacity(session, served.root, NGRAM)
        detected = await SGLangAdapter.detect(session, served.root)
    assert info["version"] == SGLANG_VERSION
    assert info["speculative_algorithm"] == "NGRAM" and info["speculative_eagle_topk"] == 10
    assert info["speculative_num_steps"] == 0 and info["speculative_num_draft_tokens"] == 4
    assert info["max_running_requests"] == 48
    state = info["internal_states"][0]
    assert state["effective_max_running_requests_per_dp"] == 48
    assert capacity.max_running_requests == 48
    assert "effective_max_running_requests_per_dp" in capacity.source
    assert "reset the unset --max-running-requests to 48" in capacity.source and "a MODEL" in capacity.source
    assert detected is not None and detected.version == f"sglang {SGLANG_VERSION}"


@pytest.mark.asyncio(loop_scope="module")
async def test_health_generate_answers_after_a_second_so_a_one_second_probe_never_sees_it(served: Served) -> None:
    """SGLang's /health_generate sleeps 1 s before it first looks for the scheduler's answer
    (srt/entrypoints/http_server.py:779-780): the 1 s probe of 1b87518 timed out on every try (issue 37); the
    adapter's probe sees the same running server ready."""
    with pytest.raises(EngineTimeout):
        await served.server.wait_ready(served.root + "/health_generate", timeout_s=4, probe_timeout_s=1.0)
    ready = await served.server.wait_ready(
        served.root + "/health_generate", timeout_s=60, probe_timeout_s=served.adapter.health_timeout_s
    )
    assert ready > 0


def test_bench_recognises_sglang_and_reads_its_capacity_and_acceptance(served: Served, tmp_path: Path) -> None:
    """`bench --url` against SGLang's own server: detected by /server_info, the capacity SGLang resolved (from
    internal_states), and every cell's acceptance summed from SGLang's per-request sglext figures."""
    store = tmp_path / "b.db"
    run_id = run_bench(
        BenchOptions(served.root, concurrency=(1, 2), repeats=1, max_tokens=16, rounds_per_cell=1, store=store)
    )
    data = load_run(Store(store), run_id)
    assert data.run.status == "done" and data.run.engine == "sglang"
    assert data.run.environment["engine_version"] == f"sglang {SGLANG_VERSION}"
    (setting,) = data.settings
    assert setting.capacity == 48  # SGLang's reset; bench did not launch it, so it cannot tell a set 48 from it
    assert "effective_max_running_requests_per_dp" in (setting.capacity_source or "")
    assert setting.speculative
    for level in (1, 2):
        cell = data.cell(setting.name, level)
        assert cell is not None and cell.acceptance_source == PER_REQUEST_EXACT_SOURCE
        assert cell.acceptance_rate is not None and 0 < cell.acceptance_rate <= 1


def _tune_config(store: Path) -> dict[str, Any]:
    return {
        "engine": frontend_engine(),
        "workloads": [
            {"source": "builtin:cpu-mix", "name": "chat", "mode": "chat", "prompts": 2, "max_tokens": 24},
            {"source": "builtin:cpu-mix", "name": "completion", "mode": "completion", "prompts": 2, "max_tokens": 24},
        ],
        "concurrency": [1, 2],
        "repeats": 1,
        "rounds_per_cell": 1,
        "warmup_rounds": 0,
        "settings": [
            {"name": "no-spec"},
            {"name": "ngram-d4", "algorithm": "NGRAM", "num_draft_tokens": 4},
            {"name": "standalone-tree", "algorithm": "STANDALONE", "num_steps": 2, "eagle_topk": 2,
             "num_draft_tokens": 4, "max_running_requests": 8},
            {"name": "eagle3-adaptive", "algorithm": "EAGLE3", "num_steps": 3, "eagle_topk": 1,
             "adaptive_config": {1: [3], 2: [1]}},
        ],
        "store": str(store),
    }  # fmt: skip


async def test_tune_over_chat_and_completion_streams_against_sglangs_front_end(tmp_path: Path) -> None:
    """`tune` launches SGLang's own server per setting (readiness on the real /health_generate), streams chat
    and completions, and stores SGLang's per-request counts: every request answered, drafted = verify steps
    x (draft tokens - 1) as SGLang's TokenizerManager counts proposed drafts, capacities as SGLang resolved
    them (48 after its reset, 8 when set). Settings: no speculation, NGRAM, a STANDALONE tree (the target as
    its own draft) and an EAGLE3 chain under SGLang's adaptive config (its file written by the adapter, read
    by SGLang's own parser)."""
    require_sglang()
    sweep, run_id = open_sweep(parse_config(_tune_config(tmp_path / "s.db")), None, resume=None)
    await sweep.run(run_id)
    data = load_run(sweep.store, run_id)
    assert data.run.status == "done", [(s.name, s.error) for s in sweep.store.settings(run_id)]
    assert sorted(data.workloads) == ["chat@greedy", "completion@greedy"]
    assert data.setting("ngram-d4").capacity == 48 and data.setting("standalone-tree").capacity == 8
    assert data.setting("eagle3-adaptive").capacity == 48
    cells = sweep.store.cells(run_id)
    assert len(cells) == 4 * 2 * 2  # settings x workloads x levels, one repeat
    for cell in cells:
        assert cell.requests and all(r.ok for r in cell.requests), (cell.setting_id, cell.workload)
        for record in cell.requests:
            spec = record.spec
            if cell.setting_id == "no-spec":
                assert spec is None or spec.draft_tokens == 0
            else:  # every speculative setting resolves to 4 draft tokens (the adaptive one: its deepest, 3 + 1)
                assert spec is not None and spec.verify_steps
                assert spec.draft_tokens == spec.verify_steps * 3, (cell.setting_id, spec)
    launched = json.dumps([s.command for s in sweep.store.settings(run_id)])
    assert "specfrontier.sim.sglang_frontend" in launched and "--speculative-adaptive-config" in launched
