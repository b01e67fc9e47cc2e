"""The engine registry's order: declared by each engine (`EngineSpec.priority`), never the order in which
the engine modules happen to be imported. `bench --url` asks the adapters in it, a chunk's stats are read
in it and parameter names merge in it."""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import aiohttp
import pytest

from specfrontier.engines import registry
from specfrontier.engines.base import Detected
from specfrontier.engines.llamacpp import LlamaCppAdapter
from specfrontier.runs.bench import probe_server

BUILT_IN = registry.specs()
"""The built-in engines, taken at import (before a test empties the registry)."""
BUILT_IN_NAMES = {s.name: registry._NAMES.get(s.name) for s in BUILT_IN}


@pytest.fixture
def empty_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    """A registry with nothing registered (restored after the test)."""
    monkeypatch.setattr(registry, "_ENGINES", {})
    monkeypatch.setattr(registry, "_NAMES", {})


def test_built_in_engines_declare_distinct_priorities() -> None:
    """No two built-in engines tie, so their order never falls back to their names."""
    priorities = [s.priority for s in registry.specs()]
    assert priorities == sorted(priorities) and len(set(priorities)) == len(priorities)
    default = next(f.default for f in dataclasses.fields(registry.EngineSpec) if f.name == "priority")
    assert all(p < default for p in priorities)  # an engine that declares none comes after them


def test_the_order_is_the_declared_one_whatever_the_registration_order(empty_registry: None) -> None:
    orders, vocabularies = [], []
    for registrations in (BUILT_IN, tuple(reversed(BUILT_IN))):
        registry._ENGINES.clear()
        registry._NAMES.clear()
        for spec in registrations:
            registry.register(spec, BUILT_IN_NAMES[spec.name])
        orders.append([s.name for s in registry.specs()])
        vocabularies.append(registry.vocabulary())
    assert orders[0] == orders[1] == [s.name for s in BUILT_IN]
    assert vocabularies[0] == vocabularies[1]


def test_engines_of_equal_priority_go_by_name(empty_registry: None) -> None:
    base = next(s for s in BUILT_IN if s.default)
    for name in ("zeta", "alpha"):
        registry.register(dataclasses.replace(base, name=name, priority=7, default=False))
    assert [s.name for s in registry.specs()] == ["alpha", "zeta"]


class _Recorder(LlamaCppAdapter):
    """An adapter that recognises every server and notes that it was asked."""

    asked: ClassVar[list[str]] = []

    @classmethod
    async def detect(cls, session: aiohttp.ClientSession, root: str) -> Detected | None:
        cls.asked.append(cls.name)
        return Detected(None, f"{cls.name} knows it", "1")


class _Late(_Recorder):
    name = "late"
    display_name = "late"


class _Early(_Recorder):
    name = "early"
    display_name = "early"


class _NoModels:
    """A session whose server answers `/v1/models` with 404 (so no model name is read)."""

    status = 404

    def get(self, url: str) -> _NoModels:
        return self

    async def __aenter__(self) -> _NoModels:
        return self

    async def __aexit__(self, *exc: object) -> None:
        return None


async def test_bench_asks_the_adapters_in_the_declared_order(empty_registry: None) -> None:
    base = next(s for s in BUILT_IN if s.default)
    registry.register(dataclasses.replace(base, name="late", adapter=_Late, priority=2, default=False))
    registry.register(dataclasses.replace(base, name="early", adapter=_Early, priority=1, default=False))
    _Recorder.asked.clear()
    facts = await probe_server(_NoModels(), "http://127.0.0.1:1", None)  # type: ignore[arg-type]
    assert (facts.engine, facts.version, _Recorder.asked) == ("early", "1", ["early"])
