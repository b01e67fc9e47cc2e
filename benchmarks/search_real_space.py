"""Search on a space measured for real: guided, adaptive and grid replayed on a stored grid run (issue 38).

Run: `.venv/bin/python benchmarks/search_real_space.py [--fixture STORE] [--run RUN_ID] [--per-level]`
(default fixture: benchmarks/spaces/llamacpp-ngram/store.db, llama.cpp's sized n-gram drafters on the real
SmolLM2-135M, 19 settings x C = 1, 2, 4 x 3 repeats; its README says when, how and on what machine).

The fixture is a grid run of a real engine: every setting at every level, with its repeats. A search is
replayed on it through the planner the real sweeps use (`schedules.verify.planner_for` and
`SearchPlanner.next_setting`): where a sweep would launch the setting the search proposes, the replay
copies that setting's stored cells (every repeat, at the levels the proposal asks for) into a run of a
scratch store. So the search reads exactly the cells it would have measured, and nothing else; a setting
the fixture does not hold (a ladder extension past the measured depths) is recorded as failed to run and
counted (`outside`), never invented. By default `max_depth` is the deepest listed depth, so the
candidates are the fixture's settings, as `search_cost.py --space 3d` does on the simulator.

Per strategy and target level it prints the launches used (settings measured, of the grid's), the
fixture's best at that level (aggregate tok/s, median over repeats), the search's pick (its best measured
setting there) and the regret: (best - the pick's value) / best. `tie` marks a regret inside the fixture's
own spread: the best's and the pick's repeat ranges overlap, so the grid could not tell them apart
either. The evidence rule's verdict of each level's best and pick (noisy, no steady state, client
saturated) is printed with them. Target (issue 38): guided within 1 % of the best at every level.
Only public APIs of the store, the config and the planner are used, so it runs on any search strategy.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from search_cost import best_medians, overlap, regret

from specfrontier.analysis import load_run
from specfrontier.config import TuneConfig
from specfrontier.config.load import parse_config
from specfrontier.config.search import SearchConfig
from specfrontier.engines.base import EngineSetting
from specfrontier.runs.sweep import register_settings
from specfrontier.schedules.verify import planner_for
from specfrontier.search.ladder import ladder_depth
from specfrontier.search.observe import Observations, observe
from specfrontier.search.planner import SearchPlanner
from specfrontier.store import Store

FIXTURE = Path(__file__).parent / "spaces" / "llamacpp-ngram" / "store.db"
OBJECTIVE = "aggregate_tok_s"
TARGET_REGRET = 0.01
OUTSIDE = "not in the fixture: the replay can only read settings the grid run measured"


@dataclass(frozen=True, slots=True)
class Replay:
    """One search replayed on the fixture: its scratch run, its planner (trace, stop reason) and what it
    asked for that the fixture does not hold."""

    run_id: str
    planner: SearchPlanner
    outside: tuple[str, ...]


class FixtureSweep:
    """Answers a search's proposals from a stored grid run instead of launching a server."""

    def __init__(self, fixture: Store, fixture_run: str) -> None:
        self.fixture, self.fixture_run = fixture, fixture_run
        self.settings = {s.name: s for s in fixture.settings(fixture_run)}
        self.config: TuneConfig = parse_config(dict(fixture.run(fixture_run).config), source="fixture", stored=True)

    def deepest(self) -> int | None:
        """The deepest listed ladder depth (n-gram draft length, chain steps, ...): a search's `max_depth`
        that keeps its candidates inside the fixture."""
        depths = [d for s in self.config.settings if (d := ladder_depth(s)) is not None]
        return max(depths) if depths else None

    def replay(self, store: Store, search: SearchConfig) -> Replay:
        """Run `search` against the fixture, writing into `store`; returns when the search stops."""
        config = self.config.model_copy(update={"search": search})
        run_id = store.create_run(
            engine=self.fixture.run(self.fixture_run).engine,
            config=config.model_dump(mode="json"),
            environment={"replay_of": self.fixture_run, "replay_note": "cells copied from the fixture, not measured"},
        )
        if search.strategy == "grid":  # the other strategies register what they choose
            register_settings(store, run_id, config.settings)
        planner = planner_for(config, store, run_id)
        outside: list[str] = []
        while (setting := planner.next_setting()) is not None:
            if not self._copy(store, run_id, setting, planner.levels.get(setting.name)):
                outside.append(setting.name)
        store.set_run_status(run_id, "done")
        return Replay(run_id, planner, tuple(outside))

    def _copy(self, store: Store, run_id: str, setting: EngineSetting, levels: Sequence[int] | None) -> bool:
        """The setting's stored cells at `levels` (None: all) into the replay run; False (and the setting
        recorded as failed) when the fixture does not hold this setting with these parameters."""
        stored = self.settings.get(setting.name)
        if stored is None or stored.params != setting.parameters():
            store.update_setting(run_id, setting.name, status="failed", error=OUTSIDE)
            return False
        store.update_setting(
            run_id,
            setting.name,
            status="running",
            command=stored.command or (),
            capacity=stored.capacity,
            capacity_source=stored.capacity_source,
            startup_s=stored.startup_s,
        )
        for row in self.fixture.cells(self.fixture_run, setting.name):
            if levels is not None and row.concurrency not in levels:
                continue
            store.record_cell(
                run_id,
                setting_id=setting.name,
                workload=row.workload,
                concurrency=row.concurrency,
                repeat=row.repeat,
                requests=row.requests,
                counters=row.counters,
                acceptance_source=row.acceptance_source,
                request_rate=row.request_rate,
                load=row.load,
                client_health=row.client_health,
                digest=row.digest,
            )
        store.update_setting(run_id, setting.name, status="done")
        return True


def _flags(fixture: Store, run_id: str) -> dict[tuple[str, int], str]:
    """(setting, C) -> what the evidence rule and the noise flags say of the fixture's cell ('' = clean)."""
    data = load_run(fixture, run_id)
    out: dict[tuple[str, int], str] = {}
    for cell in data.cells:
        why = list(data.verdict(cell))
        why += ["noisy"] if cell.noisy else []
        why += ["client saturated"] if cell.client_saturated else []
        out[(cell.setting, int(cell.level))] = ", ".join(why)
    return out


def _level_rows(
    label: str, truth: Observations, got: Observations, levels: Sequence[int], flags: dict[tuple[str, int], str]
) -> tuple[list[str], float]:
    rows, worst = [], 0.0
    for level in levels:
        best, pick, gap = regret(truth, got, level, OBJECTIVE)
        values = best_medians(truth, level, OBJECTIVE)
        worst = max(worst, gap)
        tie = (
            " (tie: repeat ranges overlap)"
            if gap > 0 and overlap(truth.figure(best, level, OBJECTIVE), truth.figure(pick, level, OBJECTIVE))
            else ""
        )
        shown = {n: flags.get((n, level)) or "evidence" for n in (best, pick)}
        rows.append(
            f"| {label} | C={level} | {best} ({values[best]:.2f}; {shown[best]}) | {pick} ({values[pick]:.2f}; "
            f"{shown[pick]}) | {gap:.1%}{tie} | {got.launches}/{truth.launches} |"
        )
    return rows, worst


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fixture", type=Path, default=FIXTURE, help="a store holding a grid run")
    parser.add_argument("--run", help="the grid run's id (default: the store's only run)")
    parser.add_argument("--per-level", action="store_true", help="also one guided run per single target level")
    parser.add_argument("--max-depth", type=int, help="search.max_depth (default: the deepest listed depth)")
    args = parser.parse_args()
    started = time.monotonic()
    fixture = Store(args.fixture, read_only=True)
    run_ids = [r.run_id for r in fixture.runs()]
    if args.run is None and len(run_ids) != 1:
        parser.error(f"--run: the store holds {len(run_ids)} runs ({', '.join(run_ids)}); name one")
    run_id = args.run or run_ids[0]
    sweep = FixtureSweep(fixture, run_id)
    truth, flags = observe(fixture, run_id), _flags(fixture, run_id)
    levels = tuple(sweep.config.concurrency)
    depth = args.max_depth or sweep.deepest()
    searches: list[tuple[str, SearchConfig]] = [
        ("grid", SearchConfig()),
        ("adaptive", SearchConfig(strategy="adaptive", max_depth=depth)),
        ("guided (all levels)", SearchConfig(strategy="guided", max_depth=depth)),
    ]
    if args.per_level:
        searches += [
            (f"guided (C={c} only)", SearchConfig(strategy="guided", target_concurrency=(c,), max_depth=depth))
            for c in levels
        ]
    print(f"fixture {args.fixture} run {run_id}: {len(truth.status)} settings x C = {levels}; max_depth {depth}")
    rows: list[str] = []
    worst_guided = 0.0
    with tempfile.TemporaryDirectory() as tmp:
        store = Store(Path(tmp) / "replay.db")
        for label, search in searches:
            replay = sweep.replay(store, search)
            got = observe(store, replay.run_id)
            targets = tuple(search.target_concurrency or levels)
            level_rows, worst = _level_rows(label, truth, got, targets, flags)
            if label.startswith("guided"):
                worst_guided = max(worst_guided, worst)
            rows += level_rows
            print("\n".join(level_rows), flush=True)
            print(f"  {label}: measured {', '.join(n for n in got.status if got.measured(n))}")
            print(f"  {label}: stopped: {replay.planner.stop_reason}")
            if replay.outside:
                print(f"  {label}: asked for {len(replay.outside)} setting(s) {OUTSIDE}: {', '.join(replay.outside)}")
    print("\n| search | level | fixture best (agg tok/s; verdict) | search's pick | regret | launches |")
    print("|---|---|---|---|---|---|")
    print("\n".join(rows))
    met = worst_guided <= TARGET_REGRET
    print(
        f"\nguided: worst regret {worst_guided:.1%} (target <= {TARGET_REGRET:.0%} at every level: "
        f"{'met' if met else 'NOT met'}); {time.monotonic() - started:.0f} s"
    )
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
