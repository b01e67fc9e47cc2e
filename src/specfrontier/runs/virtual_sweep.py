"""`tune --engine sim`: the same grid as a real sweep, answered by the simulator in virtual time.

Results are MODEL PREDICTIONS, not measurements: the run's environment says `simulated: true`, every
setting's capacity and acceptance say they come from the simulator, and reports print that plainly.
They land in the same store, so `report`, `runs --json` and the analysis treat them like any run.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import Executor

import specfrontier
from specfrontier.config.common import TuneBase
from specfrontier.engines.sglang import SGLangSetting, setting_args
from specfrontier.engines.sim import SimEngine, SimTuneConfig
from specfrontier.errors import ConfigError
from specfrontier.runs.cell import CellDone
from specfrontier.runs.sweep import Runner, RunOutcome, Sweep, SweepEvents, register_settings, settings_source
from specfrontier.schedules.verify import planner_for
from specfrontier.search.planner import SearchPlanner
from specfrontier.sim.cells import CellTask, cell_workers, simulated_cell
from specfrontier.sim.costs import capacity
from specfrontier.sim.profile import SimProfile, load_profile
from specfrontier.sim.protocol import CellProtocol, sim_setting
from specfrontier.sim.setting import ResolvedSetting, resolve_setting
from specfrontier.store import Store

SIM_SOURCE = "simulator per-request draft/accept/verify counts (model prediction, not a measurement)"


def sglang_command(setting: SGLangSetting, *, model_path: str = "<model-path>") -> list[str]:
    """The SGLang launch command that serves `setting` (what to run on the real deployment)."""
    return ["python", "-m", "sglang.launch_server", "--model-path", model_path, *setting_args(setting)]


class VirtualSweep:
    """Fills a run with simulated cells; deterministic for a given engine seed. All refusals (unknown
    profile or workload class, a setting SGLang would reject) happen in the constructor."""

    def __init__(self, config: SimTuneConfig, *, on_cell_done: Callable[[CellDone], None] | None = None) -> None:
        self.config = config
        self.events = SweepEvents(on_cell_done=on_cell_done)
        self._store: Store | None = None
        self._pool: Executor | None = None
        self.planner: SearchPlanner | None = None
        if not isinstance(self.config.engine, SimEngine):
            raise ConfigError("engine.name: the virtual sweep needs engine.name = sim; fix: set engine.name: sim")
        self.engine: SimEngine = self.config.engine
        if self.config.workloads:
            raise ConfigError(
                "workloads: the virtual simulator models one workload class (engine.workload_class); "
                "fix: use engine.face: http to send real prompt sets, or drop workloads"
            )
        if self.config.load.mode != "closed":
            raise ConfigError(
                "load.mode = 'open': the virtual simulator models closed-loop cells only; "
                "fix: use engine.face: http for open-loop load, or load.mode: closed"
            )
        self.profile: SimProfile = load_profile(self.engine.profile)
        self.resolved: dict[str, ResolvedSetting] = {}
        for s in self.config.settings:  # every refusal happens here, before the run exists
            try:
                self.resolved[s.name] = resolve_setting(
                    sim_setting(s), spec_default_cap=self.profile.capacity.spec_default_cap
                )
            except ConfigError as exc:
                raise ConfigError(f"settings[{s.name}]: {exc}") from exc
        self.profile.workload(self.engine.workload_class, where="engine.workload_class")

    @property
    def store(self) -> Store:
        if self._store is None:
            raise RuntimeError("VirtualSweep.store used before attach()")
        return self._store

    def prepare(self) -> None:
        """Nothing left to check: the constructor refused what the simulator cannot run."""

    def attach(self, store: Store) -> None:
        """Write into `store` (opened only after the constructor's checks passed)."""
        self._store = store

    def new_run(self) -> str:
        run_id = self.store.create_run(
            engine="sim",
            config=self.config.model_dump(mode="json"),
            environment={
                "specfrontier": specfrontier.__version__,
                "engine_version": f"simulator profile {self.profile.name}",
                "simulated": True,
                "time": "virtual (simulated seconds)",
                "profile": self.profile.name,
                "profile_description": self.profile.description,
            }
            | settings_source(self.config),
        )
        if self.config.search.strategy == "grid":  # other strategies register what they choose
            register_settings(self.store, run_id, self.config.settings)
        return run_id

    async def run(self, run_id: str) -> RunOutcome:
        """Simulate every missing cell of the settings the search chooses (grid: all listed ones).
        `self.planner` keeps the search's trace and the reason it stopped. Synchronous inside (virtual
        time needs no event loop); async to share the runner interface with the server sweep."""
        self.run_sync(run_id)
        cells = len(self.store.done_cells(run_id))
        return RunOutcome("done", cells, 0)

    def run_sync(self, run_id: str) -> None:
        """`run` without an event loop (benchmarks and tests that drive the simulator directly)."""
        self.planner = planner_for(self.config, self.store, run_id)
        with cell_workers() as pool:
            self._pool = pool
            try:
                while (setting := self.planner.next_setting()) is not None:
                    assert isinstance(setting, SGLangSetting)
                    self.run_setting(run_id, setting, levels=self.planner.levels.get(setting.name))
            finally:
                self._pool = None
        self.store.set_run_status(run_id, "done")

    def run_setting(self, run_id: str, s: SGLangSetting, levels: Sequence[int] | None = None) -> None:
        """Every missing cell of one setting, only at `levels` when given (the search's subset); the
        setting is resolved and refused here if SGLang would reject it. The cells are simulated side by
        side where there are cores to spare (`cell_workers`), and stored in their listed order."""
        cfg, w = self.config, self.config.workload
        protocol = CellProtocol.of(cfg)
        resolved = self._resolve(s)
        done = self.store.done_cells(run_id)
        label = f"sim:{self.engine.workload_class}|t={w.temperature}|max={w.max_tokens}|in={self.engine.input_tokens}"
        self.store.update_setting(
            run_id,
            s.name,
            status="running",
            command=sglang_command(s),
            capacity=capacity(self.profile, resolved),
            capacity_source="simulator capacity law of the profile (model)",
        )
        todo = [
            CellTask(self.profile, s.name, sim_setting(s), c, repeat, protocol)
            for repeat in range(cfg.repeats)
            for c in cfg.concurrency
            if (s.name, label, c, repeat) not in done and (levels is None or c in levels)
        ]
        cells = self._pool.map(simulated_cell, todo) if self._pool is not None else map(simulated_cell, todo)
        for cell in cells:
            self.store.record_cell(
                run_id,
                setting_id=s.name,
                workload=label,
                concurrency=cell.concurrency,
                repeat=cell.repeat,
                requests=cell.encoded,
                counters=cell.counters,
                acceptance_source=SIM_SOURCE if cell.counters else None,
                digest=cell.digest,
            )
            if self.events.on_cell_done:
                self.events.on_cell_done(
                    CellDone(s.name, cell.concurrency, cell.repeat, cell.digest.metrics, cell.counters)
                )
        self.store.update_setting(run_id, s.name, status="done")

    def _resolve(self, s: SGLangSetting) -> ResolvedSetting:
        if s.name not in self.resolved:  # a setting the search added (a deeper chain)
            try:
                self.resolved[s.name] = resolve_setting(
                    sim_setting(s), spec_default_cap=self.profile.capacity.spec_default_cap
                )
            except ConfigError as exc:
                raise ConfigError(f"settings[{s.name}]: {exc}") from exc
        return self.resolved[s.name]


def runner(config: TuneBase) -> Runner:
    """The simulator engine's runner (`EngineSpec.runner`): the virtual face in-process in virtual time;
    the http face is a server like any other, swept by the server sweep."""
    assert isinstance(config, SimTuneConfig)
    return VirtualSweep(config) if config.engine.face == "virtual" else Sweep(config)


__all__ = ["SIM_SOURCE", "VirtualSweep", "runner", "sglang_command"]
