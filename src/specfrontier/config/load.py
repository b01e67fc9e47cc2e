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

from specfrontier.config.common import TuneBase, describe_validation_error
from specfrontier.config.space import expand_space
from specfrontier.engines import registry
from specfrontier.errors import ConfigError
from specfrontier.textfiles import read_text_utf8

TuneConfig = TuneBase


def parse_config(data: dict[str, Any], *, source: str = "config") -> TuneConfig:
    """Validate a config mapping; `engine.name` picks the engine (none: the default engine); a `space:`
    expands into settings (`config.space`), after any listed ones; with neither, that engine's default
    settings."""
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
        config = spec.config.model_validate(data)
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


def load_config(path: Path | None) -> TuneConfig:
    """Read and validate a YAML config; None gives the embedded default."""
    if path is None:
        return default_config()
    text = read_text_utf8(path, "--config")
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML ({exc}); fix: correct the YAML syntax") from exc
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: top level = {type(data).__name__}: must be a mapping; fix: use `key: value` lines")
    return parse_config(data, source=str(path))


__all__ = ["default_config", "load_config", "parse_config"]
