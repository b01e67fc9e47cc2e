"""Engine adapters: one module per inference engine, registered by name in ENGINES."""

from collections.abc import Callable
from typing import Any

from specfrontier.engines.base import Capacity, EngineAdapter
from specfrontier.engines.llamacpp import LlamaCppAdapter
from specfrontier.engines.sglang import SGLangAdapter

ENGINES: dict[str, Callable[[Any], EngineAdapter[Any]]] = {
    "llamacpp": LlamaCppAdapter,
    "sglang": SGLangAdapter,
    "sim": SGLangAdapter,  # the simulator's HTTP face speaks SGLang's interface
}

__all__ = ["ENGINES", "Capacity", "EngineAdapter", "LlamaCppAdapter", "SGLangAdapter"]
