"""Search cost: guided search vs the full grid on the simulator, where the grid is the ground truth.

Run: `.venv/bin/python benchmarks/search_cost.py [--quick]`. Target (issue 6): guided reaches the grid's
best within 2 % on the objective at no more than 35 % of the grid's cost (launches + benchmark time).

For every case (simulator profile x workload x objective):
- grid: every candidate (no speculation + EAGLE3 chains of 1-8 steps) at every level (C = 1, 4, 16, 32, 64),
  3 repeats, through `tune`'s own virtual sweep: the ground truth;
- guided: `search: {strategy: guided, target_concurrency: [C]}` through the same sweep;
- gap = (grid's best - the grid's value of guided's choice) / grid's best, on the objective's median over
  repeats (the simulator is seeded per setting, level and repeat, so both runs see identical cells); a
  gap above 2 % is marked a tie when the grid's own best and guided's choice overlap over repeats;
- cost: launches, benchmark seconds (measured windows, simulated seconds, from the store), and their sum
  with an ASSUMED cost per launch (model load and CUDA-graph capture; the simulator has no startup time):
  120 s (an 8B model on one GPU, engines.md 1.5: about 1-3 min) and 300 s (a large MoE on 4 GPUs), as a
  ratio to the grid's. The target is judged at 300 s; at 120 s the ratio is lower wherever guided saves
  more benchmark time than launches.
Everything here is a MODEL of a deployment: the table shows how the search behaves, not how a server does.

`--space 3d` (issue 28): SGLang's three knobs at once, the way `bench_speculative.py` sweeps them, on a
MoE (the seed) and a dense (`dense-8b`) profile: no speculation + EAGLE3 with steps 1-6 x topk 1, 2, 4, 8
x draft tokens 4, 8, 16, 32, 64 within SGLang's bound `num_draft_tokens - 1 <= topk + (num_steps - 1) *
topk^2` (67 settings) at C = 1, 4, 16, 32, 64 (3 repeats, 2 rounds per cell). Guided runs once with
every level as a target (and `max_depth` 6, so its candidates are the grid's settings); `--per-level`
adds one run per single target level. Target: within 1 % of the grid's best at every target level, at
most 25 % of the grid's launches, in every case.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from specfrontier.analysis.summary import OverRepeats
from specfrontier.config import WorkloadConfig
from specfrontier.config.search import SearchConfig
from specfrontier.engines.sglang import SGLangSetting
from specfrontier.engines.sim import SimEngine, SimTuneConfig
from specfrontier.runs.virtual_sweep import VirtualSweep
from specfrontier.search.observe import Observations, observe
from specfrontier.sim.profile import SimProfile, parse_profile
from specfrontier.store import Store
from specfrontier.theory.tree_bound import max_verified_tokens

LEVELS = (1, 4, 16, 32, 64)
STEPS = tuple(range(1, 9))
LAUNCH_S = (120.0, 300.0)
SEED = "seed-qwen3.5-122b-a10b"
VARIANTS = Path(__file__).parent / "profiles" / "search_variants.json"


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in over.items():
        out[key] = _merge(base[key], value) if isinstance(value, dict) and isinstance(base.get(key), dict) else value
    return out


def profiles() -> dict[str, SimProfile]:
    seed_text = resources.files("specfrontier.sim").joinpath("profiles", f"{SEED}.json").read_text("utf-8")
    seed = json.loads(seed_text)
    out = {SEED: parse_profile(seed_text, source=SEED)}
    for name, over in json.loads(VARIANTS.read_text("utf-8")).items():
        if not name.startswith("_"):
            out[name] = parse_profile(json.dumps(_merge(seed, over)), source=f"{VARIANTS.name}:{name}")
    return out


@dataclass(frozen=True, slots=True)
class Case:
    profile: str
    workload: str  # simulator workload class
    temperature: float
    ignore_eos: bool
    objective: str
    concurrency: int


def _config(case: Case, search: SearchConfig) -> SimTuneConfig:
    settings = [SGLangSetting(name="no-spec")]
    settings += [SGLangSetting(name=f"steps{s}", algorithm="EAGLE3", num_steps=s, eagle_topk=1) for s in STEPS]
    return SimTuneConfig(
        engine=SimEngine(workload_class=case.workload),
        settings=tuple(settings),
        concurrency=LEVELS,
        repeats=3,
        rounds_per_cell=4,
        workload=WorkloadConfig(max_tokens=512, temperature=case.temperature, ignore_eos=case.ignore_eos),
        search=search,
    )


def overlap(a: OverRepeats | None, b: OverRepeats | None) -> bool:
    """True when two cells' repeat ranges overlap: the grid cannot tell them apart."""
    if a is None or b is None or None in (a.low, a.high, b.low, b.high):
        return False
    return (a.low or 0.0) <= (b.high or 0.0) and (b.low or 0.0) <= (a.high or 0.0)


def _run(store: Store, profile: SimProfile, config: SimTuneConfig) -> tuple[str, VirtualSweep]:
    sweep = VirtualSweep(config)
    sweep.profile = profile
    sweep.attach(store)
    run_id = sweep.new_run()
    sweep.run_sync(run_id)
    return run_id, sweep


SPACE_STEPS = tuple(range(1, 7))
SPACE_TOPK = (1, 2, 4, 8)
SPACE_DRAFT = (4, 8, 16, 32, 64)
SPACE_PROFILES = (SEED, "dense-8b")


def space_settings() -> list[SGLangSetting]:
    """The 3-D space: a chain per depth, and per (steps, topk > 1) every listed draft-token budget within
    SGLang's bound (`theory.tree_bound`, the rule the validator applies)."""
    out = [SGLangSetting(name="no-spec")]
    for k in SPACE_TOPK:
        for s in SPACE_STEPS:
            if k == 1:
                out.append(SGLangSetting(name=f"s{s}k1", algorithm="EAGLE3", num_steps=s, eagle_topk=1))
                continue
            out += [
                SGLangSetting(name=f"s{s}k{k}d{d}", algorithm="EAGLE3", num_steps=s, eagle_topk=k, num_draft_tokens=d)
                for d in SPACE_DRAFT
                if d <= max_verified_tokens(s, k)
            ]
    return out


def _space_config(search: SearchConfig) -> SimTuneConfig:
    return SimTuneConfig(
        engine=SimEngine(workload_class="synthetic"),
        settings=tuple(space_settings()),
        concurrency=LEVELS,
        repeats=3,
        rounds_per_cell=2,
        workload=WorkloadConfig(max_tokens=256, temperature=0.0, ignore_eos=True),
        search=search,
    )


def regret(truth: Observations, got: Observations, level: int, objective: str) -> tuple[str, str, float]:
    """(the grid's best, the search's pick, gap): the pick is the search's best measured setting at `level`,
    the gap (best - the grid's value of the pick) / best, on the objective's median over repeats."""
    values, measured = best_medians(truth, level, objective), best_medians(got, level, objective)
    best = max(values, key=lambda n: values[n])
    pick = max(measured, key=lambda n: measured[n])
    return best, pick, (values[best] - values[pick]) / values[best]


def best_medians(obs: Observations, level: int, objective: str) -> dict[str, float]:
    """Each measured setting's median over repeats of `objective` at `level`."""
    return {
        n: f.median for n in obs.status if (f := obs.figure(n, level, objective)) is not None and f.median is not None
    }


def space_main(quick: bool, per_level: bool) -> int:
    """The 3-D cases (see the module docstring): one row per (profile, guided run, target level)."""
    shown = profiles()
    names = SPACE_PROFILES[:1] if quick else SPACE_PROFILES
    started = time.monotonic()
    rows: list[str] = []
    worst_gap, worst_ratio = 0.0, 0.0
    objective = "aggregate_tok_s"
    with tempfile.TemporaryDirectory() as tmp:
        store = Store(Path(tmp) / "search_space.db")
        for pname in names:
            grid_id, _ = _run(store, shown[pname], _space_config(SearchConfig()))
            truth = observe(store, grid_id)
            runs: list[tuple[str, tuple[int, ...]]] = [("all levels", LEVELS)]
            runs += [(f"C={c} only", (c,)) for c in LEVELS] if per_level else []
            for label, targets in runs:
                search = SearchConfig(strategy="guided", target_concurrency=targets, max_depth=max(SPACE_STEPS))
                run_id, sweep = _run(store, shown[pname], _space_config(search))
                got = observe(store, run_id)
                ratio = got.launches / truth.launches
                worst_ratio = max(worst_ratio, ratio)
                explored = sweep.planner.explored if sweep.planner is not None else ""
                for level in targets:
                    best, pick, gap = regret(truth, got, level, objective)
                    values = best_medians(truth, level, objective)
                    worst_gap = max(worst_gap, gap)
                    rows.append(
                        f"| {pname} | {label} | C={level} | {best} ({values[best]:.0f}) | {pick} | {gap:.1%} | "
                        f"{got.launches}/{truth.launches} ({ratio:.0%}) |"
                    )
                    print(rows[-1], flush=True)
                print(f"  {pname} {label}: explored {explored}", flush=True)
    print("\n| profile | guided run | level | grid best (agg tok/s) | guided pick | gap | launches |")
    print("|---|---|---|---|---|---|---|")
    print("\n".join(rows))
    print(
        f"\nworst gap {worst_gap:.1%} (target <= 1%), worst launches {worst_ratio:.0%} of the grid's (target <= 25%); "
        f"{time.monotonic() - started:.0f} s"
    )
    return 0 if worst_gap <= 0.01 and worst_ratio <= 0.25 else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one profile and one workload only")
    parser.add_argument("--space", choices=("depth", "3d"), default="depth", help="3d: steps x topk x draft tokens")
    parser.add_argument("--per-level", action="store_true", help="3d: also one guided run per target level")
    args = parser.parse_args()
    if args.space == "3d":
        return space_main(args.quick, args.per_level)
    shown = profiles()
    workloads = [("synthetic", 0.0, True), ("chat", 0.7, False)]
    if args.quick:
        shown = {SEED: shown[SEED]}
        workloads = workloads[:1]
    objectives = [
        ("aggregate_tok_s", 1),
        ("per_request_tok_s_p50", 4),
        ("aggregate_tok_s", 16),
        ("aggregate_tok_s", 64),
    ]
    rows: list[str] = []
    worst_gap, worst_ratio, ties = 0.0, 0.0, 0
    with tempfile.TemporaryDirectory() as tmp:
        store = Store(Path(tmp) / "search_cost.db")
        for pname, profile in shown.items():
            for wname, temperature, ignore_eos in workloads:
                base = Case(pname, wname, temperature, ignore_eos, "aggregate_tok_s", 1)
                grid_id, _ = _run(store, profile, _config(base, SearchConfig()))
                truth = observe(store, grid_id)
                grid_launches, grid_s = truth.launches, truth.engine_s
                for objective, level in objectives:
                    case = Case(pname, wname, temperature, ignore_eos, objective, level)
                    search = SearchConfig(strategy="guided", target_concurrency=(level,), objective=objective)  # type: ignore[arg-type]
                    run_id, _ = _run(store, profile, _config(case, search))
                    got = observe(store, run_id)
                    best, pick, gap = regret(truth, got, level, objective)
                    tie = ""
                    grid_best, grid_pick = truth.figure(best, level, objective), truth.figure(pick, level, objective)
                    if gap > 0.02 and overlap(grid_best, grid_pick):
                        tie = " (tie: repeat ranges overlap)"
                        ties += 1
                    costs = [(got.launches * x + got.engine_s) / (grid_launches * x + grid_s) for x in LAUNCH_S]
                    worst_gap, worst_ratio = max(worst_gap, gap), max(worst_ratio, costs[-1])
                    rows.append(
                        f"| {pname} | {wname} t={temperature:g} | {objective} C={level} | {best} | {pick} | "
                        f"{gap:.1%}{tie} | {got.launches}/{grid_launches} | {got.engine_s:.0f}/{grid_s:.0f} s | "
                        + " | ".join(f"{c:.0%}" for c in costs)
                        + " |"
                    )
                    print(rows[-1], flush=True)
    print()
    cost_heads = " | ".join(f"cost @{x:.0f} s/launch" for x in LAUNCH_S)
    print(f"| profile | workload | objective | grid best | guided pick | gap | launches | bench time | {cost_heads} |")
    print("|---|---|---|---|---|---|---|---|" + "---|" * len(LAUNCH_S))
    print("\n".join(rows))
    print(f"\nworst gap {worst_gap:.1%} (target <= 2%), worst cost {worst_ratio:.0%} at {LAUNCH_S[-1]:.0f} s per "
          "launch (target <= 35%); cost = (launches x launch s + bench s) / the grid's")  # fmt: skip
    if ties:
        print(f"{ties} case(s) above 2% are ties in the grid itself: its best and guided's pick overlap over repeats")
    return 0 if worst_gap <= 0.02 and worst_ratio <= 0.35 else 1


if __name__ == "__main__":
    sys.exit(main())
