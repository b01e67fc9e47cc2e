"""The YAML config of a sweep, as pydantic models, and the one function that loads it.

One config class per engine family (`engine.name` picks it); the sweep shape, the workload and the
error format are shared (`common`). Nothing here launches a server: `load_config` fails before any
process starts, with one line naming the field, the value seen and the fix.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from specfrontier.config.common import SettingLike, TuneBase, WorkloadConfig, describe_validation_error
from specfrontier.config.llamacpp import (
    NGRAM_SIZED_TYPES,
    LlamaCppEngine,
    LlamaCppSetting,
    LlamaCppTuneConfig,
    SpecType,
    default_config,
    default_settings,
)
from specfrontier.config.search import SearchConfig
from specfrontier.config.sglang import (
    SGLangEngine,
    SGLangSetting,
    SGLangTuneConfig,
    SimEngine,
    production_sim_config,
    seed_sim_config,
)
from specfrontier.errors import ConfigError
from specfrontier.textfiles import read_text_utf8

TuneConfig = LlamaCppTuneConfig | SGLangTuneConfig
"""The config of a sweep: one class per engine family, picked by `engine.name`."""

ENGINE_NAMES = ("llamacpp", "sglang", "sim")
"""Engines a config may name."""


def parse_config(data: dict[str, Any], *, source: str = "config") -> TuneConfig:
    """Validate a config mapping; `engine.name` picks the config class; a missing `settings` key means
    that engine's embedded default settings."""
    engine = data.get("engine")
    name = engine.get("name", "llamacpp") if isinstance(engine, dict) else "llamacpp"
    if name not in ENGINE_NAMES:
        raise ConfigError(
            f"{source}: engine.name = {name!r}: unknown engine; fix: use one of {', '.join(ENGINE_NAMES)}"
        )
    cls: type[LlamaCppTuneConfig] | type[SGLangTuneConfig] = LlamaCppTuneConfig
    if name in ("sim", "sglang"):
        cls = SGLangTuneConfig
        if "settings" not in data:
            data = {**data, "settings": [s.model_dump(exclude_defaults=True) for s in seed_sim_config().settings]}
    elif "settings" not in data:
        data = {**data, "settings": [s.model_dump(exclude_defaults=True) for s in default_settings()]}
    try:
        return cls.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(describe_validation_error(exc, source)) from exc


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


__all__ = [
    "ENGINE_NAMES",
    "NGRAM_SIZED_TYPES",
    "LlamaCppEngine",
    "LlamaCppSetting",
    "LlamaCppTuneConfig",
    "SGLangEngine",
    "SGLangSetting",
    "SGLangTuneConfig",
    "SearchConfig",
    "SettingLike",
    "SimEngine",
    "SpecType",
    "TuneBase",
    "TuneConfig",
    "WorkloadConfig",
    "default_config",
    "default_settings",
    "load_config",
    "parse_config",
    "production_sim_config",
    "seed_sim_config",
]
