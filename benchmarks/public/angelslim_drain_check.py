"""Can the harness's drain explain AngelSlim #163's tree bend? A replay of the whole-run figure (issue 38).

Why: the table's throughput is all output tokens over the wall time of one prompt set run to the end
(SpecForge's benchmarker; latency x throughput = 169,659-178,459 tokens in every row), so at batch 32 and 64
the running batch drains below the label for part of each run, by amounts the table does not give. If the
drain caused the (4,4,16) tree's concave bend between batch 32 and 64, linear per-step cycles replayed
through the drain would fit the table. This script replays it: a closed loop of `batch` slots over N prompts
whose output lengths are drawn log-normally and share the table's ~174,000 tokens, every running request
advancing by the setting's accept length per step, each step costing a + k x (running requests). a and k
of the baseline and of the tree are fitted jointly through the replay, for each N and spread.

Result (2026-12-06, seed 0, 17 s): the same linear cycles fitted without a drain (every step at the label)
miss the 10 cells by 8.5 % RMS, the tree at 64 by -15.9 %; through the drain, 7.5-14.6 % for every N in
20-1000 (prompt sets smaller than the batch included) and sigma 0-1, the tree at 64 by -13.8 to -30.8 %.
The best case (50 equal prompts: batch 64 runs all 50 at once, batch 32 runs 32 then 18) gains 1 point
of RMS and leaves the tree at 64 14 % off: the drain raises the apparent cycle at 64, so the true cycle's
bend would be as sharp or sharper (the third round found the same with equal-length waves). The table's
6.0 % (moe-roofline, benchmarks/model_public.py) is over its 13 cells.

Run: .venv/bin/python benchmarks/public/angelslim_drain_check.py
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
from scipy.optimize import least_squares

TABLE = Path(__file__).with_name("angelslim_i163_qwen3_30b_a3b_eagle3_h100x4.json")
TOTAL_OUTPUT_TOKENS = 174_000
"""The middle of latency x throughput over the table's rows (the table's notes)."""
TREE = "s4k4d16"
PROMPT_COUNTS = (20, 40, 50, 64, 80, 160, 300, 1000)
"""Prompt sets from smaller than the largest batch (the same author's SpecForge #339 ran `mtbench:20`, so its
batch 32 and 64 both ran all 20 prompts at once: 1077.55 and 1073.69 tok/s) to far larger."""


def load_table() -> tuple[list[int], np.ndarray, np.ndarray, np.ndarray]:
    """Batch sizes at which both the baseline and the tree ran; their throughputs; the tree's accept lengths."""
    cells = json.loads(TABLE.read_text())["cells"]
    base = {c["batch_size"]: c["aggregate_tok_s"] for c in cells if c["setting"] == "no-spec"}
    tree = {c["batch_size"]: c for c in cells if c["setting"] == TREE}
    batches = sorted(set(base) & set(tree))
    return (
        batches,
        np.array([base[b] for b in batches]),
        np.array([tree[b]["aggregate_tok_s"] for b in batches]),
        np.array([tree[b]["acceptance_length"] for b in batches]),
    )


def whole_run_throughput(lengths: np.ndarray, batch: int, cycle: Callable[[int], float], per_step: float) -> float:
    """Output tokens / wall time of a closed loop of `batch` slots run over every prompt to the end."""
    running = np.array(lengths[:batch], dtype=float)
    queued = list(lengths[batch:])
    wall = 0.0
    while running.size:
        steps = np.ceil(running.min() / per_step)  # until the next request ends
        wall += steps * cycle(running.size)
        running = running - steps * per_step
        finished = int((running <= 1e-9).sum())
        running = running[running > 1e-9]
        refill = [queued.pop(0) for _ in range(min(finished, len(queued)))]
        running = np.concatenate([running, np.array(refill, dtype=float)])
    return float(lengths.sum()) / wall


def steady_throughput(batch: int, cycle: Callable[[int], float], per_step: float) -> float:
    """Without a drain: every step runs the labelled batch."""
    return batch * per_step / cycle(batch)


def fit(lengths: np.ndarray | None) -> tuple[float, np.ndarray]:
    """Joint fit of (a, k) for the baseline and the tree through the replay (None: steady, no drain): RMS and
    relative errors."""
    batches, base, tree, accept = load_table()

    def throughput(batch: int, cycle: Callable[[int], float], per_step: float) -> float:
        if lengths is None:
            return steady_throughput(batch, cycle, per_step)
        return whole_run_throughput(lengths, batch, cycle, per_step)

    def errors(p: np.ndarray) -> np.ndarray:
        a0, k0, a1, k1 = np.abs(p)
        got_base = [throughput(b, lambda m: a0 + k0 * m, 1.0) for b in batches]
        got_tree = [throughput(b, lambda m: a1 + k1 * m, float(t)) for b, t in zip(batches, accept, strict=True)]
        return np.concatenate([np.array(got_base) / base - 1, np.array(got_tree) / tree - 1])

    start = np.array([4e-3, 7e-4, 12e-3, 2.4e-3])
    result = least_squares(errors, start, x_scale=[1e-3, 1e-4, 1e-3, 1e-4])
    return float(np.sqrt(np.mean(result.fun**2))), result.fun


def main() -> None:
    rng = np.random.default_rng(0)
    batches, *_ = load_table()
    print(f"cells: no-spec and {TREE} at batch {batches}; errors: fitted / measured - 1, %")
    print(f"{'prompts':>7} {'sigma':>5} {'RMS %':>6}  no-spec ... {TREE} ...")
    rms, errs = fit(None)
    print(f"{'steady':>7} {'-':>5} {100 * rms:>6.1f}  " + " ".join(f"{100 * e:+.1f}" for e in errs))
    drained = []
    for prompts in PROMPT_COUNTS:
        for sigma in (0.0, 0.5, 1.0):
            raw = rng.lognormal(0.0, sigma, prompts) if sigma > 0 else np.ones(prompts)
            lengths = np.maximum(1.0, np.round(raw / raw.sum() * TOTAL_OUTPUT_TOKENS))
            rms, errs = fit(lengths)
            drained.append((rms, errs[-1]))
            print(f"{prompts:>7} {sigma:>5} {100 * rms:>6.1f}  " + " ".join(f"{100 * e:+.1f}" for e in errs))
    best, tree_at_top = min(drained)
    print(
        f"best through a drain: {100 * best:.1f} % RMS (the tree at batch {batches[-1]}: {100 * tree_at_top:+.1f} %); "
        f"the tree at batch {batches[-1]} over every case: {100 * min(e for _, e in drained):+.1f} to "
        f"{100 * max(e for _, e in drained):+.1f} %"
    )


if __name__ == "__main__":
    main()
