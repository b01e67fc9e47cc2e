"""Speed of the simulator's virtual-time face: the seed grid (steps 1-5 x C 1, 4, 16, 32, 64).

Target (issue 3): the whole grid in under 10 seconds. Run: `.venv/bin/python benchmarks/sim_grid.py`.
Machines differ, so the result is also printed as a ratio against a reference run in the same
process: the single cheapest cell (steps 1, C=1), repeated, gives the machine's speed; the grid's
cost in "reference cells" is what should stay stable across machines and commits.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

from specfrontier.sim import load_profile
from specfrontier.sim.virtual import run_grid, simulate_seed_cell

TARGET_S = 10.0
PROFILE = "seed-qwen3.5-122b-a10b"


def _timed(fn: Callable[[], object], repeats: int) -> float:
    """Median wall seconds of `fn()` over `repeats` runs."""
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def main() -> None:
    profile = load_profile(PROFILE)
    reference_s = _timed(lambda: simulate_seed_cell(profile, 1, 1), repeats=5)
    grid_s = _timed(lambda: run_grid(profile), repeats=3)
    print(f"profile {PROFILE}: seed grid 5 steps x 5 concurrency levels (25 cells), median of 3 runs")
    print(f"  reference cell (steps 1, C=1): {reference_s * 1000:.1f} ms")
    print(f"  seed grid:                     {grid_s:.2f} s = {grid_s / reference_s:.0f} reference cells")
    print(f"  target:                        {TARGET_S:.0f} s -> grid / target = {grid_s / TARGET_S:.2f} (must be < 1)")


if __name__ == "__main__":
    main()
