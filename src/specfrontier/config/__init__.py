"""The YAML config of a sweep, as pydantic models.

The sweep shape, the workload and the error format are shared (`common`); the engine options and the
settings are each engine's own, registered with it (`specfrontier.engines.registry`), and `config.load`
reads a file into the registered engine's config class (`engine.name` picks it). This package imports no
engine, so engines can build on `common` without an import cycle.
"""

from __future__ import annotations

from specfrontier.config.common import TuneBase, WorkloadConfig
from specfrontier.config.search import SearchConfig

TuneConfig = TuneBase
"""The config of a sweep: the registered engine's subclass of `TuneBase`, picked by `engine.name`."""


__all__ = [
    "SearchConfig",
    "TuneBase",
    "TuneConfig",
    "WorkloadConfig",
]
