"""The layout's two rules, checked on the source: no import cycle, and engine-specific names only where
they belong (docs/architecture.md, "Layers" and "Adding an engine").

Imports are read with `ast`, inside functions too (a lazy import still ties two modules together), but
not under `if TYPE_CHECKING:` (annotations only). Importing a submodule counts as importing its parent
packages, since Python runs their `__init__` first.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import specfrontier

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


ENGINE_SPECIFIC = re.compile(
    r"\"(llamacpp|sglang|sim|vllm|llama\.cpp)\"|\b(SGLangSetting|LlamaCppSetting|SimEngine|SGLangEngine|"
    r"LlamaCppEngine|SimTuneConfig|SGLangTuneConfig|LlamaCppTuneConfig|LlamaCppAdapter|SGLangAdapter|SimAdapter)\b"
)
ALLOWED = ("engines/", "sim/", "runs/virtual_sweep.py")
"""Each engine's own code: its module in engines/, the simulator's package and its runner."""


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
