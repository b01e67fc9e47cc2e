"""The engine contract as base classes: what every registered engine must do, checked the same way for each.

An engine joins the contract with one test file, `tests/contract/test_<engine>.py`, holding a class
`Test<Engine>Contract` that subclasses `EngineContract` (static part only) or `LiveEngineContract` (static
and live) and fills in the class attributes: the engine's name, engine options, a baseline and a
speculative setting. Nothing else lists the engines: `test_every_engine.py` finds the subclasses by
importing the test files and fails for a registered engine without one. An engine that
`specfrontier.engines` does not register (a toy, a plugin under test) sets `registration`: the fixture
registers it for that class's own tests only and removes it after, so no other test sees it.

Static, for every engine: its config and default settings validate through the registry; its settings
describe themselves (speculative or not, their depth, the same setting at another depth, stored and
rebuilt, read by the merged parameter names); its command binds 127.0.0.1 on the port it is given; its
request extras are JSON.

Live, for every engine whose server runs here: launch, readiness on its health path (with the port
proven to be the server's), capacity read back, detection (its own adapter recognises the server, no
other adapter claims it), a window of streamed requests with the extras, counters diffed over the window
or summed from per-request stats, and a stop that leaves no process of the group.

Like Optuna's sampler conformance suite (optuna/testing/pytest_samplers.py: a base class each sampler's
test subclasses), the checks live once here and each engine's file says only what is its own.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import aiohttp
import pytest

from specfrontier.config.load import parse_config
from specfrontier.engines import registry
from specfrontier.engines.base import EngineAdapter, EngineSetting, ParamNames
from specfrontier.load import StreamingClient
from specfrontier.metrics.counters import window_counters
from specfrontier.perfmodel.cells import setting_params
from specfrontier.process.launch import ServerProcess, free_port, group_alive
from specfrontier.records import Sampling
from specfrontier.workloads import load_prompts


class EngineContract:
    """The static contract. A subclass sets the four class attributes below (and `registration` for an
    engine `specfrontier.engines` does not register); `make_adapter` when its adapter needs more than the
    engine options to build a command here."""

    engine: ClassVar[str]
    """The registered name (`engine.name` in a config)."""
    options: ClassVar[dict[str, Any]]
    """The config's `engine:` block."""
    baseline: ClassVar[dict[str, Any]]
    """A setting without speculation."""
    speculative: ClassVar[dict[str, Any]]
    """A speculative setting with a depth of at least 1 below the setting's `max_depth`."""
    registration: ClassVar[tuple[registry.EngineSpec, ParamNames | None] | None] = None
    """The engine's spec and parameter names when it is not a built-in one: registered around each test."""

    def make_adapter(self, spec: registry.EngineSpec, options: Any) -> EngineAdapter[Any]:
        """The adapter the tests use (default: built from the engine options, as a sweep builds it)."""
        return spec.adapter(options)

    @pytest.fixture
    def engine_spec(self) -> Iterator[registry.EngineSpec]:
        """The engine's registered spec; a `registration` is added for the test and removed after it."""
        if self.registration is None:
            yield registry.spec(self.engine)
            return
        spec, names = self.registration
        registry.register(spec, names)
        try:
            yield spec
        finally:
            registry.unregister(spec.name)

    def config(self) -> Any:
        return parse_config({"engine": self.options, "settings": [self.baseline, self.speculative], "store": "x.db"})

    def prepared_adapter(self, spec: registry.EngineSpec, config: Any) -> EngineAdapter[Any]:
        adapter = self.make_adapter(spec, config.engine)
        adapter.prepare(config.settings)
        return adapter

    def test_config_and_default_settings_validate_through_the_registry(self, engine_spec: registry.EngineSpec) -> None:
        config = self.config()
        assert type(config) is engine_spec.config and config.engine.name == self.engine
        defaults = parse_config({"engine": self.options})  # no `settings`: the engine's defaults
        assert defaults.settings == engine_spec.default_settings()
        assert any(not s.speculative for s in defaults.settings)

    def test_settings_describe_themselves(self, engine_spec: registry.EngineSpec) -> None:
        baseline, speculative = self.config().settings
        assert isinstance(speculative, EngineSetting) and isinstance(speculative, engine_spec.setting)
        assert not baseline.speculative and speculative.speculative
        depth = speculative.depth
        assert depth is not None and baseline.depth is None
        deeper = speculative.with_depth(depth + 1, "deeper")
        assert deeper.depth == depth + 1 and deeper.ladder_parameters() == speculative.ladder_parameters()
        assert 1 <= depth < speculative.max_depth
        stored = json.loads(json.dumps(speculative.parameters()))
        assert registry.stored_setting(self.engine, speculative.name, stored) == speculative
        assert setting_params(speculative.parameters()).speculative  # the merged parameter names read it
        assert not setting_params(baseline.parameters()).speculative
        assert registry.vocabulary().draft_length_of(speculative.parameters()) < float("inf")

    def test_command_binds_loopback_on_the_given_port(self, engine_spec: registry.EngineSpec) -> None:
        config = self.config()
        adapter = self.prepared_adapter(engine_spec, config)
        for setting in config.settings:
            argv = adapter.command(setting, port=45678, max_concurrency=4)
            assert argv.count("--host") == 1 and argv[argv.index("--host") + 1] == "127.0.0.1", argv
            assert argv.count("--port") == 1 and argv[argv.index("--port") + 1] == "45678", argv
            assert "0.0.0.0" not in argv
        json.dumps(adapter.request_extras())  # the extras go into every request body


async def _detected_by(root: str) -> list[str]:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session:
        return [s.name for s in registry.specs() if s.detectable and await s.adapter.detect(session, root)]


class LiveEngineContract(EngineContract):
    """The static contract plus a live server of the engine, for an engine whose server runs here."""

    async def test_a_live_server_honours_the_contract(self, engine_spec: registry.EngineSpec, tmp_path: Path) -> None:
        config = self.config()
        adapter = self.prepared_adapter(engine_spec, config)
        prompts = load_prompts("builtin:cpu-mix", max_tokens=32)
        for setting in config.settings:
            port = free_port()
            argv = adapter.command(setting, port=port, max_concurrency=2)
            server = ServerProcess(argv, tmp_path / f"{setting.name}.log", extra_env=adapter.environment())
            root = f"http://127.0.0.1:{port}"
            try:
                server.start()
                await server.wait_ready(
                    root + adapter.health_path,
                    timeout_s=adapter.startup_timeout_s,
                    probe_timeout_s=adapter.health_timeout_s,
                )
                async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as session:
                    capacity = await adapter.capacity(session, root, setting)
                    assert capacity.max_running_requests >= 1 and capacity.source
                    detected = await _detected_by(root)
                    assert detected == ([self.engine] if engine_spec.detectable else detected[:1]), detected
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
                counters, source = window_counters(before, after, records, adapter.counters_source)
                if setting.speculative:
                    assert counters is not None and source and counters.draft_tokens > 0, (counters, source)
                    assert 0 <= counters.accepted_tokens <= counters.draft_tokens
                else:
                    assert counters is None or counters.draft_tokens == 0
            finally:
                pgid = server.pid
                server.stop()
            assert pgid is not None and not group_alive(pgid)
