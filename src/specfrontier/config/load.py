"""Load a sweep config: YAML file or mapping -> the registered engine's config class.

`engine.name` picks the engine (`specfrontier.engines.registry`); none means the default engine. Nothing
here launches a server: `load_config` fails before any process starts, with one line naming the field,
the value seen and the fix.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from specfrontier.config.common import STORED, TuneBase, describe_validation_error
from specfrontier.config.space import expand_space
from specfrontier.engines import registry
from specfrontier.errors import ConfigError, clip
from specfrontier.textfiles import read_text_utf8

TuneConfig = TuneBase


def parse_config(data: dict[str, Any], *, source: str = "config", stored: bool = False) -> TuneConfig:
    """Validate a config mapping; `engine.name` picks the engine (none: the default engine); a `space:`
    expands into settings (`config.space`), after any listed ones; with neither, that engine's default
    settings. `stored`: a run's stored config (a resume), which an older version may have accepted under
    limits added since (`config.common.STORED`)."""
    engine = data.get("engine")
    name = engine.get("name") if isinstance(engine, dict) else None
    spec = registry.default_spec() if name is None else registry.spec(str(name), where=f"{source}: engine.name")
    expansion = None
    if "space" in data:
        data = dict(data)
        listed = data.get("settings") or []
        try:
            expansion = expand_space(data.pop("space"), spec.setting, listed if isinstance(listed, list) else [])
        except ValueError as exc:
            raise ConfigError(f"{source}: {exc}") from exc
        data["settings"] = [*listed, *expansion.settings] if isinstance(listed, list) else listed
    elif "settings" not in data:
        data = {**data, "settings": [s.model_dump(exclude_defaults=True) for s in spec.default_settings()]}
    try:
        config = spec.config.model_validate(data, context={STORED: stored})
    except ValidationError as exc:
        raise ConfigError(describe_validation_error(exc, source)) from exc
    if expansion is not None:
        config._space_summary = expansion.summary()
    return config


def default_config() -> TuneConfig:
    """What `tune` runs without `--config`: the default engine's embedded sweep."""
    make = registry.default_spec().default_config
    assert make is not None, "the default engine has an embedded config"
    return make()


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


def load_config(path: Path | None) -> TuneConfig:
    """Read and validate a YAML config; None gives the embedded default."""
    if path is None:
        return default_config()
    text = read_text_utf8(path, "--config")
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(yaml_error_line(path, exc)) from exc
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: top level = {type(data).__name__}: must be a mapping; fix: use `key: value` lines")
    return parse_config(data, source=str(path))


__all__ = ["default_config", "load_config", "parse_config", "yaml_error_line"]
