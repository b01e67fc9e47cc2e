"""The layout's rules, checked on the source: every import points down the layer rows that
docs/architecture.md draws, there is no import cycle, and engine-specific names appear only where they
belong (docs/architecture.md, "Layers" and "Adding an engine").

The rows are read from the doc itself (the first indented block under "## Layers"), so the doc and this
test cannot disagree: a row lists packages (`runs/`) or single modules (`config/load.py`, which then sit
on their own row, apart from the rest of their package); a module belongs to the longest entry naming it.

Imports are read with `ast`, module-level and inside functions alike: a lazy import only delays the
dependency, so it must point down the rows too (with lazy imports counted, an upward one closes a cycle
sooner or later). Imports under `if TYPE_CHECKING:` are not checked: they never run, so they add no
import order and no cycle, and they are how a lower module names a higher one's type in an annotation
(`config.common` names `engines.base.EngineSetting` for its fields) without depending on it; mypy checks
them. For the cycle check, importing a submodule counts as importing its parent packages, since Python
runs their `__init__` first; the row check looks at the module an import names, and a parent's `__init__`
is checked as a module of its own (so `config/workloads.py` may import `workloads/sources.py`, a row below
it, while the rest of `workloads/` sits above `config/`: `workloads/__init__` imports only `builtin`).
"""

from __future__ import annotations

import ast
import importlib
import re
import sys
from pathlib import Path

import pytest

import specfrontier
from specfrontier.engines import registry

SRC = Path(specfrontier.__file__).parent
DOC = SRC.parents[1] / "docs" / "architecture.md"


def _modules(src: Path = SRC) -> dict[str, Path]:
    out = {}
    for path in src.rglob("*.py"):
        parts = (src.name, *path.relative_to(src).with_suffix("").parts)
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


def _named_imports(path: Path, *, type_hints: bool = False) -> set[str]:
    """Every absolute import the module makes at run time, at module level or inside a function, as
    dotted names (`from a.b import c` gives `a.b.c`, whether `c` is a module or a name in `a.b`); not
    those under `if TYPE_CHECKING:` unless `type_hints`."""
    found: set[str] = set()

    def visit(nodes: list[ast.stmt]) -> None:
        for node in nodes:
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                if type_hints:
                    visit(node.body)
                visit(node.orelse)
                continue
            for inner in ast.walk(node) if not isinstance(node, ast.If) else [node]:
                if isinstance(inner, ast.Import):
                    found.update(a.name for a in inner.names)
                elif isinstance(inner, ast.ImportFrom) and inner.module and inner.level == 0:
                    found.update(f"{inner.module}.{a.name}" for a in inner.names)
            if isinstance(node, ast.If):
                visit(node.body)
                visit(node.orelse)

    visit(ast.parse(path.read_text()).body)
    return found


def _imports(name: str, path: Path, modules: dict[str, Path], *, type_hints: bool = False) -> set[str]:
    deps = set()
    for target in _named_imports(path, type_hints=type_hints):
        parts = target.split(".")
        for i in range(2, len(parts) + 1):
            candidate = ".".join(parts[:i])
            own_package = name == candidate or name.startswith(candidate + ".")
            if candidate in modules and not own_package:
                deps.add(candidate)
    return deps


def doc_rows(text: str) -> list[list[str]]:
    """The layer rows of docs/architecture.md, top row first: the first indented block after "## Layers";
    each line lists its entries (`runs/`, `config/load.py`) before any description; a line of dashes
    only separates."""
    lines = text.split("## Layers", 1)[1].splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("    "))
    rows = []
    for line in lines[start:]:
        if not line.startswith("    ") and line.strip():
            break
        entries = []
        for token in line.split():
            if not re.fullmatch(r"[a-z_]+(/[a-z_]+)*(/|\.py)", token):
                break
            entries.append(token)
        if entries:
            rows.append(entries)
    return rows


def row_of(module: str, rows: list[list[str]]) -> tuple[int, str] | None:
    """(row index counted from the top, entry) of the longest entry naming `module`, or None."""
    path = "/".join(module.split(".")[1:])
    best: tuple[int, str] | None = None
    for index, entries in enumerate(rows):
        for entry in entries:
            names = path + "/" == entry or path.startswith(entry) if entry.endswith("/") else path + ".py" == entry
            if names and (best is None or len(entry) > len(best[1])):
                best = (index, entry)
    return best


def _deepest_module(target: str, modules: dict[str, Path]) -> str | None:
    """The module an import names: `a.b.c` if that is a module, else the package `a.b` it comes from."""
    parts = target.split(".")
    return next((".".join(parts[:i]) for i in range(len(parts), 1, -1) if ".".join(parts[:i]) in modules), None)


def row_violations(src: Path, rows: list[list[str]]) -> list[str]:
    """Each import (lazy ones too) that does not point to a lower row, as `importer -> imported (why)`;
    imports inside one entry are the entry's own business. A module no row names is a violation too."""
    modules = _modules(src)
    out = []
    for name, path in sorted(modules.items()):
        if name == src.name:
            continue  # the top package's __init__: the version, nothing imported
        own = row_of(name, rows)
        if own is None:
            out.append(f"{name}: on no row of the doc")
            continue
        named_modules = {_deepest_module(target, modules) for target in _named_imports(path)}
        for named in sorted(n for n in named_modules if n is not None):
            if (other := row_of(named, rows)) is None or other[1] == own[1]:
                continue
            if other[0] <= own[0]:
                where = "sideways, on the same row" if other[0] == own[0] else "upward"
                out.append(f"{name} -> {named} ({where}: {own[1]} on row {own[0]}, {other[1]} on row {other[0]})")
    return out


def test_every_import_points_down_the_rows() -> None:
    rows = doc_rows(DOC.read_text())
    assert ["cli/"] in rows and rows[-1] == ["errors.py"]  # the reader found the whole block
    assert [entry for row in rows for entry in row if not (SRC / entry).exists()] == []  # no stale entry
    assert row_violations(SRC, rows) == []


def _package(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        (root / "pkg" / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / "pkg" / rel).write_text(text)
    return root / "pkg"


LAZY_UP = "def f() -> None:\n    if True:\n        from pkg.high.top import g\n"


@pytest.mark.parametrize(
    ("low", "want"),
    [
        (LAZY_UP, "pkg.low.mod -> pkg.high.top (upward: low/ on row 1, high/ on row 0)"),
        ("from pkg.high import top\n", "pkg.low.mod -> pkg.high.top (upward: low/ on row 1, high/ on row 0)"),
        ("import pkg.side\n", "pkg.low.mod -> pkg.side (sideways, on the same row: low/ on row 1, side.py on row 1)"),
    ],
)
def test_rows_catch_an_upward_import_lazy_or_not(tmp_path: Path, low: str, want: str) -> None:
    """The checker on a tiny package: an import from a lower row to a higher one, or to a neighbour on
    the same row, is reported whether it runs at import or inside a function; the same import under
    `TYPE_CHECKING` and the downward one are not."""
    doc = "## Layers\n\n    high/   the top\n    ----\n    low/  side.py  below it\n\nprose\n"
    files = {"__init__.py": "", "high/__init__.py": "", "high/top.py": "from pkg.low.mod import x\n"}
    files |= {"low/__init__.py": "", "low/mod.py": low + "x = 1\n", "side.py": ""}
    files |= {"low/typed.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.high.top import g\n"}
    rows = doc_rows(doc)
    assert rows == [["high/"], ["low/", "side.py"]]
    assert row_violations(_package(tmp_path, files), rows) == [want]


def test_rows_name_every_module(tmp_path: Path) -> None:
    files = {"__init__.py": "", "high/__init__.py": "", "stray.py": ""}
    assert row_violations(_package(tmp_path, files), [["high/"]]) == ["pkg.stray: on no row of the doc"]


def _a_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle of the graph (its modules, the first repeated at the end), or None."""
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
        if module not in state and (cycle := walk(module)) is not None:
            return cycle
    return None


def test_no_import_cycle() -> None:
    modules = _modules()
    graph = {name: _imports(name, path, modules) for name, path in modules.items()}
    assert "specfrontier.engines.registry" in graph["specfrontier.runs.sweep"]  # the reader sees imports
    assert "specfrontier.sim.calibrate" in graph["specfrontier.cli.calibrate"]  # lazy ones too
    assert (cycle := _a_cycle(graph)) is None, " -> ".join(cycle)


def _package_of(module: str) -> str:
    return module.split(".")[1] if "." in module else module


def test_no_cycle_inside_a_package_even_through_type_hints() -> None:
    """Inside one package the modules are layered too, with the imports under `if TYPE_CHECKING:` counted:
    a type hint naming a module that imports this one back is a circle a reader has to untangle
    (metrics.declare -> window -> specs -> declare was one, until `Window` moved to `metrics.prepared`).
    Between packages a type hint may point up (`config.common` names `engines.base.EngineSetting`):
    docs/architecture.md, "No import cycle"."""
    modules = _modules()
    graph = {
        name: {d for d in _imports(name, path, modules, type_hints=True) if _package_of(d) == _package_of(name)}
        for name, path in modules.items()
    }
    assert "specfrontier.metrics.prepared" in graph["specfrontier.metrics.declare"]  # type hints are read
    assert (cycle := _a_cycle(graph)) is None, " -> ".join(cycle)


NAMED_LINK = re.compile(r"specfrontier(\.[a-z_][a-z0-9_]*)+(:[A-Za-z_]\w*)?")
"""A string that names a module of the tool (`"specfrontier.sim.serve"`), maybe with one of its functions
(`"specfrontier.runs.virtual_sweep:runner"`): a link made by name, which no import statement shows."""


def named_links(src: Path = SRC) -> list[tuple[str, str]]:
    """(module, string) for every string constant of the source that names one of its modules, `:function`
    or not (names that are no module, such as the file name `"specfrontier.db"`, are not links)."""
    modules = _modules(src)
    found = []
    for name, path in sorted(modules.items()):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and NAMED_LINK.fullmatch(node.value):
                target = node.value.partition(":")[0]
                if ".".join(target.split(".")[:2]) in modules:
                    found.append((name, node.value))
    return found


def test_links_by_name_resolve_and_point_down_or_are_documented() -> None:
    """A module named in a string (a registered runner, a module launched with `python -m`) is a dependency
    no import shows: each must resolve, and each that points up the rows or sideways must be one the
    architecture doc lists and justifies ("No import cycle"); the doc lists no link the source lacks."""
    rows = doc_rows(DOC.read_text())
    section = DOC.read_text().split("### No import cycle", 1)[1].split("\n#", 1)[0]
    documented = set(re.findall(r"`(specfrontier[\w.:]+)`", section))
    links = named_links()
    assert ("specfrontier.engines.sim", "specfrontier.runs.virtual_sweep:runner") in links  # the reader sees them
    modules = _modules()
    unresolved, undocumented = [], []
    for importer, link in links:
        module, _, function = link.partition(":")
        if module not in modules or (function and not hasattr(importlib.import_module(module), function)):
            unresolved.append(f"{importer}: {link!r}")
            continue
        own, other = row_of(importer, rows), row_of(module, rows)
        upward = own is not None and other is not None and other[1] != own[1] and other[0] <= own[0]
        if upward and link not in documented:
            undocumented.append(f"{importer} -> {link!r} (points up or sideways: {own} -> {other})")
    assert unresolved == []
    assert undocumented == []
    assert documented <= {link for _, link in links}


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
