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
from specfrontier.analysis.summary import CellSummary, OverRepeats, RunData, load_run, summarise_cells

__all__ = [
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
