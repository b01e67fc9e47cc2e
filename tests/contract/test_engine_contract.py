"""The engine contract: what every registered engine must do, checked the same way for each.

Static, for every engine: its config and default settings validate through the registry; its settings
describe themselves (speculative or not, their depth, the same setting at another depth, stored and
rebuilt, read by the merged parameter names); its command binds 127.0.0.1 on the port it is given; its
request extras are JSON.

Live, for every engine that can run here (llama.cpp: the real llama-server; the simulator's HTTP face,
which also exercises SGLang's interface; TensorRT-LLM's adapter against the simulator's face that speaks
trtllm-serve, `specfrontier.sim.trtllm_serve`; the real vLLM for the CPU, marked `vllm`; the toy engine):
launch, readiness on its health path (with the port proven to be the server's), capacity read back,
detection (its own adapter recognises the server, no other adapter claims it), a window of streamed
requests with the extras, counters diffed over the window or summed from per-request stats, and a stop
that leaves no process of the group.

SGLang itself is not installed here: its adapter passes the static part with the `--help` of the
simulator's face (which takes SGLang's spellings), and its live interface is the simulator's.

Adding an engine: give it a `Case` below (the toy engine, `toy_engine.py`, is one file plus its
registration and passes unchanged).
"""

from __future__ import annotations

import functools
import json
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from contract import toy_engine
from specfrontier.config.load import parse_config
from specfrontier.engines import registry
from specfrontier.engines.base import EngineAdapter, EngineSetting
from specfrontier.engines.vllm import InstalledVllm, VllmAdapter, VllmEngine, resolve_python
from specfrontier.load import StreamingClient
from specfrontier.perfmodel.cells import setting_params
from specfrontier.process.launch import ServerProcess, free_port, group_alive
from specfrontier.records import Sampling
from specfrontier.runs.cell import window_counters as _window_counters
from specfrontier.workloads import load_prompts


def _sim_help() -> str:
    done = subprocess.run(
        [sys.executable, "-m", "specfrontier.sim.serve", "--help"], capture_output=True, text=True, check=True
    )
    return done.stdout


def _sglang_adapter(spec: registry.EngineSpec, options: Any) -> EngineAdapter[Any]:
    """SGLang with the simulator face's --help (SGLang's spellings): no SGLang install needed to build argv."""
    return spec.adapter(options, help_text=_sim_help())  # type: ignore[call-arg]


@functools.cache
def _installed_vllm() -> InstalledVllm:
    """The real vLLM's probe, once per session (it imports vLLM: ~15-30 s)."""
    return VllmAdapter._probe(resolve_python(VllmEngine()))


def _vllm_adapter(spec: registry.EngineSpec, options: Any) -> EngineAdapter[Any]:
    return spec.adapter(options, installed=_installed_vllm())  # type: ignore[call-arg]


@dataclass(frozen=True)
class Case:
    engine: str
    options: dict[str, Any]
    baseline: dict[str, Any]
    speculative: dict[str, Any]
    live: bool
    """Whether its server runs here (the live part of the contract)."""
    make_adapter: Callable[[registry.EngineSpec, Any], EngineAdapter[Any]] | None = None
    marks: tuple[pytest.MarkDecorator, ...] = field(default=())


CASES = [
    Case(
        "llamacpp",
        {"name": "llamacpp", "ctx_size": 2048},
        {"name": "baseline"},
        {"name": "ngram", "spec_type": "ngram-simple", "ngram_size_n": 3, "ngram_size_m": 8},
        live=True,
        marks=(pytest.mark.engine,),
    ),
    Case(
        "sglang",
        {"name": "sglang", "model_path": "/models/target"},
        {"name": "no-spec"},
        {"name": "steps3", "algorithm": "EAGLE3", "num_steps": 3, "eagle_topk": 1},
        live=False,
        make_adapter=_sglang_adapter,
    ),
    Case(
        "sim",
        {"name": "sim", "face": "http", "time_scale": 20.0, "startup_timeout_s": 30},
        {"name": "no-spec"},
        {"name": "steps3", "algorithm": "EAGLE3", "num_steps": 3, "eagle_topk": 1},
        live=True,
    ),
    Case(
        "trtllm",  # the real adapter's argv, options file and readers against the face that speaks trtllm-serve
        {
            "name": "trtllm",
            "model": "/models/target",
            "speculative_model": "/models/eagle3",
            "launcher": [sys.executable, "-m", "specfrontier.sim.trtllm_serve"],
            "startup_timeout_s": 30,
            "extra_args": ["--sim_time_scale", "20"],
        },
        {"name": "baseline"},
        {"name": "eagle3-3", "decoding_type": "Eagle3", "max_draft_len": 3},
        live=True,
    ),
    Case(
        "vllm",  # the real vLLM for the CPU (scripts/install.sh --vllm)
        {  # --enforce-eager: ready in ~65 s instead of ~200 s of torch.compile warm-up on 2 cores
            "name": "vllm",
            "model": "smollm2",
            "max_model_len": 1024,
            "cpu_kvcache_space_gib": 1,
            "extra_args": ["--enforce-eager"],
        },
        {"name": "baseline"},
        {
            "name": "ngram-k3",
            "method": "ngram",
            "num_speculative_tokens": 3,
            "prompt_lookup_max": 4,
            "prompt_lookup_min": 2,
        },
        live=True,
        make_adapter=_vllm_adapter,
        marks=(pytest.mark.vllm, pytest.mark.slow),
    ),
    Case("toy", {"name": "toy"}, {"name": "none"}, {"name": "d3", "draft": 3}, live=True),
]
PARAMS = [pytest.param(c, id=c.engine, marks=c.marks) for c in CASES]
LIVE = [pytest.param(c, id=c.engine, marks=c.marks) for c in CASES if c.live]


def test_every_registered_engine_has_a_case() -> None:
    """A new engine must join the contract: its registration is not enough."""
    assert set(registry.engine_names()) <= {c.engine for c in CASES}


@pytest.fixture
def case_spec(case: Case) -> Iterator[registry.EngineSpec]:
    """The case's registered engine; the toy engine is registered for this test only."""
    if case.engine == "toy":
        toy_engine.register_toy()
    try:
        yield registry.spec(case.engine)
    finally:
        if case.engine == "toy":
            registry.unregister("toy")


def _config(case: Case) -> Any:
    return parse_config({"engine": case.options, "settings": [case.baseline, case.speculative], "store": "x.db"})


def _adapter(case: Case, spec: registry.EngineSpec, config: Any) -> EngineAdapter[Any]:
    adapter = case.make_adapter(spec, config.engine) if case.make_adapter else spec.adapter(config.engine)
    adapter.prepare(config.settings)
    return adapter


# -- static ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("case", PARAMS)
def test_config_and_default_settings_validate_through_the_registry(case: Case, case_spec: registry.EngineSpec) -> None:
    config = _config(case)
    assert type(config) is case_spec.config and config.engine.name == case.engine
    defaults = parse_config({"engine": case.options})  # no `settings`: the engine's defaults
    assert defaults.settings == case_spec.default_settings()
    assert any(not s.speculative for s in defaults.settings)


@pytest.mark.parametrize("case", PARAMS)
def test_settings_describe_themselves(case: Case, case_spec: registry.EngineSpec) -> None:
    baseline, speculative = _config(case).settings
    assert isinstance(speculative, EngineSetting) and isinstance(speculative, case_spec.setting)
    assert not baseline.speculative and speculative.speculative
    depth = speculative.depth
    assert depth is not None and baseline.depth is None
    deeper = speculative.with_depth(depth + 1, "deeper")
    assert deeper.depth == depth + 1 and deeper.ladder_parameters() == speculative.ladder_parameters()
    assert 1 <= depth < speculative.max_depth
    rebuilt = registry.stored_setting(case.engine, speculative.name, json.loads(json.dumps(speculative.parameters())))
    assert rebuilt == speculative
    assert setting_params(speculative.parameters()).speculative  # the merged parameter names read it
    assert not setting_params(baseline.parameters()).speculative
    assert registry.vocabulary().draft_length_of(speculative.parameters()) < float("inf")


@pytest.mark.parametrize("case", PARAMS)
def test_command_binds_loopback_on_the_given_port(case: Case, case_spec: registry.EngineSpec) -> None:
    config = _config(case)
    adapter = _adapter(case, case_spec, config)
    for setting in config.settings:
        argv = adapter.command(setting, port=45678, max_concurrency=4)
        assert argv.count("--host") == 1 and argv[argv.index("--host") + 1] == "127.0.0.1", argv
        assert argv.count("--port") == 1 and argv[argv.index("--port") + 1] == "45678", argv
        assert "0.0.0.0" not in argv
    json.dumps(adapter.request_extras())  # the extras go into every request body


# -- live -----------------------------------------------------------------------------------------------


async def _detected_by(root: str) -> list[str]:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session:
        return [s.name for s in registry.specs() if s.detectable and await s.adapter.detect(session, root)]


@pytest.mark.parametrize("case", LIVE)
async def test_a_live_server_honours_the_contract(case: Case, case_spec: registry.EngineSpec, tmp_path: Path) -> None:
    config = _config(case)
    adapter = _adapter(case, case_spec, config)
    prompts = load_prompts("builtin:cpu-mix", max_tokens=32)
    for setting in config.settings:
        port = free_port()
        argv = adapter.command(setting, port=port, max_concurrency=2)
        server = ServerProcess(argv, tmp_path / f"{setting.name}.log", extra_env=adapter.environment())
        root = f"http://127.0.0.1:{port}"
        try:
            server.start()
            await server.wait_ready(root + adapter.health_path, timeout_s=adapter.startup_timeout_s)
            async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as session:
                capacity = await adapter.capacity(session, root, setting)
                assert capacity.max_running_requests >= 1 and capacity.source
                detected = await _detected_by(root)
                assert detected == ([case.engine] if case_spec.detectable else detected[:1]), detected
                before = await adapter.spec_counters(session, root)
                async with StreamingClient(
                    root,
                    timeout_s=60,
                    spec_stats_extractor=adapter.request_spec_stats,
                    extra_body=adapter.request_extras(),
                    keep_alive=adapter.keep_alive,
                ) as client:
                    records = [await client.send(p, Sampling(temperature=0.0)) for p in prompts * 2]
                after = await adapter.spec_counters(session, root)
            assert all(r.ok for r in records), [r.error for r in records if not r.ok]
            counters, source = _window_counters(before, after, records, adapter.counters_source)
            if setting.speculative:
                assert counters is not None and source and counters.draft_tokens > 0, (counters, source)
                assert 0 <= counters.accepted_tokens <= counters.draft_tokens
            else:
                assert counters is None or counters.draft_tokens == 0
        finally:
            pgid = server.pid
            server.stop()
        assert pgid is not None and not group_alive(pgid)
