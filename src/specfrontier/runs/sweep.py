"""The grid sweep: one server launch per setting, every cell of that setting on the warm server.

    for setting:  launch -> ready (startup time) -> capacity read-back -> first request (cold start)
                  -> warmup (unmeasured)
        for repeat:  for workload:  for concurrency (or rate, open loop):  counters -> window -> counters -> store
    stop the server (process group), always

Every window sends whole passes over the prompt set (request i uses prompt i mod n), so each cell sees
each prompt equally often and cells at different concurrency levels measure the same mix. A config with
`workloads:` measures each workload in its own cells (key `<source>@<sampling>`, `workloads.resolve`);
one with the single `workload:` keeps its historical label (`workload_label`).

Repeats are the outer loop so that slow drift (thermal, page cache) spreads over all concurrency
levels instead of biasing one. With drift control (`drift_control`, `runs.pacing`) they are the outer
loop over the settings too: round r launches every setting in turn for its repeat-r cells, so a change
in the machine's speed reaches every setting alike (`analysis.drift`), and with `min_repeats` a round
measures only the levels the sequential rule has not settled (`analysis.sequential`).

In open-loop mode (`load.mode: open`) a cell is one request rate: the
same seeded arrival schedule for every setting and repeat, warmup/cooldown requests sent but not
stored (see `load.open_loop`). A setting whose server fails is recorded as failed with its log tail
and the sweep goes on. Every finished cell is committed before the next starts, so a crash loses at
most the cell in flight, and `resume` re-runs only what is missing.

What counts as a failed setting: the server exits or never becomes ready, another program answers on
its port (one relaunch on a new port first), it stops answering (`max_consecutive_timeouts` requests
in a row time out), or every request of a window fails (such a window is no measurement and is not
stored). A window in which a request lost its connection waits (up to `cell.EXIT_WAIT_S`) for the
server to be reaped and then asks its health URL: a crash inside a cell closes its sockets before its
exit can be seen, and such a window is not stored either. The run then ends `incomplete` (some
cells missing, resumable; exit 3) or `failed` (no cell at all; exit 1) instead of `done`, and
`--resume` relaunches each failed setting for exactly its missing cells (`RunOutcome`).
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import os
import platform
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Protocol

import aiohttp

import specfrontier
from specfrontier.commands import report_command, resume_command
from specfrontier.config import TuneConfig
from specfrontier.config.load import parse_config
from specfrontier.engines import Capacity, EngineAdapter, EngineSetting
from specfrontier.engines.registry import spec_of
from specfrontier.errors import (
    ConfigError,
    EngineError,
    EngineStalled,
    EngineStartError,
    PortTakenError,
    SpecFrontierError,
    StoreError,
    StoreRefused,
)
from specfrontier.load import StreamingClient, run_closed_loop
from specfrontier.process.launch import ServerProcess, describe_exit, free_port, tail_of
from specfrontier.records import Prompt, Sampling, SpecCounters
from specfrontier.runs.cell import (
    CellDone,
    CellLoad,
    measure_cell,
    require_evidence,
    to_server_time,
)
from specfrontier.runs.pacing import CellSizer, check_min_repeats, drift_mode, open_levels_after, provisional_answer
from specfrontier.runs.resume_config import config_changes, record_changes
from specfrontier.runs.running import watch_running
from specfrontier.schedules.verify import planner_for
from specfrontier.search.planner import SearchPlanner
from specfrontier.store import (
    DRIFT_REFERENCE_KEY,
    ENGINE_WARNINGS_KEY,
    LAUNCH_ENVIRONMENT_KEY,
    REFERENCE_REPEAT,
    Store,
)
from specfrontier.textfiles import file_name_for
from specfrontier.workloads import load_prompts
from specfrontier.workloads.resolve import ResolvedWorkload, resolve_workload

PORT_ATTEMPTS = 2
"""Launches of one setting when another program takes its port first (a race, not the setting's fault)."""


@dataclass(frozen=True, slots=True)
class RunOutcome:
    """How a sweep ended: `done` (every planned cell stored), `incomplete` (some stored, some missing
    because a setting failed: resumable) or `failed` (not one cell stored: no evidence). `judged` adds
    the evidence rule's verdict on the stored cells: `done` with none of them evidence exits 1."""

    status: str
    cells: int
    """Cells of the run stored so far (each one a measurement: windows where every request failed are not)."""
    missing: int
    """Cells the sweep planned in this invocation and could not store."""
    failed_settings: tuple[tuple[str, str], ...] = ()
    """(setting, first line of its error) for every setting that failed in this invocation."""
    not_evidence: tuple[str, ...] = ()
    """Stored cells the evidence rule leaves out, each as '<setting> <level>: <reasons>' (`judged`)."""
    evidence: int | None = None
    """Stored cells that are evidence (None: not judged yet)."""

    @property
    def no_evidence(self) -> bool:
        """Every planned cell is stored, yet not one is evidence (e.g. every cell had half its requests
        fail): the run produced nothing to decide on, whatever it stored."""
        return self.status == "done" and self.evidence == 0 and self.cells > 0

    @property
    def exit_code(self) -> int:
        """0: complete evidence; 3: partial evidence (resume to complete it); 1: no evidence at all (nothing
        stored, or every stored cell left out by the evidence rule)."""
        if self.no_evidence:
            return 1
        return {"done": 0, "incomplete": 3}.get(self.status, 1)

    def judged(self, evidence: int, not_evidence: Sequence[str]) -> RunOutcome:
        """This outcome with the report's evidence rule applied to the run's stored cells (docs/reliability.md:
        `RunData.verdict`): how many are evidence, and why each other one is not."""
        return replace(self, evidence=evidence, not_evidence=tuple(not_evidence))

    def summary(self, run_id: str, store: Path) -> str | None:
        """One line for a run that is not complete (None when it is), naming what failed and the fix."""
        if self.no_evidence:
            return (
                f"NO EVIDENCE: all {self.cells} stored cell(s) are left out by the evidence rule "
                f"({self._not_evidence_text()}); no setting is recommended; fix: remove the cause (see the flags "
                f"of {report_command(run_id, store)}), then run again"
            )
        if self.status == "done":
            return None
        failed = "; ".join(f"{name}: {error}" for name, error in self.failed_settings[:3]) or "see the report"
        more = f" (and {len(self.failed_settings) - 3} more)" if len(self.failed_settings) > 3 else ""
        resume = resume_command(run_id, store)
        if self.status == "incomplete":
            return (
                f"INCOMPLETE: {self.missing} planned cell(s) missing, {self.cells} stored; failed: {failed}{more}; "
                f"recommendations use complete evidence only; fix: remove the cause, then {resume}"
            )
        return f"FAILED: no cell could be measured; failed: {failed}{more}; fix: remove the cause, then {resume}"

    def _not_evidence_text(self) -> str:
        more = f"; and {len(self.not_evidence) - 2} more" if len(self.not_evidence) > 2 else ""
        return "; ".join(self.not_evidence[:2]) + more


@dataclass(slots=True)
class SweepEvents:
    """Callbacks for progress display; all optional. The sweep never depends on them."""

    on_setting_start: Callable[[EngineSetting, list[str]], None] | None = None
    on_setting_ready: Callable[[EngineSetting, float, Capacity], None] | None = None
    on_setting_failed: Callable[[EngineSetting, str], None] | None = None
    on_cell_done: Callable[[CellDone], None] | None = None
    on_setting_placed: Callable[[EngineSetting, str], None] | None = None
    """A setting was placed on a node of a cluster (the Ray executor): where, in words."""
    on_setting_relaunch: Callable[[EngineSetting, str], None] | None = None
    """A setting's server is launched again (its port was taken by another program): why, in words."""
    on_provisional: Callable[[list[str]], None] | None = None
    """Interleaved runs, after each round from the second on: the recommendation the cells give so far."""
    on_cells_dropped: Callable[[int], None] | None = None
    """The sequential rule settled levels early: this many planned cells will not be measured."""
    on_reference_start: Callable[[EngineSetting, int], None] | None = None
    """The end-of-run drift reference (`drift_control: reference`) starts: the setting launched once more,
    and the cells it adds to the plan."""


def workload_label(config: TuneConfig) -> str:
    w = config.workload
    return f"{w.prompts}|t={w.temperature}|max={w.max_tokens}|eos={'ignore' if w.ignore_eos else 'natural'}"


def environment(adapter: EngineAdapter[Any]) -> dict[str, Any]:
    """Facts about where the run happened (no host names, users or secrets)."""
    cpu = ""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            cpu = next((ln.split(":", 1)[1].strip() for ln in fh if ln.startswith("model name")), "")
    except OSError:
        pass
    return {
        "specfrontier": specfrontier.__version__,
        "engine_version": adapter.version(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpu": cpu,
        "cpu_count": os.cpu_count(),
        "simulated": adapter.simulated,
        "time_scale": adapter.time_scale,
        "client_keep_alive": adapter.keep_alive,
    }


SETTINGS_SOURCE_KEY = "settings_source"
"""A run environment's line on where its settings came from when the config did not list them all (a
`space:`, or none given: the engine's built-in ones), printed by `tune` and the report."""


def settings_source(config: TuneConfig) -> dict[str, str]:
    """The run environment's `settings_source` entry of a config, or nothing when it listed its settings."""
    summary = config.settings_summary
    return {SETTINGS_SOURCE_KEY: summary} if summary else {}


class Sweep:
    """Runs (or resumes) one run of a config against a store."""

    def __init__(self, config: TuneConfig, *, events: SweepEvents | None = None) -> None:
        self.config = config
        self._store: Store | None = None
        self.events = events or SweepEvents()
        self.adapter: EngineAdapter[Any] = spec_of(config).adapter(config.engine)
        self.workload = workload_label(config)
        w = config.workload
        self.sampling = Sampling(temperature=w.temperature, top_p=w.top_p, ignore_eos=w.ignore_eos, seed=w.seed)
        self.prompts: list[Prompt] = []
        self.planner: SearchPlanner | None = None
        self.workloads: list[ResolvedWorkload] = []
        """Every workload the cells measure, in config order (filled by `prepare`)."""
        self.drift_mode = drift_mode(config, self.adapter)
        """'interleave': settings measured repeat by repeat (`runs.pacing`); 'off': one launch per setting."""
        self.sizer = CellSizer(config.cell_lifetimes, config.cell_duration_s)

    @property
    def store(self) -> Store:
        if self._store is None:
            raise RuntimeError("Sweep.store used before attach()")
        return self._store

    def attach(self, store: Store) -> None:
        """Write into `store` (opened only after `prepare()` passed, so bad input creates no file)."""
        self._store = store
        self.log_dir = store.path.parent / "specfrontier-logs"

    def prepare(self) -> None:
        """Every check that can fail before a server is launched (config, binary, flags, prompts)."""
        check_min_repeats(self.config, self.drift_mode)
        self.adapter.prepare(self.config.settings)
        if self.config.workloads:
            self.workloads = [
                resolve_workload(spec, where=f"workloads[{i}]") for i, spec in enumerate(self.config.workloads)
            ]
        else:
            w = self.config.workload
            prompts = tuple(load_prompts(w.prompts, max_tokens=w.max_tokens, api=w.api))
            self.workloads = [ResolvedWorkload(self.workload, prompts, self.sampling, greedy=w.temperature == 0.0)]
        first = self.workloads[0]
        self.workload, self.prompts, self.sampling = first.key, list(first.prompts), first.sampling

    def new_run(self) -> str:
        run_id = self.store.create_run(
            engine=self.adapter.name,
            config=self.config.model_dump(mode="json"),
            environment=environment(self.adapter) | {"drift_control": self.drift_mode} | settings_source(self.config),
        )
        if self.config.search.strategy == "grid":  # other strategies register what they choose
            register_settings(self.store, run_id, self.config.all_settings())
        return run_id

    async def run(self, run_id: str) -> RunOutcome:
        """Measure every missing cell of the settings the search chooses (grid: all listed ones); marks
        the run done, incomplete or failed (`RunOutcome`), or interrupted on cancel. `self.planner`
        keeps the search's trace."""
        self.planner = planner_for(self.config, self.store, run_id)
        self._missing_count = 0
        self._failed: list[tuple[str, str]] = []
        try:
            await self._measure_all(run_id, self.planner)
            if self.drift_mode == "reference":
                await self._measure_reference(run_id)
        except (asyncio.CancelledError, KeyboardInterrupt, StoreError):
            self._mark(run_id, "interrupted")  # a store that stopped taking writes interrupts the run: resumable
            raise
        except BaseException:
            self._mark(run_id, "failed")
            raise
        finally:
            with contextlib.suppress(SpecFrontierError):
                self.store.release_run(run_id)
        done = [*self.store.done_cells(run_id), *self.store.done_open_cells(run_id)]
        cells = sum(1 for key in done if key[3] != REFERENCE_REPEAT)  # the drift reference is no cell of the sweep
        status = "done" if self._missing_count == 0 else ("incomplete" if cells else "failed")
        self.store.set_run_status(run_id, status)
        return RunOutcome(status, cells, self._missing_count, tuple(self._failed))

    async def _measure_all(self, run_id: str, planner: SearchPlanner) -> None:
        """Every setting the search chooses, one after the other (the Ray executor runs them side by side),
        or with drift control, round by round (`_measure_interleaved`)."""
        if self.drift_mode == "interleave":
            await self._measure_interleaved(run_id, planner)
            return
        while (setting := planner.next_setting()) is not None:
            await self._run_setting(run_id, setting, levels=planner.levels.get(setting.name))

    async def _measure_interleaved(self, run_id: str, planner: SearchPlanner) -> None:
        """Round r measures repeat r of every setting, each on its own launch, at the levels still open
        (all of them, or with `min_repeats` those the sequential rule has not settled: `runs.pacing`)."""
        while planner.next_setting() is not None:  # the grid registers and traces every listed setting
            pass
        # Every listed setting, whatever its stored status: a setting marked done after an earlier round of
        # an interrupted run still has the later rounds' cells to measure on `--resume` (the planner skips
        # settings stored as done).
        settings = list(self.config.all_settings())
        all_levels = self.config.load.rates if self.config.load.mode == "open" else self.config.concurrency
        measuring = len(all_levels)
        for repeat in range(self.config.repeats):
            levels = open_levels_after(self.store, run_id, self.config, repeat)
            failed = {name for name, _ in self._failed}
            if levels is not None and len(levels) < measuring and self.events.on_cells_dropped:
                live = sum(1 for s in settings if s.name not in failed)
                rounds_left = self.config.repeats - repeat
                self.events.on_cells_dropped((measuring - len(levels)) * rounds_left * live * len(self.workloads))
                measuring = len(levels)
            if levels == []:
                break
            for setting in settings:
                if setting.name not in failed:
                    await self._run_setting(run_id, setting, levels=levels, repeats=(repeat,))
                else:  # failed in an earlier round: not relaunched, its cells of this round are missing
                    self._missing_count += sum(
                        1
                        for r, _, lv in self._missing(run_id, setting)
                        if r == repeat and (levels is None or lv in levels)
                    )
            if repeat >= 1 and self.events.on_provisional:
                self.events.on_provisional(provisional_answer(self.store, run_id))

    async def _measure_reference(self, run_id: str) -> None:
        """The end-of-run drift reference (`drift_control: reference`, `runs.pacing`): the first setting
        whose cells are all stored, launched once more after every setting and measured at every level, one
        repeat (`REFERENCE_REPEAT`). Nothing to compare with fewer than two settings measured; a reference
        already stored (`--resume`) is not measured again."""
        measured = [row for row in self.store.settings(run_id) if row.status == "done"]
        if len(measured) < 2:
            return
        first = next((s for s in self.config.all_settings() if s.name == measured[0].name), None)
        if first is None or not self._missing(run_id, first, repeats=(REFERENCE_REPEAT,)):
            return
        if self.events.on_reference_start:
            self.events.on_reference_start(first, len(self._missing(run_id, first, repeats=(REFERENCE_REPEAT,))))
        await self._run_setting(run_id, first, repeats=(REFERENCE_REPEAT,), reference=True)

    async def measure_setting(
        self, run_id: str, setting: EngineSetting, levels: Sequence[float] | None = None
    ) -> tuple[int, list[tuple[str, str]]]:
        """Every missing cell of one setting (only at `levels` when the search asks for a subset), alone (a
        Ray worker's job, runs/distributed.py): the cells not measured, and (setting, first line of the
        error) when the setting failed."""
        self._missing_count = 0
        self._failed = []
        await self._run_setting(run_id, setting, levels=levels)
        return self._missing_count, list(self._failed)

    def _mark(self, run_id: str, status: str) -> None:
        """Set the run's status on the way out of an error; a store that cannot be written (the error
        itself, perhaps) must not hide the original exception."""
        with contextlib.suppress(SpecFrontierError):
            self.store.set_run_status(run_id, status)

    def _record_launch_environment(self, run_id: str, name: str, env: dict[str, str]) -> None:
        """Keep the variables the setting's server is launched with (`LAUNCH_ENVIRONMENT_KEY`): its
        deployable command prints these, what was measured, not what today's defaults would set."""
        self.store.merge_environment_entry(run_id, LAUNCH_ENVIRONMENT_KEY, name, dict(env))

    def _record_engine_warnings(self, run_id: str, name: str, log_path: Path) -> None:
        """Keep what the server's log warned about its speed (e.g. vLLM on the CPU without Intel OpenMP
        preloaded) in the run's environment, per setting, so the report shows it beside the figures."""
        try:
            log = log_path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return
        warnings = self.adapter.performance_warnings(log)
        if not warnings:
            return
        self.store.merge_environment_entry(run_id, ENGINE_WARNINGS_KEY, name, list(warnings))

    def _missing(
        self, run_id: str, setting: EngineSetting, repeats: Sequence[int] | None = None
    ) -> list[tuple[int, ResolvedWorkload, float]]:
        """(repeat, workload, level) still to measure, of `repeats` (default: the config's): level is C
        (closed loop) or the rate in req/s (open)."""
        wanted = range(self.config.repeats) if repeats is None else repeats
        if self.config.load.mode == "open":
            done_open = self.store.done_open_cells(run_id)
            return [
                (repeat, wl, rate)
                for repeat in wanted
                for wl in self.workloads
                for rate in self.config.load.rates
                if (setting.name, wl.key, rate, repeat) not in done_open
            ]
        done = self.store.done_cells(run_id)
        return [
            (repeat, wl, c)
            for repeat in wanted
            for wl in self.workloads
            for c in self.config.concurrency
            if (setting.name, wl.key, c, repeat) not in done
        ]

    def _todo(
        self,
        run_id: str,
        setting: EngineSetting,
        levels: Sequence[float] | None = None,
        repeats: Sequence[int] | None = None,
    ) -> list[tuple[int, ResolvedWorkload, float]]:
        """`_missing` of `setting` at `levels` (all: None), the cells a launch of it is for."""
        return [t for t in self._missing(run_id, setting, repeats) if levels is None or t[2] in levels]

    def _settle(self, run_id: str, setting: EngineSetting, levels: Sequence[float] | None = None) -> None:
        """Mark `setting` done when nothing of it is missing but it was left unfinished (`running`, `interrupted`,
        or `pending` where its launch's own update was lost): the tool stopped (a kill, a signal, a crash, a
        lost Ray node) after its last cell was stored and before the setting was marked done. Left so, a
        finished setting read as unfinished in reports and to guided search after `--resume`. A failed one
        keeps its failure, and one with a repeat still missing (an interleaved round) stays as it is."""
        if self._todo(run_id, setting, levels):
            return
        row = next((s for s in self.store.settings(run_id) if s.name == setting.name), None)
        if row is not None and row.status not in ("done", "failed"):
            self.store.update_setting(run_id, setting.name, status="done")

    async def _run_setting(
        self,
        run_id: str,
        setting: EngineSetting,
        levels: Sequence[float] | None = None,
        repeats: Sequence[int] | None = None,
        *,
        reference: bool = False,
    ) -> None:
        """Every missing cell of `setting` (only at `levels` when the search asks for a subset, only of
        `repeats` in an interleaved round). `reference`: the end-of-run drift reference (`_measure_reference`),
        launched, warmed up and measured the same way, but the setting's row keeps what its own launch
        recorded (command, log, startup, capacity, first request, status), and a failure costs the drift
        measurement, not the setting: it is recorded with the reference (`DRIFT_REFERENCE_KEY`)."""
        todo = self._todo(run_id, setting, levels, repeats)
        if not todo:
            if not reference:
                self._settle(run_id, setting, levels)
            return
        log_path = (
            self.log_dir / run_id / file_name_for(f"{setting.name}.reference" if reference else setting.name, ".log")
        )
        server: ServerProcess | None = None
        stored = 0
        began, startup, error = time.monotonic(), None, None
        try:
            server, base_url, startup_s = await self._launch(run_id, setting, log_path, record=not reference)
            startup = startup_s
            async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as session:
                capacity = await self.adapter.capacity(session, base_url, setting)
                if not reference:
                    self._record_ready(run_id, setting.name, startup_s, capacity, log_path)
                if self.events.on_setting_ready:
                    self.events.on_setting_ready(setting, startup_s, capacity)
                async with StreamingClient(
                    base_url,
                    timeout_s=self.config.request_timeout_s,
                    spec_stats_extractor=self.adapter.request_spec_stats,
                    extra_body=self.adapter.request_extras(),
                    keep_alive=self.adapter.keep_alive,
                    max_consecutive_timeouts=self.config.max_consecutive_timeouts,
                ) as client:
                    await self._first_request(run_id, setting, client, record=not reference)
                    top = max(self.config.concurrency)
                    async with watch_running(self.adapter.running_now, session, base_url) as peak:
                        for wl in self.workloads:  # unmeasured: first-request costs, allocator and cache warm-up
                            warm = await run_closed_loop(
                                client,
                                list(wl.prompts),
                                wl.sampling,
                                concurrency=top,
                                num_requests=self.config.warmup_rounds * top,
                            )
                            require_evidence(warm, f"warmup of {wl.key}")
                            self.sizer.warmed_up(to_server_time(warm, self.adapter.time_scale), top)
                    observed = peak.describe(capacity, top)
                    if observed != capacity and not reference:
                        self.store.update_setting(
                            run_id,
                            setting.name,
                            capacity=observed.max_running_requests,
                            capacity_source=observed.source,
                        )
                    for repeat, wl, level in todo:
                        await self._run_cell(run_id, setting, server, session, client, level, repeat, wl)
                        stored += 1
            if not reference:
                self.store.update_setting(run_id, setting.name, status="done")
        except EngineError as exc:
            if reference:  # the drift goes unmeasured; the setting's own cells stand
                error = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            else:
                self._setting_failed(run_id, setting, exc, log_path, missing=len(todo) - stored)
        finally:
            if server is not None:
                server.stop()
        if reference:
            facts = {"setting": setting.name, "startup_s": startup, "seconds": time.monotonic() - began}
            self.store.merge_environment(run_id, DRIFT_REFERENCE_KEY, facts | {"cells": stored, "error": error})
            if error is not None and self.events.on_setting_failed:
                self.events.on_setting_failed(setting, f"end-of-run drift reference: {error}")

    def _record_ready(self, run_id: str, name: str, startup_s: float, capacity: Capacity, log_path: Path) -> None:
        """What a setting's own launch records once its server is ready: startup, capacity, engine warnings."""
        self.store.update_setting(
            run_id,
            name,
            startup_s=startup_s,
            capacity=capacity.max_running_requests,
            capacity_source=capacity.source,
            context_tokens=capacity.context_tokens,
        )
        self._record_engine_warnings(run_id, name, log_path)

    def _setting_failed(
        self, run_id: str, setting: EngineSetting, exc: EngineError, log_path: Path, *, missing: int
    ) -> None:
        """Record a setting whose server failed (with its log tail); its `missing` cells stay missing."""
        tail = exc.log_tail if isinstance(exc, EngineStartError) and exc.log_tail else tail_of(log_path)
        self.store.update_setting(run_id, setting.name, status="failed", error=str(exc), log_tail=tail)
        self._missing_count += missing
        self._failed.append((setting.name, str(exc).splitlines()[0] if str(exc) else type(exc).__name__))
        if self.events.on_setting_failed:
            self.events.on_setting_failed(setting, str(exc))

    async def _launch(
        self, run_id: str, setting: EngineSetting, log_path: Path, *, record: bool = True
    ) -> tuple[ServerProcess, str, float]:
        """Start the setting's server on a free port and wait until it is ready and proven ours; a port
        another program took first costs one more launch on a new port, not the setting. `record`: store
        the launch (status, command, log, variables) with the setting (not for the drift reference)."""
        self.adapter.files_dir = log_path.parent  # files the command reads outlive the run, as its log does
        for attempt in range(1, PORT_ATTEMPTS + 1):
            port = free_port()
            argv = self.adapter.command(setting, port=port, max_concurrency=self._server_slots())
            env = self.adapter.environment()
            if record:
                self.store.update_setting(run_id, setting.name, status="running", command=argv, log_path=str(log_path))
                self._record_launch_environment(run_id, setting.name, env)
            if self.events.on_setting_start:
                self.events.on_setting_start(setting, argv)
            server = ServerProcess(argv, log_path, extra_env=env)
            base_url = f"http://127.0.0.1:{port}"
            try:
                server.start()
                startup_s = await server.wait_ready(
                    base_url + self.adapter.health_path,
                    timeout_s=self.adapter.startup_timeout_s,
                    probe_timeout_s=self.adapter.health_timeout_s,
                )
            except PortTakenError as exc:
                server.stop()
                if attempt == PORT_ATTEMPTS:
                    raise
                if self.events.on_setting_relaunch:  # else the next "launching" line comes with no reason
                    why = str(exc).split("; fix:", 1)[0]
                    self.events.on_setting_relaunch(setting, f"{why}; launching again on a new port")
                continue
            except BaseException:
                server.stop()
                raise
            return server, base_url, startup_s
        raise AssertionError("unreachable: the last attempt returns or raises")  # pragma: no cover

    def _server_slots(self) -> int:
        """Parallel slots to launch the server with: the top C, or the open loop's in-flight cap if set."""
        load = self.config.load
        if load.mode == "open" and load.max_in_flight is not None:
            return load.max_in_flight
        return max(self.config.concurrency)

    async def _first_request(
        self, run_id: str, setting: EngineSetting, client: StreamingClient, *, record: bool = True
    ) -> None:
        """Cold start: the very first request on the fresh server (before warmup), stored with the setting
        (`record`; the drift reference sends it too, so its launch is measured as the setting's was)."""
        (first,) = to_server_time([await client.send(self.prompts[0], self.sampling)], self.adapter.time_scale)
        self.sizer.first_request(first)
        if record and first.ok and first.first_token_ns is not None:
            self.store.update_setting(
                run_id,
                setting.name,
                first_ttft_ms=(first.first_token_ns - first.send_ns) / 1e6,
                first_e2e_ms=(first.end_ns - first.send_ns) / 1e6,
            )

    async def _run_cell(
        self,
        run_id: str,
        setting: EngineSetting,
        server: ServerProcess,
        session: aiohttp.ClientSession,
        client: StreamingClient,
        level: float,
        repeat: int,
        workload: ResolvedWorkload | None = None,
    ) -> None:
        """One cell: closed loop with C = `level` users, or open loop at `level` req/s (config.load.mode)."""
        wl = workload or self.workloads[0]

        async def read_counters() -> SpecCounters | None:
            return await self.adapter.spec_counters(session, client.base_url)

        async def server_died(where: str, wait_s: float) -> None:
            code = await server.wait_exited(wait_s)
            if code is not None:  # a crash mid-window: this cell is not a measurement of the setting
                raise EngineStartError(
                    f"server {describe_exit(code)} during the cell {where}",
                    log_path=server.log_path,
                    log_tail=tail_of(server.log_path),
                )
            health_url = client.base_url + self.adapter.health_path
            if wait_s and not await answers_health(session, health_url, self.adapter.health_timeout_s):
                raise EngineStalled(  # requests lost their connection and it is still going down
                    f"server stopped answering during the cell {where}: requests lost their connection and its "
                    f"health check fails, though it had not exited {wait_s:g} s later; nothing of the cell is "
                    f"stored; fix: see the server log ({server.log_path})"
                )

        load = self.sizer.sized(cell_load(self.config), setting.name, wl.key, level)
        measured = await measure_cell(
            client,
            wl,
            level,
            load,
            read_counters=read_counters,
            counters_source=self.adapter.counters_source,
            time_scale=self.adapter.time_scale,
            server_died=server_died,
        )
        done = measured.store(self.store, run_id, setting.name, wl.key, repeat)
        self.sizer.cell_done(done)
        if self.events.on_cell_done:
            self.events.on_cell_done(done)


async def answers_health(session: aiohttp.ClientSession, url: str, timeout_s: float) -> bool:
    """Whether the server answers its health URL with 200 now (after a window in which requests lost their
    connection: a server that does not is going down, even if its process has not exited yet)."""
    try:
        async with session.get(url, timeout=aiohttp.ClientTimeout(total=timeout_s)) as resp:
            return resp.status == 200
    except (aiohttp.ClientError, OSError, TimeoutError):
        return False


def cell_load(config: TuneConfig) -> CellLoad:
    """The load of every cell of a tune config (its `load:` block and the sweep shape)."""
    return CellLoad.of(
        config.load.mode, config.rounds_per_cell, config.client_workers, config.load, config.cell_duration_s
    )


def register_settings(store: Store, run_id: str, settings: Sequence[EngineSetting]) -> None:
    """Add a run's settings, in order, as pending rows (shared by the server and virtual sweeps)."""
    for position, setting in enumerate(settings):
        store.add_setting(
            run_id,
            setting_id=setting.name,
            position=position,
            name=setting.name,
            params=setting.parameters(),
            speculative=setting.speculative,
        )


class Runner(Protocol):
    """What `tune` drives: the server sweep (`Sweep`) or an engine's own runner (the simulator's virtual
    time, `runs.virtual_sweep.VirtualSweep`), picked by the engine's registration (`EngineSpec.runner`)."""

    events: SweepEvents

    @property
    def config(self) -> TuneConfig: ...

    @property
    def planner(self) -> SearchPlanner | None: ...

    @property
    def store(self) -> Store: ...

    def prepare(self) -> None:
        """Every check that can fail before anything is launched or written."""

    def attach(self, store: Store) -> None: ...

    def new_run(self) -> str: ...

    async def run(self, run_id: str) -> RunOutcome: ...


RAY_RUNNER = "specfrontier.runs.distributed:RaySweep"
"""The runner of `executor: {kind: ray}`, named like an engine's runner: it builds on this module, and Ray
is optional, so it is imported only when a config asks for it."""


def _resolve(path: str) -> Callable[[TuneConfig], Runner]:
    """The runner factory a `module:function` name refers to."""
    module, _, function = path.partition(":")
    factory: Callable[[TuneConfig], Runner] = getattr(importlib.import_module(module), function)
    return factory


def make_runner(config: TuneConfig, events: SweepEvents | None = None) -> Runner:
    """The runner the config's engine registered (the server sweep unless it says otherwise)."""
    spec = spec_of(config)
    runner: Runner = Sweep(config) if spec.runner is None else _resolve(spec.runner)(config)
    if config.executor.kind == "ray":
        if type(runner) is not Sweep:
            raise ConfigError(
                f"executor.kind = 'ray' with engine {spec.name!r}: this run is in-process (no server to place on "
                "a node); fix: use executor.kind: local (the simulator: engine.face: http)"
            )
        runner = _resolve(RAY_RUNNER)(config)
    runner.events = events or SweepEvents()
    return runner


def open_sweep(
    config: TuneConfig | None,
    store_path: Path | None,
    *,
    resume: str | None,
    events: SweepEvents | None = None,
    changes: list[str] | None = None,
) -> tuple[Runner, str]:
    """Build a prepared runner and the run id to fill: a new run, or the stored config of `resume`.

    With both `resume` and `config` (`tune --resume RUN -c FILE`), `config` may change the stored
    config's launch arguments and timeouts only (`runs.resume_config`): what changed is recorded in the
    store and appended to `changes`; any other difference is a ConfigError naming the field."""
    if resume is not None:
        path = store_path or (config.store if config else Path("specfrontier.db"))
        if not path.exists():
            raise StoreRefused(f"--store = {str(path)!r}: no such store; fix: pass the --store the run was written to")
        store = Store(path)
        row = store.run(resume)
        if "bench" in row.config:
            raise StoreRefused(f"run = {resume!r}: a `bench` run; fix: run `specfrontier bench` again (no resume)")
        if row.status == "done":
            raise StoreRefused(f"run = {resume!r}: already complete; fix: run `{report_command(resume, path)}`")
        stored = parse_config(row.config, source=f"run {resume} config", stored=True)
        given = stored if config is None else config.model_copy(update={"store": path})
        changed = [] if config is None else config_changes(stored, given, "--config", resume)
        runner = make_runner(given, events)
        runner.prepare()
        runner.attach(store)
        store.claim_run(resume)  # one writer per run: a second `--resume` of it stops here with a StoreError
        record_changes(store, resume, stored, given, changed)
        if changes is not None:
            changes.extend(changed)
        store.set_run_status(resume, "running")
        return runner, resume
    if config is None:
        raise ValueError("open_sweep needs a config when not resuming")
    if store_path is not None:
        config = config.model_copy(update={"store": store_path})
    runner = make_runner(config, events)
    runner.prepare()
    runner.attach(Store(config.store))
    return runner, runner.new_run()


__all__ = [
    "SETTINGS_SOURCE_KEY",
    "RunOutcome",
    "Runner",
    "Sweep",
    "SweepEvents",
    "cell_load",
    "environment",
    "make_runner",
    "open_sweep",
    "register_settings",
    "settings_source",
    "workload_label",
]
