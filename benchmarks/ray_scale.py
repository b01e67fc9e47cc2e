"""Wall-time speed-up of a sweep on Ray with 1, 2 and 4 worker nodes (issue 17).

Run: `.venv/bin/python benchmarks/ray_scale.py [--settings 8]` (needs the `ray` extra).

A local Ray cluster on 127.0.0.1 (a head without CPUs and N worker nodes, each offering one `slot`, the
stand-in for a GPU set) runs the same sweep each time: the simulator's HTTP face (a real server
subprocess speaking SGLang's interface, simulated time 4x wall time) for `--settings` settings (no
speculation and EAGLE-3 chains of 1..n-1 steps) x C = 1, 4 x 1 repeat; every setting holds one slot.
Printed: wall seconds per worker count (cluster start excluded), and each as a ratio to the 1-worker run
of the same process (the speed-up; ideal = N). The local executor's time is printed as the reference of
what Ray costs on one worker. On a 2-core machine every server and load generator shares the same two
cores, so the speed-up is bounded by them, not by the executor.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")  # Ray reads it on import: nodes on 127.0.0.1

import ray
from ray.cluster_utils import Cluster

from specfrontier.config.load import parse_config
from specfrontier.runs.sweep import open_sweep


def _config(store: Path, settings: int, executor: str) -> dict[str, Any]:
    chains = [{"name": f"steps{s}", "algorithm": "EAGLE3", "num_steps": s} for s in range(1, settings)]
    return {
        "engine": {"name": "sim", "face": "http", "time_scale": 4.0, "startup_timeout_s": 120},
        "workload": {"max_tokens": 64, "ignore_eos": True},
        "concurrency": [1, 4],
        "repeats": 1,
        "rounds_per_cell": 3,
        "warmup_rounds": 1,
        "settings": [{"name": "no-spec"}, *chains],
        "store": str(store),
        "executor": {"kind": executor, "resources": {"CPU": 1, "slot": 1}},
    }


def _sweep_s(data: dict[str, Any]) -> float:
    sweep, run_id = open_sweep(parse_config(data), None, resume=None)
    start = time.perf_counter()
    outcome = asyncio.run(sweep.run(run_id))
    elapsed = time.perf_counter() - start
    if outcome.status != "done":
        raise SystemExit(f"sweep {outcome.status}: {outcome.failed_settings}")
    return elapsed


def _on_cluster(workers: int, data: dict[str, Any]) -> float:
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "include_dashboard": False})
    try:
        for _ in range(workers):
            cluster.add_node(num_cpus=1, resources={"slot": 1})
        ray.init(address=cluster.address, log_to_driver=False)
        return _sweep_s(data)
    finally:
        ray.shutdown()
        cluster.shutdown()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--settings", type=int, default=8, help="settings in the sweep (default 8)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        local = _sweep_s(_config(Path(folder) / "local.db", args.settings, "local"))
        times = {n: _on_cluster(n, _config(Path(folder) / f"ray{n}.db", args.settings, "ray")) for n in (1, 2, 4)}
    print(f"{args.settings} settings x C 1, 4 (simulator HTTP face, 4x simulated time), one slot per setting")
    print(f"{'executor':<16} {'wall s':>8} {'speed-up vs 1 worker':>22}")
    print(f"{'local':<16} {local:>8.1f} {times[1] / local:>22.2f}")
    for n, seconds in times.items():
        print(f"{f'ray, {n} worker(s)':<16} {seconds:>8.1f} {times[1] / seconds:>22.2f}")
    print(f"(cores here: {os.cpu_count()}; every worker node shares them)")


if __name__ == "__main__":
    main()
