"""Every registered engine is under the contract, with no list of engines kept anywhere.

The contract's subclasses are found where they are written: every test file under tests/ that names
`EngineContract` is imported (without running it) and the subclasses of `EngineContract` collected. A new
engine's registration without its contract file fails here; a contract file is all it takes to pass.
"""

from __future__ import annotations

import functools
import importlib.util
from pathlib import Path
from types import ModuleType

from contract.engine_contract import EngineContract
from specfrontier.engines import registry

TESTS = Path(__file__).resolve().parents[1]


@functools.cache
def _contract_files() -> tuple[ModuleType, ...]:
    """The test files under tests/ that name the contract, imported once under names of their own (kept,
    so their classes stay alive for `__subclasses__`)."""
    modules = []
    for number, path in enumerate(sorted(TESTS.rglob("test_*.py"))):
        if path != Path(__file__).resolve() and "EngineContract" in path.read_text(encoding="utf-8"):
            spec = importlib.util.spec_from_file_location(f"_contract_scan_{number}", path)
            assert spec is not None and spec.loader is not None
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            modules.append(module)
    return tuple(modules)


def _contract_classes() -> list[type[EngineContract]]:
    """Every concrete contract class (one that names its engine) in the test files under tests/."""
    assert _contract_files()
    found: list[type[EngineContract]] = []
    pending = [EngineContract]
    while pending:
        for sub in pending.pop().__subclasses__():
            pending.append(sub)
            if "engine" in vars(sub):
                found.append(sub)
    return found


def test_every_registered_engine_has_a_contract_class() -> None:
    engines = {c.engine for c in _contract_classes()}
    missing = sorted(set(registry.engine_names()) - engines)
    assert missing == [], f"no contract class for {missing}: add tests/contract/test_<engine>.py (engine_contract.py)"
    assert {c.__name__ for c in _contract_classes()} >= {"TestSimContract", "TestLlamaCppContract"}


def test_an_engine_registered_by_its_own_tests_is_not_seen_by_any_other() -> None:
    """A contract class with a `registration` (the toy engine) registers it only inside its own tests:
    importing its file registers nothing, so the registry holds exactly the built-in engines."""
    own = {c.registration[0].name for c in _contract_classes() if c.registration is not None}
    assert own.isdisjoint(registry.engine_names()), own
