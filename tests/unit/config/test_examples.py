"""Every example config loads and can give an answer at every level it lists: its closed-loop cells can
reach a steady state (`metrics.steady`) long enough for the report's rule (`analysis.summary`:
MIN_STEADY_LIFETIMES request lifetimes at C > 1). The README's vLLM example once sent 4 requests at C = 4,
so every C = 4 cell was flagged and the run recommended for C = 1 only (issue 31)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from builders import REPO, closed_loop_ms
from specfrontier.analysis import MIN_STEADY_LIFETIMES
from specfrontier.config.load import parse_config
from specfrontier.load.closed_loop import requests_per_cell
from specfrontier.metrics.steady import steady_span
from specfrontier.workloads import load_prompts
from specfrontier.workloads.resolve import resolve_workload

EXAMPLES = sorted((REPO / "examples").glob("*.yaml"))


def _lock_step_lifetimes(rounds: int, concurrency: int) -> float:
    """Request lifetimes in the steady span of an ideal closed loop of `rounds` rounds at C: the most any
    cell of that many requests can have (real requests end out of step and lose more to ramp and drain)."""
    length_ms = 1000
    span = steady_span(closed_loop_ms(concurrency, rounds, length_ms, tokens=10), concurrency)
    return 0.0 if span is None else (span[1] - span[0]) / (length_ms * 1_000_000)


def _prompt_counts(path: Path) -> list[int]:
    config = parse_config(yaml.safe_load(path.read_text()), source=str(path))
    if config.workloads:
        return [len(resolve_workload(spec).prompts) for spec in config.workloads]
    w = config.workload
    return [len(load_prompts(w.prompts, max_tokens=w.max_tokens, api=w.api))]


def test_the_lock_step_bound_is_the_steady_state_rule() -> None:
    # an ideal cell of R rounds has R - 1 lifetimes of steady span: 5 rounds are the fewest that pass
    assert _lock_step_lifetimes(5, 4) == MIN_STEADY_LIFETIMES
    assert _lock_step_lifetimes(4, 4) < MIN_STEADY_LIFETIMES
    assert _lock_step_lifetimes(1, 4) == 0.0  # one pass of C requests: no steady state at all


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_every_example_loads_and_can_reach_a_steady_state_at_every_level(path: Path) -> None:
    config = parse_config(yaml.safe_load(path.read_text()), source=str(path))
    assert config.all_settings(), path
    if config.load.mode == "open" or config.cell_duration_s is not None:
        return  # a time-bounded cell goes on in whole passes until its duration: its span grows with it
    for prompts in _prompt_counts(path):
        for c in (c for c in config.concurrency if c > 1):
            rounds = requests_per_cell(config.rounds_per_cell, c, prompts) // c
            assert _lock_step_lifetimes(rounds, c) >= MIN_STEADY_LIFETIMES, (
                f"{path.name}: C={c} sends {rounds * c} requests per cell ({rounds} rounds): no steady state of "
                f"{MIN_STEADY_LIFETIMES:g} lifetimes; fix: set cell_duration_s or rounds_per_cell >= 5"
            )
