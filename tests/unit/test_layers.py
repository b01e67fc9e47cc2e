"""The layout's two rules, checked on the source: no import cycle, and engine-specific names only where
they belong (docs/architecture.md, "Layers" and "Adding an engine").

Imports are read with `ast`, inside functions too (a lazy import still ties two modules together), but
not under `if TYPE_CHECKING:` (annotations only). Importing a submodule counts as importing its parent
packages, since Python runs their `__init__` first.
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import specfrontier
from specfrontier.engines import registry

SRC = Path(specfrontier.__file__).parent


def _modules() -> dict[str, Path]:
    out = {}
    for path in SRC.rglob("*.py"):
        parts = ("specfrontier", *path.relative_to(SRC).with_suffix("").parts)
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


def _imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    found: set[str] = set()

    def visit(nodes: list[ast.stmt]) -> None:
        for node in nodes:
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                visit(node.orelse)
                continue
            for inner in ast.walk(node) if not isinstance(node, ast.If) else [node]:
                if isinstance(inner, ast.Import):
                    found.update(a.name for a in inner.names)
                elif isinstance(inner, ast.ImportFrom) and inner.module and inner.level == 0:
                    found.update(f"{inner.module}.{a.name}" for a in inner.names)
                    found.add(inner.module)
            if isinstance(node, ast.If):
                visit(node.body)
                visit(node.orelse)

    visit(ast.parse(path.read_text()).body)
    deps = set()
    for target in found:
        parts = target.split(".")
        for i in range(2, len(parts) + 1):
            candidate = ".".join(parts[:i])
            own_package = name == candidate or name.startswith(candidate + ".")
            if candidate in modules and not own_package:
                deps.add(candidate)
    return deps


def test_no_import_cycle() -> None:
    modules = _modules()
    graph = {name: _imports(name, path, modules) for name, path in modules.items()}
    assert "specfrontier.engines.registry" in graph["specfrontier.runs.sweep"]  # the reader sees imports
    assert "specfrontier.sim.calibrate" in graph["specfrontier.cli.calibrate"]  # lazy ones too
    state: dict[str, int] = {}
    stack: list[str] = []

    def walk(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for dep in sorted(graph[node]):
            if state.get(dep) == 1:
                return [*stack[stack.index(dep) :], dep]
            if dep not in state and (cycle := walk(dep)) is not None:
                return cycle
        stack.pop()
        state[node] = 2
        return None

    for module in sorted(graph):
        if module not in state:
            cycle = walk(module)
            assert cycle is None, " -> ".join(cycle)


def _engine_specific() -> re.Pattern[str]:
    """What names an engine, read from the registry: each registered engine's name and display name as a
    string literal, and every class its modules define (settings, options, config, adapter, helpers)."""
    names: set[str] = set()
    classes: set[str] = set()
    for spec in registry.specs():
        names.update(n for n in (spec.name, spec.adapter.display_name) if n)
        for module in {sys.modules[c.__module__] for c in (spec.adapter, spec.config, spec.setting)}:
            own = module.__name__
            classes.update(k for k, v in vars(module).items() if isinstance(v, type) and v.__module__ == own)
    quoted = "|".join(re.escape(n) for n in sorted(names))
    return re.compile(rf"\"({quoted})\"|\b({'|'.join(sorted(classes))})\b")


ENGINE_SPECIFIC = _engine_specific()
ALLOWED = ("engines/", "sim/")
"""Each engine's own code: its module in engines/, and the simulator's package."""


def test_engine_names_and_types_only_in_engine_code() -> None:
    offenders = []
    for path in SRC.rglob("*.py"):
        rel = path.relative_to(SRC).as_posix()
        if rel.startswith(ALLOWED):
            continue
        for number, line in enumerate(path.read_text().splitlines(), start=1):
            code = line.split("#", 1)[0]
            if ENGINE_SPECIFIC.search(code) and not code.lstrip().startswith(('"', "'")):
                offenders.append(f"{rel}:{number}: {line.strip()}")
    assert offenders == []


def test_the_engine_specific_names_are_every_registered_engines() -> None:
    """No list kept by hand: each registered engine's name, display name and classes are caught (among
    them those a hand-kept list once missed: `"trtllm"`, the vLLM and TensorRT-LLM types)."""
    for spec in registry.specs():
        for word in (f'"{spec.name}"', spec.adapter.__name__, spec.config.__name__, spec.setting.__name__):
            assert ENGINE_SPECIFIC.search(f"if x == {word}:"), word
    assert ENGINE_SPECIFIC.search('if name == "trtllm":') and ENGINE_SPECIFIC.search("isinstance(s, VllmSetting)")
    assert ENGINE_SPECIFIC.search('label = "TensorRT-LLM"') and ENGINE_SPECIFIC.search("InstalledVllm.parse(out)")
    assert not ENGINE_SPECIFIC.search("spec = registry.spec(config.engine.name)")
    assert not ENGINE_SPECIFIC.search('simulated = "simulated"')  # a name inside a longer word is not one
