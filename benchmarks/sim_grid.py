"""Speed of the simulator's virtual-time face: the seed grid as `tune --engine sim` runs it.

The grid is `seed_sim_config`: no speculation + steps 1-5 x C 1, 4, 16, 32, 64, 3 repeats of 7 rounds
(90 cells). Target (issue 3): under 10 seconds per repeat of the grid, so 30 s for the whole run.
Run: `.venv/bin/python benchmarks/sim_grid.py`. Machines differ, so the result is also printed as a
ratio against a reference run in the same process: the single cheapest cell (steps 1, C=1, one
repeat), repeated, gives the machine's speed; the grid's cost in "reference cells" is what should stay
stable across machines. Across commits compare wall seconds on one machine: a change that speeds up the
simulator speeds up the reference cell too (issue 18's fast-forward made it ~9x faster). The whole
`tune` command, store and report included, is timed by `benchmarks/scale.py`.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from specfrontier.engines.sim import seed_sim_config
from specfrontier.runs.virtual_sweep import VirtualSweep
from specfrontier.sim import load_profile, seed_protocol, simulate_repeat
from specfrontier.sim.protocol import seed_named_setting
from specfrontier.store import Store

TARGET_S_PER_REPEAT = 10.0
PROFILE = "seed-qwen3.5-122b-a10b"


def _timed(fn: Callable[[], object], repeats: int) -> float:
    """Median wall seconds of `fn()` over `repeats` runs."""
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def _seed_run(folder: Path) -> None:
    config = seed_sim_config().model_copy(update={"store": folder / f"{time.perf_counter_ns()}.db"})
    sweep = VirtualSweep(config)
    sweep.attach(Store(Path(config.store)))
    sweep.run_sync(sweep.new_run())


def main() -> None:
    profile = load_profile(PROFILE)
    protocol = seed_protocol()
    name, setting = seed_named_setting(1)
    reference_s = _timed(lambda: simulate_repeat(profile, name, setting, 1, 0, protocol), repeats=5)
    with tempfile.TemporaryDirectory() as folder:
        run_s = _timed(lambda: _seed_run(Path(folder)), repeats=3)
    target = TARGET_S_PER_REPEAT * protocol.repeats
    print(f"profile {PROFILE}: the seed grid as `tune --engine sim` runs it (6 settings x 5 levels x 3 repeats)")
    print(f"  reference cell (steps 1, C=1, one repeat): {reference_s * 1000:.1f} ms")
    print(f"  seed run into a store:                     {run_s:.2f} s = {run_s / reference_s:.0f} reference cells")
    print(f"  target:                                    {target:.0f} s -> run / target = {run_s / target:.2f} (< 1)")


if __name__ == "__main__":
    main()
