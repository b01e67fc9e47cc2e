"""The `search:` block of a config: which settings `tune` measures, in what order, within what budget.

- `grid` measures every listed setting (the seed's method; today's behaviour, the default).
- `adaptive` measures the baseline, then walks each depth ladder (settings that differ only in their
  speculation depth: SGLang `num_steps`, llama.cpp `draft_n_max` / n-gram `ngram_size_m`) from the
  shallowest, and goes one depth deeper only while the deeper setting gains, at some target
  concurrency, more than the noise: the seed's "will steps=5 help?" answered by measuring, not asked.
- `guided` measures a small design across concurrency, fits the performance model, and measures the
  predicted best per target concurrency and its neighbours until the prediction is confirmed.

A budget caps launches (one per setting) and engine-seconds (startup + measured windows, as stored);
the search stops before a launch that the budget does not cover, and says so.

Depth ladders (`search.ladder`) may be extended past their deepest listed setting: chains by default
(`extend_depth: chains`, "will steps = 5 help?"), trees only when asked (`all`: a tree's depth at a fixed
draft-token budget mostly adds draft cost, and deepening every tree ladder cost guided search 2-3 x the
grid's launches on a public tree table, issue 38), nothing with `none` (the declared `space:` or settings).
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from specfrontier.config.limits import MAX_CONCURRENCY
from specfrontier.config.strict import StrictModel

SearchStrategy = Literal["grid", "adaptive", "guided"]
ExtendDepth = Literal["chains", "all", "none"]
SearchObjective = Literal["aggregate_tok_s", "per_request_tok_s_p50"]


class SearchConfig(StrictModel):
    """How `tune` chooses the settings it measures (see the module docstring)."""

    strategy: SearchStrategy = Field("grid", description="grid (every listed setting), adaptive or guided.")
    max_launches: int | None = Field(None, ge=1, le=10000, description="Budget: server launches (one per setting).")
    max_engine_s: float | None = Field(
        None, gt=0, description="Budget: engine-seconds (startup + measured windows); checked before each launch."
    )
    target_concurrency: tuple[Annotated[int, Field(ge=1, le=MAX_CONCURRENCY)], ...] = Field(
        (), description="Concurrency levels the search optimises (empty: every level of `concurrency`)."
    )
    objective: SearchObjective = Field(
        "aggregate_tok_s", description="Figure compared at each target concurrency (median over repeats)."
    )
    min_gain: float = Field(
        0.02, ge=0.0, le=1.0, description="Relative gain a deeper setting must exceed, on top of the repeat spread."
    )
    max_depth: int | None = Field(
        None, ge=1, le=256, description="Deepest speculation depth adaptive/guided may add (default: engine's)."
    )
    extend_depth: ExtendDepth = Field(
        "chains",
        description="Which depth ladders adaptive/guided may extend past their deepest listed setting: chains "
        "(default), all (trees too, per branching and draft-token budget) or none (only the listed settings).",
    )

    @property
    def budgeted(self) -> bool:
        return self.max_launches is not None or self.max_engine_s is not None


__all__ = ["ExtendDepth", "SearchConfig", "SearchObjective", "SearchStrategy"]
