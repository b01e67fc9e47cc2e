"""YAML from a user's file: PyYAML's safe loader, with its anchors and aliases bounded.

Why a bound: an alias is a reference, so a YAML file of a few hundred bytes can nest aliases of aliases
(`b: [*a, *a, ...]`, `c: [*b, *b, ...]`) into a value that is gigabytes once anything walks it whole. The
loader itself shares the objects and costs nothing; what walked it was the error message quoting the
value (a 510-byte config took 836 MB and 12.6 s, 552 bytes more than 6 GB, issue 39), and any later step
that copies the config would too. `errors.shown_value` no longer expands a value, and this module refuses
the document outright: the nodes it stands for, every alias expanded, may be at most
`ALIAS_FACTOR` times the nodes written plus `ALIAS_SLACK`, counted on the composed node graph before any
Python object is built (shared nodes counted once per reference, with memoisation: linear in the nodes
written, whatever they expand to). A config that uses an anchor for what it would otherwise repeat (the
same `extra_args` in ten settings) stays far under the bound.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import yaml

from specfrontier.errors import ConfigError, clip

ALIAS_FACTOR = 10
"""Nodes, every alias expanded, per node written (beyond `ALIAS_SLACK`)."""

ALIAS_SLACK = 10_000
"""Nodes any document may expand to, whatever it writes: anchors used as meant never come near it."""


def yaml_error_line(path: Path, exc: yaml.YAMLError) -> str:
    """One line for a YAML syntax error: `FILE:LINE:COLUMN: not valid YAML: <problem>; fix: ...`.

    PyYAML's own message spans several lines (context, problem, each with the file position and a
    snippet of the text), which broke the one-line rule; here only the problem and, when it helps, the
    context with its line are kept (1-based, as editors count)."""
    problem = getattr(exc, "problem", None)
    mark = getattr(exc, "problem_mark", None)
    if problem is None or mark is None:  # not a marked error: PyYAML's words, flattened
        return f"{path}: not valid YAML ({clip(' '.join(str(exc).split()))}); fix: correct the YAML syntax"
    context = getattr(exc, "context", None)
    context_mark = getattr(exc, "context_mark", None)
    said = clip(str(problem))
    if context and context_mark is not None:
        said += f" ({clip(str(context))} at line {context_mark.line + 1}, column {context_mark.column + 1})"
    return f"{path}:{mark.line + 1}:{mark.column + 1}: not valid YAML: {said}; fix: correct the YAML syntax there"


def _sizes(root: yaml.Node) -> tuple[int, int]:
    """(nodes written, nodes with every alias expanded) of a composed document: a depth-first walk with
    its own stack (a deep document cannot exhaust Python's), each node's expanded size memoised, so a node
    reached again through an alias costs one lookup. A node that contains itself (`&a [*a]`) counts its
    own reference as one node."""
    expanded: dict[int, int] = {}
    open_nodes = {id(root)}
    stack = [(root, iter(_children(root)))]
    while stack:
        node, pending = stack[-1]
        child = next(pending, None)
        if child is None:
            stack.pop()
            open_nodes.discard(id(node))
            expanded[id(node)] = 1 + sum(expanded.get(id(c), 1) for c in _children(node))
        elif id(child) not in expanded and id(child) not in open_nodes:
            open_nodes.add(id(child))
            stack.append((child, iter(_children(child))))
    return len(expanded), expanded[id(root)]


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    return []


def load_yaml(text: str, path: Path) -> Any:
    """The document in `text` (read from `path`) as Python objects, through PyYAML's safe loader.

    A syntax error is one line naming the file, line and column (`yaml_error_line`); a document whose
    aliases expand out of proportion (see the module docstring) is one line naming the counts and the
    fix, raised before any object is built."""
    loader = yaml.SafeLoader(text)
    try:
        root = loader.get_single_node()
        if root is None:
            return None
        written, expanded = _sizes(root)
        bound = ALIAS_FACTOR * written + ALIAS_SLACK
        if expanded > bound:
            raise ConfigError(
                f"{path}: YAML aliases expand {written} nodes written into {expanded} (more than {ALIAS_FACTOR} x "
                f"{written} + {ALIAS_SLACK}: aliases of aliases); fix: write the repeated values out, or nest "
                "aliases less deeply (an anchor used as a shorthand stays far under this)"
            )
        return loader.construct_document(root)
    except yaml.YAMLError as exc:
        raise ConfigError(yaml_error_line(path, exc)) from exc
    except ValueError as exc:  # PyYAML's int(): a number longer than Python converts (no position known)
        raise ConfigError(
            f"{path}: not valid YAML: a number longer than {sys.get_int_max_str_digits()} digits; fix: shorten it"
        ) from exc
    finally:
        loader.dispose()


__all__ = ["ALIAS_FACTOR", "ALIAS_SLACK", "load_yaml", "yaml_error_line"]
