"""Search: which settings `tune` measures, chosen from stored results within a budget.

`planner.SearchPlanner` drives a `base.Strategy` (`grid.GridStrategy`: every listed setting;
`adaptive.AdaptiveStrategy`: deeper speculation while it gains beyond the noise;
`guided.GuidedStrategy`: a design over every dimension of the space, the performance model, moves along
each dimension, and confirmation) over the dimensions of `space` (the setting fields the listed settings
vary) and the depth ladders of `ladder`, reading results only through the store (`observe`).
"""

from specfrontier.search.adaptive import AdaptiveStrategy
from specfrontier.search.base import Done, Proposal, Step, Strategy
from specfrontier.search.grid import GridStrategy
from specfrontier.search.guided import GuidedStrategy
from specfrontier.search.ladder import Ladder, build_ladders, depth_of, with_depth
from specfrontier.search.observe import Observations, beats, observe
from specfrontier.search.planner import SearchPlanner, make_strategy

__all__ = [
    "AdaptiveStrategy",
    "Done",
    "GridStrategy",
    "GuidedStrategy",
    "Ladder",
    "Observations",
    "Proposal",
    "SearchPlanner",
    "Step",
    "Strategy",
    "beats",
    "build_ladders",
    "depth_of",
    "make_strategy",
    "observe",
    "with_depth",
]
