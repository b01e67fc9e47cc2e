"""How well the performance model predicts depths it was not fitted on, and whether it picks the right one.

Run: `.venv/bin/python benchmarks/model_accuracy.py [--quick] [--space chains|trees|all]`.

`--space trees` (or `all`, the default) adds the 3-D spaces of SGLang trees (steps x topk x draft tokens,
dense and MoE, 67 settings x C = 1-64; `model_accuracy_trees.py` says how they are built and scored): the
model fitted on a random quarter of the settings predicts the rest.

Each case is a sweep of the seed's kind: EAGLE-3 chains (topk 1, draft tokens = steps + 1), steps 1-6 x
C = 1, 2, 4, 8, 16, 32, 64, with ONLY aggregate tok/s given to the model (no acceptance, no capacity, no
per-request figure, no output length), as public sweeps publish them. The model (`perfmodel.fit_model`,
what `plan --fit-only` runs) is fitted on steps 1-3 and predicts steps 4-6; a second split fits on the odd
depths (1, 3, 5) and predicts the even ones; a third fits on steps 1-2 only (the hardest). Scores:

- mean and max absolute error of the held-out aggregate figures (%);
- regret: at each C, the true throughput of the depth the model predicts best (over all of steps 1-6),
  relative to the truly best depth's ((best - chosen) / best, %); the worst C is reported; and the
  regret beyond the truth's spread (the chosen depth's best repeat below the best depth's worst repeat),
  because a simulated "truth" is itself a measurement with noise;
- doubtful: cells of the truth the run itself flags (noisy repeats, no steady state).

Bounds asked for (issue 15): mean <= 2 %, max <= 5 %, regret <= 1 % at every C.

Cases (all are the simulator's MODEL sweeps, `tune --engine sim` with 3 repeats of at least 7 rounds and 60
simulated seconds per cell; the "truth" is what that run stores, the median over repeats):
- seed: the seed profile (MoE, compute knee), greedy + ignore_eos;
- seed-chat: the same deployment under chat sampling (t = 0.7, natural EOS: lower acceptance);
- dense: the seed profile made dense (every token reaches every expert), its knee at 128 tokens;
- late-knee: the seed profile with the compute knee at 192 verified tokens (memory-bound longer).
And the seed's own published table (fit on steps 1-3, predict steps 4; capacity and per-request given as
published), for reference: it has only 5 held-out figures.

Speed is not measured here (benchmarks/sim_grid.py and search_cost.py do that); the seconds each case took
are printed so a slow model shows.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import model_accuracy_trees

from specfrontier.analysis.summary import summarise_cells
from specfrontier.config.common import WorkloadConfig
from specfrontier.engines.sglang import SGLangSetting
from specfrontier.engines.sim import SimEngine, SimTuneConfig
from specfrontier.errors import ConfigError
from specfrontier.perfmodel import fit_model
from specfrontier.perfmodel.plan import run_cells
from specfrontier.perfmodel.types import ModelCell, SettingParams
from specfrontier.runs.virtual_sweep import VirtualSweep
from specfrontier.sim import SimProfile, load_profile
from specfrontier.store import Store

LEVELS = (1, 2, 4, 8, 16, 32, 64)
STEPS = (1, 2, 3, 4, 5, 6)
Spread = dict[tuple[str, int], tuple[float, float]]
"""(setting, C) -> (lowest, highest) aggregate tok/s over the repeats of the truth."""
SPLITS = {"fit 1-3 -> 4-6": (1, 2, 3), "fit 1,3,5 -> 2,4,6": (1, 3, 5), "fit 1-2 -> 3-6": (1, 2)}
SEED = "seed-qwen3.5-122b-a10b"
REPEATS = 3
CELL_DURATION_S = {"seed-chat": 300.0}
"""Simulated seconds each cell keeps sending (60 unless listed): natural-EOS lengths vary (lognormal) and
chat prompts differ in acceptance (dispersion 0.5), so at 60 s the chat case's "truth" was noisier than the
differences between depths (at C=1 steps 2-6 read 116, 116, 125, 116, 121 tok/s; acceptance length 1.86 at
steps 2 and 1.81 at steps 3). At 300 s the truth is steadier but still noisy at C <= 4, hence the regret
beyond the truth's own spread below. The truth is the median of 3 repeats."""


@dataclass(frozen=True, slots=True)
class Score:
    case: str
    split: str
    form: str
    mean_pct: float
    max_pct: float
    worst_regret_pct: float
    worst_regret_at: int
    regret_beyond_spread_pct: float
    """Worst over C of how far the chosen depth's best repeat falls below the true best depth's worst
    repeat (0 when their repeat ranges overlap: the truth itself cannot order the two)."""
    wrong_levels: int
    doubtful_cells: int
    """Cells of the truth the run flags (noisy repeats, no steady state): where the truth itself is unsure."""
    seconds: float


def _variant(name: str) -> tuple[SimProfile, str, float, bool]:
    """(profile, workload class, temperature, ignore_eos) of a case."""
    base = load_profile(SEED)
    data = base.model_dump()
    if name == "seed":
        return base, "synthetic", 0.0, True
    if name == "seed-chat":
        return base, "chat", 0.7, False
    if name == "dense":
        data["model"].update(experts=8, experts_per_token=8)
        data["cycle"].update(compute_knee_tokens=128)
    elif name == "late-knee":
        data["cycle"].update(compute_knee_tokens=192)
    else:
        raise ValueError(name)
    data["name"] = f"{SEED}-{name}"
    return SimProfile.model_validate(data), "synthetic", 0.0, True


def _sweep(name: str, folder: Path) -> tuple[list[ModelCell], Spread]:
    """The case's simulated sweep, read back as the model's cells, stripped to aggregate tok/s, and the
    range of each cell's aggregate over its repeats."""
    profile, workload, temperature, ignore_eos = _variant(name)
    chains = tuple(SGLangSetting(name=f"steps{s}", algorithm="EAGLE3", num_steps=s, eagle_topk=1) for s in STEPS)
    settings = (SGLangSetting(name="no-spec"), *chains)  # tune needs a baseline; the model is not shown it
    config = SimTuneConfig(
        engine=SimEngine(profile=SEED, workload_class=workload),
        settings=settings,
        concurrency=LEVELS,
        repeats=REPEATS,
        rounds_per_cell=7,
        cell_duration_s=CELL_DURATION_S.get(name, 60.0),
        workload=WorkloadConfig(max_tokens=512, temperature=temperature, ignore_eos=ignore_eos),
    )
    sweep = VirtualSweep(config)
    sweep.profile = profile  # the variant: same grid and protocol, another deployment
    sweep.attach(Store(folder / f"{name}.db"))
    run_id = sweep.new_run()
    sweep.run_sync(run_id)
    cells = run_cells(sweep.store, run_id).cells
    spread = {
        (c.setting, c.concurrency): (c.aggregate_tok_s.low or 0.0, c.aggregate_tok_s.high or 0.0)
        for c in summarise_cells(sweep.store.cells(run_id))
    }
    stripped = model_accuracy_trees.tok_s_only([c for c in cells if c.params.speculative])
    return stripped, spread


def _score(case: str, split: str, cells: Sequence[ModelCell], spread: Spread, fit_steps: Sequence[int]) -> Score:
    start = time.perf_counter()
    fitted = [c for c in cells if c.params.steps in fit_steps]
    model = fit_model(fitted)
    errors = []
    for c in cells:
        if c.params.steps in fit_steps or c.aggregate_tok_s is None:
            continue
        errors.append(
            100 * abs(model.predict(c.params, c.concurrency, stated=False).aggregate_tok_s / c.aggregate_tok_s - 1)
        )
    regrets = {}
    beyond = []
    for level in LEVELS:
        row = [c for c in cells if c.concurrency == level and c.aggregate_tok_s is not None]
        truth = max(row, key=lambda c: c.aggregate_tok_s or 0.0)
        chosen = max(row, key=lambda c: model.predict(c.params, level, stated=False).aggregate_tok_s)
        regrets[level] = 100 * (1 - (chosen.aggregate_tok_s or 0.0) / (truth.aggregate_tok_s or 1.0))
        best_low, chosen_high = spread[truth.setting, level][0], spread[chosen.setting, level][1]
        beyond.append(100 * max(0.0, best_low - chosen_high) / (truth.aggregate_tok_s or 1.0))
    worst = max(regrets, key=regrets.__getitem__)
    return Score(
        case,
        split,
        model.form,
        statistics.mean(errors),
        max(errors),
        regrets[worst],
        worst,
        max(beyond),
        sum(1 for r in regrets.values() if r > 0),
        sum(1 for c in cells if c.flags),
        time.perf_counter() - start,
    )


SEED_PUBLISHED = {  # shared/data/seed_frontier.json (per steps: C -> tok/s; capacity per steps)
    "per_request_tok_s": {1: {1: 123, 4: 119}, 2: {1: 186, 4: 162}, 3: {1: 234, 4: 200}, 4: {1: 277, 4: 236}},
    "aggregate_tok_s": {3: {16: 1733, 32: 1979, 64: 1914}, 4: {16: 1596, 32: 1773, 64: 1817}},
    "max_running_requests": {1: 26, 2: 21, 3: 17},
}


def _seed_cells() -> list[ModelCell]:
    caps = SEED_PUBLISHED["max_running_requests"]
    cells = []
    for metric in ("per_request_tok_s", "aggregate_tok_s"):
        for steps, row in SEED_PUBLISHED[metric].items():
            for c, value in row.items():
                params = SettingParams(steps=steps, family="EAGLE3")
                cell = ModelCell(f"steps{steps}", params, c, capacity=caps.get(steps), **{metric: float(value)})
                cells.append(cell)
    return cells


def _seed_table() -> str:
    """The seed's published cells: fit on steps 1-3, predict steps 4 (5 figures)."""
    cells = _seed_cells()
    model = fit_model([c for c in cells if c.params.steps <= 3])
    errors = []
    for c in cells:
        if c.params.steps != 4:
            continue
        p = model.predict(c.params, c.concurrency, stated=False)
        for measured, predicted in ((c.per_request_tok_s, p.per_request_tok_s), (c.aggregate_tok_s, p.aggregate_tok_s)):
            if measured is not None:
                errors.append(100 * abs(predicted / measured - 1))
    return (
        f"seed table (fit steps 1-3, predict steps 4: {len(errors)} figures, {model.form} form): "
        f"mean {statistics.mean(errors):.1f} %, max {max(errors):.1f} %"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="only the seed chain case; trees: one draw, 5 levels")
    parser.add_argument("--space", choices=("chains", "trees", "all"), default="all", help="which spaces to score")
    args = parser.parse_args()
    if args.space in ("trees", "all"):
        model_accuracy_trees.run(args.quick)
    if args.space == "trees":
        return
    cases = ("seed",) if args.quick else ("seed", "seed-chat", "dense", "late-knee")
    scores = []
    with tempfile.TemporaryDirectory() as folder:
        for case in cases:
            cells, spread = _sweep(case, Path(folder))
            for split, fit_steps in SPLITS.items():
                try:
                    scores.append(_score(case, split, cells, spread, fit_steps))
                except ConfigError as exc:
                    print(f"{case} {split}: no fit: {exc}")
    print(f"{'case':<10} {'split':<20} {'form':<9} {'mean %':>7} {'max %':>7} {'regret %':>9} {'at C':>5} "
          f"{'beyond spread %':>16} {'wrong C':>8} {'doubtful':>9} {'fit s':>6}")  # fmt: skip
    for s in scores:
        print(
            f"{s.case:<10} {s.split:<20} {s.form:<9} {s.mean_pct:>7.2f} {s.max_pct:>7.2f} "
            f"{s.worst_regret_pct:>9.2f} {s.worst_regret_at:>5} {s.regret_beyond_spread_pct:>16.2f} "
            f"{s.wrong_levels:>8} {s.doubtful_cells:>9} {s.seconds:>6.1f}"
        )
    print("bounds: mean <= 2 %, max <= 5 %, regret <= 1 % at every C (issue 15)")
    print("beyond spread: the chosen depth's best repeat below the true best's worst repeat (0: the truth's")
    print("own repeats cannot order the two depths)")
    print(_seed_table())


if __name__ == "__main__":
    main()
