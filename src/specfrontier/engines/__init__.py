"""Engines: one module per inference engine, each registering its config, settings, adapter and
parameter names under one name (`engines.registry`). Importing this package registers the built-in
ones; the order is the order `bench --url` asks them and the order their parameter names are merged."""

# isort: off
# Registration order: the order `bench --url` asks the adapters and the order parameter names merge
# (SGLang's, then vLLM's, then TensorRT-LLM's, then llama.cpp's, so imported tables read the same as before
# the registry).
from specfrontier.engines import sglang  # noqa: F401
from specfrontier.engines import sim  # noqa: F401
from specfrontier.engines import vllm  # noqa: F401
from specfrontier.engines import trtllm  # noqa: F401
from specfrontier.engines import llamacpp  # noqa: F401

# isort: on
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
