"""Settings in parallel on a Ray cluster (`executor: {kind: ray}`, `tune --executor ray`; docs/scale.md).

Each server-side setting becomes one Ray task placed with the resources the config gives it
(`executor.resources`, e.g. {GPU: 4}); on the node Ray picks, the task runs exactly what the local sweep
runs for one setting (`Sweep.measure_setting`: launch, read capacity back, warm up, measure every missing
cell), so the server and its load generator share a node and client timing stays local. The task writes
nothing: its store is a `RecordingStore` that streams every write (setting updates, whole cells) back to
the driver, which is the only writer of the SQLite store. Finished cells therefore survive the worker.

Faults: a node or worker that dies mid-setting (a Ray system error, not an error of the setting) loses
only that setting's unfinished cells: the driver recomputes what is missing from the store and launches
the setting again, up to `executor.max_attempts` launches; each loss is recorded with the setting. Ray's
own task retries are off (a retried task would measure stored cells twice); a cell that reaches the
driver twice is stored once. A server dies with the worker that started it (`process.launch` ties it
to its parent), so a lost node leaves no server running. A server crash or a bad flag is an error of the
setting and is recorded as in a local run.

Ray is optional (`pip install 'specfrontier[ray]'`) and imported only here, only when asked for. Without
`executor.address` a private local Ray is started on 127.0.0.1 and stopped at the end.
"""

from __future__ import annotations

import asyncio
import os
import queue
import shutil
import subprocess
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from specfrontier.config import TuneConfig
from specfrontier.config.load import parse_config
from specfrontier.engines import EngineAdapter, EngineSetting
from specfrontier.errors import ConfigError
from specfrontier.metrics.digest import try_digest
from specfrontier.metrics.window import cell_metrics
from specfrontier.runs.cell import CellDone
from specfrontier.runs.sweep import RunOutcome, Sweep, environment
from specfrontier.search.planner import SearchPlanner

LOCAL_RAY_ENV = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}
"""Makes a Ray started here resolve its node address to the loopback address (Ray's own switch, read when
`ray` is imported): a private cluster binds 127.0.0.1, not the machine's network address."""


class RecordingStore:
    """The store a Ray task writes to: every write becomes a message for the driver (`sink`); reads answer
    from the driver's snapshot of finished cells, so the task measures exactly what is missing."""

    def __init__(self, path: Path, done: set[tuple[str, str, int, int]], done_open: set[tuple[str, str, float, int]]):
        self.path = path
        self._done = done
        self._done_open = done_open
        self.sink: queue.Queue[tuple[str, Any]] = queue.Queue()

    def done_cells(self, run_id: str) -> set[tuple[str, str, int, int]]:
        return set(self._done)

    def done_open_cells(self, run_id: str) -> set[tuple[str, str, float, int]]:
        return set(self._done_open)

    def update_setting(self, run_id: str, setting_id: str, **fields: Any) -> None:
        self.sink.put(("update_setting", {"setting_id": setting_id, **fields}))

    def record_cell(self, run_id: str, **cell: Any) -> int:
        self.sink.put(("record_cell", cell))
        return 0

    def merge_environment_entry(self, run_id: str, key: str, entry: str, value: Any) -> None:
        self.sink.put(("merge_environment_entry", (key, entry, value)))


def measure_remotely(
    config_json: dict[str, Any],
    store_path: str,
    run_id: str,
    setting: EngineSetting,
    levels: Sequence[float] | None,
    done: set[tuple[str, str, int, int]],
    done_open: set[tuple[str, str, float, int]],
) -> Iterator[tuple[str, Any]]:
    """The body of one Ray task (a generator: each message reaches the driver as soon as it is yielded):
    ("node", facts) first, then the setting's writes in order, then ("finished", (missing, failed))."""
    import ray

    config = parse_config(config_json, source="the driver's config")
    sweep = Sweep(config)
    sweep.prepare()
    recorder = RecordingStore(Path(store_path), done, done_open)
    sweep.attach(recorder)  # type: ignore[arg-type]  # the writes a setting makes, no more
    yield (
        "node",
        {
            "node_id": ray.get_runtime_context().get_node_id(),
            "accelerators": {k: list(v) for k, v in ray.get_runtime_context().get_accelerator_ids().items()},
            "gpus": gpu_facts(),
            **environment(sweep.adapter),
        },
    )

    def work() -> None:
        try:
            recorder.sink.put(("finished", asyncio.run(sweep.measure_setting(run_id, setting, levels))))
        except BaseException as exc:  # re-raised in the task, so the driver sees the setting's own error
            recorder.sink.put(("error", exc))

    threading.Thread(target=work, name=f"setting {setting.name}", daemon=True).start()
    while True:
        kind, payload = recorder.sink.get()
        if kind == "error":
            raise payload
        yield kind, payload
        if kind == "finished":
            return


def gpu_facts() -> list[str]:
    """'model, driver' of each GPU of this node as nvidia-smi lists them (empty: no NVIDIA GPU or no tool)."""
    tool = shutil.which("nvidia-smi")
    if tool is None:
        return []
    try:
        listed = subprocess.run(
            [tool, "--query-gpu=name,driver_version", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=20, check=True,
        ).stdout  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return []
    return [line.strip() for line in listed.splitlines() if line.strip()]


class RaySweep(Sweep):
    """The server sweep with its settings run as Ray tasks (the driver: plans, stores, reports progress)."""

    def __init__(self, config: TuneConfig, **kwargs: Any) -> None:
        super().__init__(config, **kwargs)
        self.attempts: dict[str, int] = {}
        """Launches per setting (more than one: a node or worker was lost)."""
        self._ray: Any = None
        """The `ray` module, imported when the run starts."""

    def prepare(self) -> None:
        super().prepare()
        _import_ray()  # a missing extra is bad input: refused before anything is launched

    async def run(self, run_id: str) -> RunOutcome:
        """The local sweep's run (status, claim release, outcome), with the settings measured on Ray."""
        self._ray = ray = _import_ray()
        started_here = not ray.is_initialized()
        if started_here:
            _connect(ray, self.config.executor.address)
        try:
            return await super().run(run_id)
        finally:
            if started_here:
                ray.shutdown()

    async def _measure_all(self, run_id: str, planner: SearchPlanner) -> None:
        """Ask the search for settings while workers are free (a grid yields its next listed one, a guided
        or adaptive search its next choice from the cells stored so far) and measure them side by side."""
        ray = self._ray
        resources = self.resources = self.config.executor.resources or default_resources(self.adapter)
        task = ray.remote(measure_remotely).options(max_retries=0, **_placement(resources))
        self.slots = settings_at_once(ray.cluster_resources(), resources)
        running: set[asyncio.Task[None]] = set()
        try:
            while True:
                while len(running) < self.slots and (setting := planner.next_setting()) is not None:
                    levels = planner.levels.get(setting.name)
                    running.add(asyncio.create_task(self._drive(ray, task, run_id, setting, levels)))
                if not running:  # the search is done and nothing is measuring
                    return
                finished, running = await asyncio.wait(running, return_when=asyncio.FIRST_COMPLETED)
                for done in finished:
                    done.result()  # the setting's own error ends the run, as locally
        except BaseException:
            for pending in running:
                pending.cancel()
            raise

    async def _drive(
        self, ray: Any, task: Any, run_id: str, setting: EngineSetting, levels: Sequence[float] | None = None
    ) -> None:
        """Launch `setting` until its cells are stored, its own error ends it, or its attempts run out."""
        max_attempts = self.config.executor.max_attempts
        for attempt in range(1, max_attempts + 1):
            if not self._todo(run_id, setting, levels):
                self._settle(run_id, setting, levels)
                return
            self.attempts[setting.name] = attempt
            stream = task.remote(
                self.config.model_dump(mode="json"),
                str(self.store.path),
                run_id,
                setting,  # the setting itself: a search may propose one the config does not list
                levels,
                self.store.done_cells(run_id),
                self.store.done_open_cells(run_id),
            )
            try:
                async for ref in stream:
                    kind, payload = await ref
                    self._apply(run_id, setting, kind, payload, attempt)
                    if kind == "finished":
                        return  # the task's last message: a node lost after it costs the setting nothing
                return
            except ray.exceptions.RayTaskError as exc:  # the setting's own error, raised on the worker
                raise exc.as_instanceof_cause() from None
            except ray.exceptions.RayError as exc:  # the node or the worker was lost: re-launch what is missing
                missing = len(self._todo(run_id, setting, levels))
                lost = (
                    f"attempt {attempt} of {max_attempts}, {missing} cell(s) not stored: "
                    f"{type(exc).__name__}: {str(exc).splitlines()[0]}"
                )
                self.store.merge_environment(run_id, f"lost:{setting.name}:{attempt}", lost)
                if not missing:  # its node died after its last cell reached the driver, before the task ended
                    self._settle(run_id, setting, levels)  # its own "done" may be lost with the node
                    return
                if attempt == max_attempts:
                    self.store.update_setting(run_id, setting.name, status="failed", error=f"node lost ({lost})")
                    self._missing_count += missing
                    self._failed.append((setting.name, f"node lost ({lost})"))
                    if self.events.on_setting_failed:
                        self.events.on_setting_failed(setting, lost)

    def _apply(self, run_id: str, setting: EngineSetting, kind: str, payload: Any, attempt: int) -> None:
        """One message of a task: stored (the driver is the only writer) and shown as progress."""
        if kind == "node":
            self.store.merge_environment(run_id, f"node:{setting.name}:{attempt}", payload)
            if self.events.on_setting_placed:
                gpus = f", {len(payload['gpus'])} GPU(s) {payload['gpus'][0]}" if payload["gpus"] else ""
                again = f", attempt {attempt}" if attempt > 1 else ""
                self.events.on_setting_placed(setting, f"node {payload['node_id'][:12]}{gpus}{again}")
        elif kind == "update_setting":
            fields = dict(payload)
            self.store.update_setting(run_id, fields.pop("setting_id"), **fields)
            if "command" in fields and self.events.on_setting_start:
                self.events.on_setting_start(setting, list(fields["command"]))
        elif kind == "record_cell":
            self._record(run_id, payload)
        elif kind == "merge_environment_entry":
            self.store.merge_environment_entry(run_id, *payload)
        elif kind == "finished":
            missing, failed = payload
            self._missing_count += missing
            self._failed.extend(failed)
            if failed and self.events.on_setting_failed:
                self.events.on_setting_failed(setting, failed[0][1])

    def _record(self, run_id: str, cell: dict[str, Any]) -> None:
        key = (cell["setting_id"], cell["workload"], cell["concurrency"], cell["repeat"])
        rate = cell.get("request_rate")
        done = self.store.done_cells(run_id) if rate is None else self.store.done_open_cells(run_id)
        if (key if rate is None else (key[0], key[1], rate, key[3])) in done:
            return  # a late copy of a stored cell (its task was presumed lost): each cell is stored once
        level = cell["concurrency"] if rate is None else None
        fields = dict(cell)
        # The worker computed the cell's figures on its node (`MeasuredCell.store`); computed here only if
        # it could not: once, for the store and the progress line.
        digest = fields.pop("digest", None) or try_digest(cell["requests"], level)
        self.store.record_cell(run_id, **fields, digest=digest)
        if self.events.on_cell_done:
            metrics = digest.metrics if digest is not None else cell_metrics(cell["requests"], level)
            self.events.on_cell_done(
                CellDone(
                    cell["setting_id"], cell["concurrency"], cell["repeat"], metrics, cell["counters"],
                    request_rate=rate, workload=cell["workload"],
                )
            )  # fmt: skip


def default_resources(adapter: EngineAdapter[Any]) -> dict[str, float]:
    """What a setting holds when the config does not say: one CPU for its load generator, and the GPUs one
    server of the engine holds (its tensor-parallel size; none for llama.cpp on the CPU or the simulator)."""
    gpus = adapter.gpus_per_server()
    return {"CPU": 1.0, **({"GPU": float(gpus)} if gpus else {})}


def settings_at_once(cluster: dict[str, float], need: dict[str, float]) -> int:
    """How many settings the cluster can hold at once: for each resource a setting needs, the cluster's
    total over the need, the smallest of them (at least 1: a setting that fits nowhere waits in Ray)."""
    fits = [int(cluster.get(name, 0.0) // amount) for name, amount in need.items() if amount > 0]
    return max(1, min(fits)) if fits else 1


def _placement(resources: dict[str, float]) -> dict[str, Any]:
    """Ray task options for `executor.resources` (CPU and GPU are Ray's own keywords, the rest custom)."""
    custom = {k: v for k, v in resources.items() if k not in ("CPU", "GPU")}
    return {"num_cpus": resources.get("CPU", 0), "num_gpus": resources.get("GPU", 0), "resources": custom}


def _import_ray() -> Any:
    for key, value in LOCAL_RAY_ENV.items():
        os.environ.setdefault(key, value)
    try:
        import ray
    except ImportError:
        raise ConfigError(
            "executor.kind = 'ray': Ray is not installed; fix: pip install 'specfrontier[ray]' "
            "(or use executor.kind: local)"
        ) from None
    return ray


def _connect(ray: Any, address: str | None) -> None:
    """Join the cluster at `address`, or start a private local one (loopback only, no dashboard)."""
    try:
        if address is None:
            ray.init(include_dashboard=False, log_to_driver=False)
        else:
            ray.init(address=address, log_to_driver=False)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        raise ConfigError(
            f"executor.address = {address!r}: cannot join the Ray cluster ({str(exc).splitlines()[0]}); "
            "fix: start it (`ray start --head`) or pass its address"
        ) from None


__all__ = ["RaySweep", "RecordingStore", "measure_remotely"]
