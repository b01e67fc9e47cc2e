"""Time to a first answer: the default `specfrontier tune` (llama.cpp, the embedded model, 3 settings x
C = 1, 2, 4) on a fresh store, as a new user runs it. Prints the wall time, how many cells were measured,
whether every cell had a steady state, the drift per level and the recommendation.

    python benchmarks/first_answer.py [--store DIR]

Target (issue 30): <= 5 min on 2 cores, against 12 min 15 s before (27 cells of 25 s, settings one after
another). It runs the real llama-server: run it on a machine that is otherwise idle.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BEFORE_S = 12 * 60 + 15
TARGET_S = 5 * 60


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", type=Path, default=None, help="directory for the fresh store (default: a temp dir)")
    args = parser.parse_args()
    where = args.store or Path(tempfile.mkdtemp(prefix="first-answer-"))
    where.mkdir(parents=True, exist_ok=True)
    store = where / "specfrontier.db"
    if store.exists():
        print(f"--store {where}: already holds a store; fix: pass an empty directory", file=sys.stderr)
        return 2
    tune = [sys.executable, "-c", "from specfrontier.cli import main; main()"]
    started = time.monotonic()
    done = subprocess.run([*tune, "tune", "--store", str(store), "--quiet"], capture_output=True, text=True)
    wall_s = time.monotonic() - started
    if done.returncode != 0:
        print(done.stdout[-3000:], done.stderr[-3000:], sep="\n")
        print(f"tune exited {done.returncode} after {wall_s:.0f} s")
        return 1
    from specfrontier.analysis import load_run
    from specfrontier.report.json_export import report_json
    from specfrontier.store import Store

    opened = Store(store)
    (run,) = opened.runs()
    report = report_json(load_run(opened, run.run_id))
    cells = report["cells"]
    short = [f"{c['setting']} C={c['concurrency']}" for c in cells if c.get("steady_too_short")]
    decisions = report
    print(f"wall time: {wall_s:.0f} s ({wall_s / 60:.1f} min); target <= {TARGET_S} s; before: {BEFORE_S} s")
    print(f"cells: {len(cells)} cell(s), {sum(c.get('repeats', 0) for c in cells)} repeat(s) measured")
    print("every cell has a steady state" if not short else f"NO steady state: {', '.join(short)}")
    for d in decisions.get("drift", []):
        print(f"drift C={d['level']:g}: {d['change']:+.1%} ({d['low']:+.1%} .. {d['high']:+.1%})")
    for r in decisions.get("recommendations", []):
        print(f"answer: {r['setting']} at C={r['concurrency']}: {r['note']}")
    return 0 if wall_s <= TARGET_S and not short else 1


if __name__ == "__main__":
    sys.exit(main())
