"""Drift control under a CPU hog that starts halfway through a run (issue 30).

Runs a small interleaved tune on the real llama.cpp server (the embedded model: a baseline and an n-gram
setting at C = 1, short cells), and once half the cells are stored starts busy-loop processes (4 per CPU,
each stopping by itself after --hog-s seconds, and stopped by pid at the end at the latest). Prints the
drift per level and the recommendation, and checks:

- with the hog: the drift is beyond the noise, and no recommendation rests on a difference smaller than it;
- with --no-hog: the drift is within the noise.

    python benchmarks/drift_hog.py            # hog halfway
    python benchmarks/drift_hog.py --no-hog   # the same run, no hog
    python benchmarks/drift_hog.py --engine sim [--no-hog]   # the simulator's HTTP face instead

Exit 0 when the check holds, 1 when it does not. On a machine shared with other work the no-hog run can
see drift too (that is what the control is for): run it where nothing else runs for the 'within the
noise' half.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from specfrontier.analysis import load_run, recommend
from specfrontier.analysis.drift import drift_lines, level_drifts
from specfrontier.config.load import parse_config
from specfrontier.runs.cell import CellDone
from specfrontier.runs.sweep import SweepEvents, open_sweep

HOG = "import time\nend = time.monotonic() + {s}\nwhile time.monotonic() < end:\n    pass\n"


ENGINES: dict[str, dict[str, object]] = {
    "llamacpp": {
        "engine": {"name": "llamacpp"},
        "workloads": [{"source": "builtin:cpu-mix", "prompts": 2, "max_tokens": 32}],
        "settings": [
            {"name": "baseline"},
            {"name": "ngram-simple-n3-m8", "spec_type": "ngram-simple", "ngram_size_n": 3, "ngram_size_m": 8},
        ],
    },
    "sim": {  # the simulator's HTTP face: real (scaled) time, far less sensitive to CPU load than llama.cpp
        "engine": {"name": "sim", "face": "http", "time_scale": 1.0},
        "workloads": [{"source": "synthetic-greedy", "prompts": 2, "input_tokens": 32, "max_tokens": 32}],
        "settings": [{"name": "baseline"}, {"name": "steps2", "algorithm": "EAGLE3", "num_steps": 2}],
    },
}


def config(engine: str, store: Path, repeats: int, cell_s: float) -> dict[str, object]:
    return {
        **ENGINES[engine],
        "concurrency": [1],
        "repeats": repeats,
        "rounds_per_cell": 1,
        "cell_duration_s": cell_s,
        "drift_control": "interleave",
        "store": str(store),
    }


async def run(args: argparse.Namespace) -> int:
    store = Path(tempfile.mkdtemp(prefix="drift-hog-")) / "s.db"
    cfg = parse_config(config(args.engine, store, args.repeats, args.cell_s), source="drift_hog")
    total = 2 * args.repeats
    hogs: list[subprocess.Popen[bytes]] = []

    def on_cell(done: CellDone) -> None:
        print(f"  {done.setting} repeat {done.repeat + 1}: {done.metrics.aggregate_tok_s or 0:.1f} tok/s", flush=True)
        stored = len(sweep.store.done_cells(run_id))
        if not args.no_hog and not hogs and stored >= total // 2:
            count = args.hogs or 4 * (os.cpu_count() or 1)
            print(f"  -- hog: {count} busy loop(s) for at most {args.hog_s:g} s", flush=True)
            for _ in range(count):
                hogs.append(subprocess.Popen([sys.executable, "-c", HOG.format(s=args.hog_s)]))

    sweep, run_id = open_sweep(cfg, None, resume=None, events=SweepEvents(on_cell_done=on_cell))
    try:
        outcome = await sweep.run(run_id)
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
    data = load_run(sweep.store, run_id)
    print(f"run {run_id}: {outcome.status}")
    for line in drift_lines(data):
        print(" ", line)
    recs = recommend(data)
    for rec in recs:
        print(f"  recommendation: {rec.setting}: {rec.note}")
    drifts = level_drifts(data)
    if args.no_hog:
        ok = bool(drifts) and not any(d.beyond_noise for d in drifts)
        print("CHECK no hog: drift within the noise:", "yes" if ok else "NO")
        return 0 if ok else 1
    detected = bool(drifts) and all(d.beyond_noise for d in drifts)
    resting = [  # a solid recommendation of a speculative setting whose margin over the baseline is inside the drift
        rec
        for rec in recs
        if rec.setting != data.baseline and rec.beyond_spread and any(d.size >= _margin(data, rec) for d in drifts)
    ]
    print("CHECK hog: drift detected and reported:", "yes" if detected else "NO")
    print("CHECK hog: no recommendation rests on a difference within the drift:", "yes" if not resting else "NO")
    return 0 if detected and not resting else 1


def _margin(data: object, rec: object) -> float:
    from specfrontier.analysis import RunData
    from specfrontier.analysis.decisions import Recommendation, speedup

    assert isinstance(data, RunData) and isinstance(rec, Recommendation)
    ups = [speedup(data, rec.setting, level) for level in rec.concurrency]
    return min(abs(u - 1.0) for u in ups if u is not None) if any(u is not None for u in ups) else 0.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engine", choices=sorted(ENGINES), default="llamacpp", help="server to measure")
    parser.add_argument("--no-hog", action="store_true", help="the same run without the hog")
    parser.add_argument("--repeats", type=int, default=4, help="repeats per cell (the hog starts after half)")
    parser.add_argument("--cell-s", type=float, default=6.0, help="seconds each cell sends for")
    parser.add_argument("--hogs", type=int, default=0, help="busy loops (default: 4 per CPU)")
    parser.add_argument("--hog-s", type=float, default=180.0, help="the longest a busy loop runs")
    return asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    sys.exit(main())
