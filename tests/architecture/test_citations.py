"""Every name of specfrontier that the prose cites still names something: the docstrings, comments and
strings of src/, tests/ and benchmarks/, and docs/*.md and README.md.

Why: when a function or module moves, the sentence that pointed a reader at it keeps the old name, nothing
fails, and the next reader looks for a name that is not there (`open_loop_facts` in runs.sweep, long after
it became load.open_loop's `schedule_facts`). Here each citation is imported and resolved.

What counts as a citation (`citations`):
- a dotted name `specfrontier.<package or module>...`;
- the short form the docs use, without `specfrontier.`: one of its packages or top-level modules, then a
  module of it or a name that one of its modules defines at top level (`metrics.window.cell_metrics`,
  `theory.cycle_time_ms`). So a config key such as `load.mode` is not one (no module of `load/` defines
  `mode`), nor is `config.<field>...` with a field of a run's config (`config.search.strategy`: the
  attribute path of a config object, though `config/search.py` exists);
- a path `src/specfrontier/...`.
A file name (`report.html`, `specfrontier.db`) is not a dotted name.

Resolving (`resolves`): the longest leading part that is a module is imported and the rest read as its
attributes, a dataclass or model field counting as one. A stale citation fails with its file and line,
and with where its last name is defined now, if anywhere.
"""

from __future__ import annotations

import ast
import importlib
import io
import re
import tokenize
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import pytest

import specfrontier
from specfrontier.config.common import TuneBase

SRC = Path(specfrontier.__file__).parent
ROOT = SRC.parents[1]
PACKAGES = sorted(
    p.stem if p.is_file() else p.name
    for p in SRC.iterdir()
    if (p.suffix == ".py" and p.stem != "__init__") or (p / "__init__.py").exists()
)
"""specfrontier's packages and top-level modules: the first part of every citation."""

DOTTED = re.compile(r"(?<![\w./\-])(?:specfrontier\.)?(?:" + "|".join(PACKAGES) + r")(?:\.[A-Za-z_]\w*)+")
PATH = re.compile(r"(?<![\w./\-])src/specfrontier/[\w/]*\w(?:\.py)?")
FILE_NAME = re.compile(r"\.(md|py|pyi|json|jsonl|yaml|yml|csv|txt|db|html|j2|css|toml|svg|png|gguf|tmp|log)$")
CONFIG_FIELDS = frozenset(TuneBase.model_fields)


def _module_file(parts: list[str]) -> Path | None:
    base = SRC.joinpath(*parts)
    return next((f for f in (base.with_suffix(".py"), base / "__init__.py") if f.is_file()), None)


@cache
def _defined() -> dict[tuple[str, str], list[str]]:
    """(package, name) -> the modules of that package that define `name` at top level."""
    found: dict[tuple[str, str], list[str]] = {}
    for path in sorted(SRC.rglob("*.py")):
        parts = path.relative_to(SRC).with_suffix("").parts
        module = ".".join(("specfrontier", *(parts[:-1] if parts[-1] == "__init__" else parts)))
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            names: list[str] = []
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                names = [node.name]
            elif isinstance(node, ast.Assign):
                names = [t.id for t in node.targets if isinstance(t, ast.Name)]
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                names = [node.target.id]
            for name in names:
                found.setdefault((parts[0], name), []).append(module)
    return found


def is_citation(name: str) -> bool:
    """Whether a dotted name found in prose cites specfrontier (the module docstring says when)."""
    if FILE_NAME.search(name):
        return False
    if name.startswith("specfrontier."):
        return True
    parts = name.split(".")
    if parts[0] == "config" and parts[1] in CONFIG_FIELDS:
        return False
    return _module_file(parts[:2]) is not None or (parts[0], parts[1]) in _defined()


def resolves(name: str) -> bool:
    """Whether the cited module exists and has the cited attributes."""
    parts = name.removeprefix("specfrontier.").split(".")
    at = next((i for i in range(len(parts), 0, -1) if _module_file(parts[:i]) is not None), 0)
    if at == 0:
        return False
    target: object = importlib.import_module(".".join(("specfrontier", *parts[:at])))
    for attr in parts[at:]:
        fields = {f for k in getattr(target, "__mro__", ()) for f in getattr(k, "__annotations__", {})}
        if hasattr(target, attr):
            target = getattr(target, attr)
        elif attr in fields:  # a field without a class-level default: nothing further to read on it
            target = None
        else:
            return False
    return True


def citations(text: str) -> list[str]:
    """The names of specfrontier one line of prose cites: dotted names and `src/specfrontier/` paths."""
    found = [m.group(0) for m in DOTTED.finditer(text) if is_citation(m.group(0))]
    return found + [m.group(0) for m in PATH.finditer(text)]


def _prose(path: Path) -> Iterator[tuple[int, str]]:
    """(line number, text) of every line a reader is pointed from: a Markdown file's lines, a Python file's
    comments and strings (docstrings among them)."""
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".md":
        yield from enumerate(text.splitlines(), start=1)
        return
    for token in tokenize.generate_tokens(io.StringIO(text).readline):
        if token.type in (tokenize.COMMENT, tokenize.STRING):
            for offset, line in enumerate(token.string.splitlines()):
                yield token.start[0] + offset, line


def _cited_files() -> list[Path]:
    files = [*sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md"]
    for folder in ("src", "tests", "benchmarks"):
        files += sorted(p for p in (ROOT / folder).rglob("*.py") if p != Path(__file__))
    return files


def stale_citations(files: list[Path]) -> list[str]:
    """`file:line: name` of every citation that does not resolve, with where its last name is now."""
    out = []
    for path in files:
        for number, line in _prose(path):
            for name in citations(line):
                if (ROOT / name).exists() if name.startswith("src/") else resolves(name):
                    continue
                last = name.rsplit(".", 1)[-1]
                now = sorted({m for (_, n), ms in _defined().items() if n == last for m in ms})
                where = f" ({last} is now in {', '.join(now)})" if now else ""
                shown = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path.name
                out.append(f"{shown}:{number}: {name}{where}")
    return out


def test_every_cited_name_resolves() -> None:
    files = _cited_files()
    assert ROOT / "docs" / "architecture.md" in files and SRC / "metrics" / "window.py" in files
    assert stale_citations(files) == []


@pytest.mark.parametrize(
    ("line", "cited"),
    [
        ("see `specfrontier.metrics.window.cell_metrics`.", ["specfrontier.metrics.window.cell_metrics"]),
        ("the p50 (`metrics.cell_metrics` with the concurrency)", ["metrics.cell_metrics"]),
        ('"""theory.cycle_time_ms and the design row', ["theory.cycle_time_ms"]),
        ("`runs.sweep.make_runner` imports it", ["runs.sweep.make_runner"]),
        ("(src/specfrontier/metrics/declare.py)", ["src/specfrontier/metrics/declare.py"]),
        ("`load.mode: open` and `search.strategy: grid`", []),  # config keys
        ("the strategy named by `config.search.strategy`", []),  # a config object's attribute
        ("write report.html into specfrontier.db's folder; docs/metrics.md", []),  # file names
    ],
)
def test_what_counts_as_a_citation(line: str, cited: list[str]) -> None:
    assert citations(line) == cited


def test_a_stale_citation_is_reported_with_its_place_and_where_the_name_went(tmp_path: Path) -> None:
    doc = tmp_path / "stale.md"
    doc.write_text("ok: `metrics.window.cell_metrics`\nstale: `metrics.cell_metrics`, `runs.sweep.open_loop_facts`\n")
    code = tmp_path / "stale.py"
    code.write_text('"""Weighs `theory.cycle_time_ms`."""\n\nX = "metrics.cell_metrics"  # src/specfrontier/no.py\n')
    assert stale_citations([doc, code]) == [
        "stale.md:2: metrics.cell_metrics (cell_metrics is now in specfrontier.metrics.window)",
        "stale.md:2: runs.sweep.open_loop_facts",
        "stale.py:1: theory.cycle_time_ms (cycle_time_ms is now in specfrontier.theory.cycle)",
        "stale.py:3: metrics.cell_metrics (cell_metrics is now in specfrontier.metrics.window)",
        "stale.py:3: src/specfrontier/no.py",
    ]
