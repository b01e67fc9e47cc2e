"""Engines: one module per inference engine, each registering its config, settings, adapter and
parameter names under one name (`engines.registry`). Importing this package registers the built-in
ones. The order of the imports below decides nothing: each engine declares where it stands
(`EngineSpec.priority`: the order `bench --url` asks the adapters and parameter names merge)."""

from specfrontier.engines import llamacpp, sglang, sim, trtllm, vllm  # noqa: F401  (each registers itself)
from specfrontier.engines.base import Capacity, Detected, EngineAdapter, EngineOptions, EngineSetting, ParamNames
from specfrontier.engines.registry import EngineSpec, engine_names, spec, spec_of, specs, stored_setting, vocabulary

__all__ = [
    "Capacity",
    "Detected",
    "EngineAdapter",
    "EngineOptions",
    "EngineSetting",
    "EngineSpec",
    "ParamNames",
    "engine_names",
    "spec",
    "spec_of",
    "specs",
    "stored_setting",
    "vocabulary",
]
