"""Engine adapters: one module per inference engine, registered by name in ENGINES."""

from collections.abc import Callable

from specfrontier.config import LlamaCppEngine
from specfrontier.engines.base import Capacity, EngineAdapter, WindowAcceptance
from specfrontier.engines.llamacpp import LlamaCppAdapter

ENGINES: dict[str, Callable[[LlamaCppEngine], EngineAdapter]] = {"llamacpp": LlamaCppAdapter}

__all__ = ["ENGINES", "Capacity", "EngineAdapter", "LlamaCppAdapter", "WindowAcceptance"]
