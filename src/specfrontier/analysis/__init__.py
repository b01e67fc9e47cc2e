"""Analysis: summaries over repeats, best setting per concurrency, crossovers, recommendations."""

from specfrontier.analysis.decisions import (
    Best,
    Crossover,
    Recommendation,
    best_per_concurrency,
    crossovers,
    recommend,
    speedup,
)
from specfrontier.analysis.summary import (
    MIN_STEADY_CONCURRENCY,
    MIN_STEADY_LIFETIMES,
    MIN_STEADY_S,
    CellSummary,
    OverRepeats,
    RunData,
    load_run,
    summarise_cells,
)

__all__ = [
    "MIN_STEADY_CONCURRENCY",
    "MIN_STEADY_LIFETIMES",
    "MIN_STEADY_S",
    "Best",
    "CellSummary",
    "Crossover",
    "OverRepeats",
    "Recommendation",
    "RunData",
    "best_per_concurrency",
    "crossovers",
    "load_run",
    "recommend",
    "speedup",
    "summarise_cells",
]
