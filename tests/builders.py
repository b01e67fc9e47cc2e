"""Tiny builders shared by the unit tests (importable because pytest puts tests/ on the path)."""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import os
import re
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from specfrontier.cli import main
from specfrontier.records import RequestRecord, SpecCounters
from specfrontier.store import Store

MS = 1_000_000  # ns per ms
CORE_CELL_KEYS = frozenset(
    {
        "setting",
        "concurrency",
        "repeats",
        "per_request_tok_s_p50",
        "aggregate_tok_s",
        "ttft_p50_ms",
        "tpot_p50_ms",
        "acceptance_rate",
        "acceptance_length",
        "capacity",
        "errors",
    }
)
"""Fields every cell of `report --format json` carries, whatever metrics are declared besides them."""
REPO = Path(__file__).resolve().parents[1]
"""The repository's root: tests name files by it, so that a test file may move between folders."""
BENCHMARKS = REPO / "benchmarks"
DATA = REPO / "tests" / "data"
"""Recorded answers and stores that tests read (tests/data)."""


def load_benchmark(name: str) -> ModuleType:
    """Import a benchmarks/ script by path (benchmarks/ is not a package), once per test session."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, BENCHMARKS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


def tagged_processes(tag: str, command: bytes) -> list[int]:
    """Pids of live processes whose environment holds `tag` (NAME=VALUE) and whose command line holds
    `command`: what a test started, found without matching other programs by name."""
    pids = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                if (
                    tag.encode() in (proc / "environ").read_bytes().split(b"\0")
                    and command in (proc / "cmdline").read_bytes()
                ):
                    pids.append(int(proc.name))
            except OSError:
                continue
    return pids


ANSI = re.compile(r"\x1b\[[0-9;]*m")
CLI = [sys.executable, "-c", "from specfrontier.cli import main; main()"]
"""`specfrontier` as a real process (the console script, without depending on where it is installed)."""


def cli_env() -> dict[str, str]:
    """This environment without the variables that force colour: what a shell piping the output passes."""
    return {k: v for k, v in os.environ.items() if k not in ("FORCE_COLOR", "TTY_COMPATIBLE")}


def cli_process(
    *args: str, cwd: Path, timeout: float = 120.0, argv: list[str] = CLI, **run: Any
) -> subprocess.CompletedProcess[str]:
    """Run `specfrontier ARGS` as a real process, as a shell sees it: exit code, stdout, stderr (`argv`: the
    command that is `specfrontier`; `run`: more of `subprocess.run`)."""
    return subprocess.run(
        [*argv, *args], cwd=cwd, env=cli_env(), capture_output=True, text=True, timeout=timeout, check=False, **run
    )


Cli = Callable[..., tuple[int, str, str]]
"""`specfrontier ARGS` run in-process: (exit code, stdout, stderr); the `cli` fixture of tests/unit."""


def run_cli(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """Run the console-script entry point in-process: (exit code, stdout, stderr), colour codes removed."""
    monkeypatch.setattr(sys, "argv", ["specfrontier", *args])
    try:
        main()
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    out = capsys.readouterr()
    return code, ANSI.sub("", out.out), ANSI.sub("", out.err)


def record_ms(
    send_ms: int, first_ms: int | None, end_ms: int, tokens: int | None, error: str | None = None
) -> RequestRecord:
    """A request record from millisecond times (first token None = no text arrived)."""
    return RequestRecord(
        prompt_id="p",
        send_ns=send_ms * MS,
        end_ns=end_ms * MS,
        first_token_ns=None if first_ms is None else first_ms * MS,
        completion_tokens=tokens,
        error=error,
    )


def steady_cell(c: int, agg: int) -> list[RequestRecord]:
    """Rounds of C requests, each round sent at once and ended 1000 ms later, carrying `agg` tokens in all,
    back to back: exactly `agg` tok/s, in the steady state and over the whole window."""
    tokens = [agg // c] * c
    tokens[0] += agg % c
    return back_to_back([record_ms(0, 100, 1000, t) for t in tokens])


class StoredRun:
    """A run written by hand into a real store, a call per setting and per cell, for the tests of what reads
    runs back: `setting(...)` adds the next setting, `cell(...)` one repeat of a cell, `data()` loads the run
    as the report does. Nothing is made up beyond what the calls say."""

    def __init__(
        self,
        path: Path,
        engine: str = "llamacpp",
        *,
        config: dict[str, Any] | None = None,
        environment: dict[str, Any] | None = None,
    ) -> None:
        self.store = Store(path)
        self.run_id = self.store.create_run(engine=engine, config=config or {}, environment=environment or {})
        self._settings = 0

    @classmethod
    def of(cls, store: Store, run_id: str) -> StoredRun:
        """A run already in an open store (made by the code under test, or an old store), to write more of."""
        run = cls.__new__(cls)
        run.store, run.run_id, run._settings = store, run_id, len(store.settings(run_id))
        return run

    def setting(
        self,
        name: str,
        params: dict[str, Any] | None = None,
        *,
        speculative: bool | None = None,
        position: int | None = None,
        **stored: Any,
    ) -> StoredRun:
        """Add setting `name` at the next position (speculative unless it is the first), then store the
        `stored` columns on it (status, command, capacity, error ...: `Store.update_setting`)."""
        pos = self._settings if position is None else position
        self._settings += 1
        self.store.add_setting(
            self.run_id,
            setting_id=name,
            position=pos,
            name=name,
            params=params or {},
            speculative=pos > 0 if speculative is None else speculative,
        )
        if stored:
            self.store.update_setting(self.run_id, name, **stored)
        return self

    def cell(
        self,
        setting: str,
        c: int,
        requests: list[RequestRecord],
        *,
        repeat: int = 0,
        workload: str = "w",
        counters: SpecCounters | None = None,
        **stored: Any,
    ) -> int:
        """Store one repeat of a cell; its id. Its counters, where given, were read from the server's metrics
        (the acceptance source unless `stored` names another; `stored`: the rest of `Store.record_cell`)."""
        stored.setdefault("acceptance_source", "metrics" if counters is not None else None)
        return self.store.record_cell(
            self.run_id,
            setting_id=setting,
            workload=workload,
            concurrency=c,
            repeat=repeat,
            requests=requests,
            counters=counters,
            **stored,
        )

    def repeats(
        self,
        setting: str,
        c: int,
        cells: Iterable[list[RequestRecord]],
        *,
        counters: Sequence[SpecCounters | None] | None = None,
        workload: str = "w",
    ) -> StoredRun:
        """Store repeats 0, 1, ... of a cell, one per list of requests (`counters`: each repeat's, where read)."""
        for repeat, requests in enumerate(cells):
            read = counters[repeat] if counters else None
            self.cell(setting, c, requests, repeat=repeat, workload=workload, counters=read)
        return self

    def status(self, status: str) -> StoredRun:
        """Store the run's status (`done`, `interrupted` ...)."""
        self.store.set_run_status(self.run_id, status)
        return self

    def data(self, slos: Any = None) -> Any:
        """The run as `analysis.load_run` reads it (under `slos`, where given)."""
        from specfrontier.analysis import load_run  # analysis only for the tests that read runs

        return load_run(self.store, self.run_id) if slos is None else load_run(self.store, self.run_id, slos)

    def close(self) -> tuple[Path, str]:
        """Close the store: its path and the run id, for a test that opens it as a user would."""
        self.store.close()
        return self.store.path, self.run_id


def one_level_run(
    path: Path,
    engine: str,
    settings: dict[str, dict[str, Any]],
    aggs: dict[str, list[int]],
    *,
    config: dict[str, Any] | None = None,
    environment: dict[str, Any] | None = None,
    command: tuple[str, ...] = ("llama-server", "--alias"),
) -> Any:
    """A hand-made run at C=1 (its RunData): per setting (name -> params) and repeat, one request of `agg`
    tokens from 0 to 1000 ms, i.e. exactly `agg` tok/s; each setting's stored launch is `command` + its name."""
    run = StoredRun(path, engine, config=config, environment=environment)
    for name, params in settings.items():
        run.setting(name, params, speculative=bool(params), status="ok", command=(*command, name), startup_s=0.4)
        for rep, agg in enumerate(aggs.get(name, [])):
            run.cell(name, 1, [record_ms(0, 100, 1000, agg)], repeat=rep)
    data = run.data()
    run.close()
    return data


def store_cells(
    path: Path,
    cells: dict[str, dict[int, list[RequestRecord]]],
    *,
    config: dict[str, Any] | None = None,
    client_health: Callable[[str, int], dict[str, Any] | None] | None = None,
) -> tuple[Store, str]:
    """A hand-made run of one repeat per cell (setting -> C -> its requests, with `client_health(setting, C)`
    stored beside them when given): the first setting is the baseline, each stored launch is `srv NAME`.
    Returns the open store and the run's id."""
    run = StoredRun(path, "external", config=config, environment={"engine_version": "x"})
    for name, by_level in cells.items():
        run.setting(name, status="done", command=["srv", name])
        for c, requests in by_level.items():
            run.cell(name, c, requests, client_health=client_health(name, c) if client_health is not None else None)
    return run.store, run.run_id


def closed_loop_ms(
    concurrency: int, rounds: int, length_ms: int, tokens: int, first_ms: int = 50
) -> list[RequestRecord]:
    """Records of an ideal closed loop: `rounds` rounds of `concurrency` requests, each `length_ms` long and
    replaced the instant it ends (its first token `first_ms` after the send)."""
    return [
        record_ms(r * length_ms, r * length_ms + first_ms, (r + 1) * length_ms, tokens)
        for r in range(rounds)
        for _ in range(concurrency)
    ]


def back_to_back(one_round: list[RequestRecord], rounds: int = 6) -> list[RequestRecord]:
    """A round of requests (all sent at 0 and ended together) repeated back to back `rounds` times, so a
    closed-loop cell of them has a steady state (after the first round) whose rates are the round's."""
    length = max(r.end_ns for r in one_round)

    def shifted(r: RequestRecord, by: int) -> RequestRecord:
        return replace(
            r,
            send_ns=r.send_ns + by,
            end_ns=r.end_ns + by,
            first_token_ns=None if r.first_token_ns is None else r.first_token_ns + by,
            chunk_ns=tuple(t + by for t in r.chunk_ns),
        )

    return [shifted(r, k * length) for k in range(rounds) for r in one_round]


def run_virtual(config: Any, store_path: Path, profile: Any = None) -> tuple[Store, str]:
    """A simulated sweep of `config` run in virtual time into a new store (`profile`: another deployment
    than the config's, for variants built in a test); the store and the run id."""
    from specfrontier.runs.virtual_sweep import VirtualSweep  # the simulator only for the tests that use it

    sweep = VirtualSweep(config)
    if profile is not None:
        sweep.profile = profile
    sweep.attach(Store(store_path))
    run_id = sweep.new_run()
    sweep.run_sync(run_id)
    return sweep.store, run_id


FORKING_CHILD = """
import os, sys, time
child = os.fork()
if child == 0:
    time.sleep(120)
    os._exit(0)
print(os.getpid(), child, flush=True)
time.sleep(120)
"""
"""A process that forks a grandchild, prints both pids and sleeps: stopping its group must reap both."""


def wait_for(predicate: Callable[[], object], timeout_s: float = 10.0, what: str = "condition") -> None:
    """Poll `predicate` every 20 ms until it holds; fail naming `what` after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not reached in {timeout_s} s")
        time.sleep(0.02)


@contextlib.asynccontextmanager
async def serving(app: Any) -> AsyncIterator[str]:
    """An aiohttp application served on 127.0.0.1 (a free port) while the block runs: its root URL."""
    from aiohttp.test_utils import TestServer

    server = TestServer(app, host="127.0.0.1", port=0)
    await server.start_server()
    try:
        yield str(server.make_url("/"))
    finally:
        await server.close()


def chat_app(handle: Callable[[Any], Any]) -> Any:
    """An aiohttp application whose only route is `POST /v1/chat/completions`, answered by `handle`."""
    from aiohttp import web

    app = web.Application()
    app.router.add_post("/v1/chat/completions", handle)
    return app


async def one_token_reply(request: Any) -> Any:
    """A streamed chat answer of one token ("ok"), its usage and [DONE], as an OpenAI server sends them."""
    import json

    from aiohttp import web

    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await resp.prepare(request)
    chunk = {"choices": [{"index": 0, "delta": {"content": "ok"}, "finish_reason": "stop"}]}
    usage = {"choices": [], "usage": {"prompt_tokens": 2, "completion_tokens": 1}}
    await resp.write(f"data: {json.dumps(chunk)}\n\ndata: {json.dumps(usage)}\n\ndata: [DONE]\n\n".encode())
    await resp.write_eof()
    return resp


class SimFace:
    """Sweeps on the simulator's HTTP face (`engine: {name: sim, face: http}`): real server processes, real
    HTTP, a real store. The `sim_face` fixture hands one out with an orphan check around the test."""

    def open(self, data: dict[str, Any], **options: Any) -> tuple[Any, str]:
        """Open a new sweep of config `data` (`options`: the rest of `open_sweep`, e.g. events) without running
        it: the sweep and the run id."""
        from specfrontier.config.load import parse_config
        from specfrontier.runs.sweep import open_sweep

        sweep, run_id = open_sweep(parse_config(data), None, resume=None, **options)
        return sweep, str(run_id)

    async def sweep(self, data: dict[str, Any], **options: Any) -> tuple[Store, str]:
        """Open a new sweep of config `data` and run it to its end: its store (open) and the run id."""
        sweep, run_id = self.open(data, **options)
        await sweep.run(run_id)
        return sweep.store, run_id


def trtllm_face_engine() -> dict[str, Any]:
    """An `engine:` block for TensorRT-LLM whose launcher is the simulator's face speaking trtllm-serve
    (`specfrontier.sim.trtllm_serve`, 20x faster than the simulated deployment)."""
    return {
        "name": "trtllm",
        "model": "/models/target",
        "speculative_model": "/models/eagle3",
        "launcher": [sys.executable, "-m", "specfrontier.sim.trtllm_serve"],
        "startup_timeout_s": 30,
        "extra_args": ["--sim_time_scale", "20"],
    }


@dataclass
class CountingServer:
    """A chat server (`counting_server` serves one) that answers every request after `hold_s`, or, with
    `gate_at`, holds requests until that many were in flight at once (`gate_timeout_s` at most), so a
    slow-starting worker on a busy machine cannot hide the peak; it counts the peak and the answers."""

    hold_s: float = 0.2
    gate_at: int | None = None
    url: str = ""
    open_now: int = 0
    peak: int = 0
    served: int = 0
    gate_timeout_s: float = 10.0
    gate: asyncio.Event = field(default_factory=asyncio.Event)

    async def handle(self, request: Any) -> Any:
        await request.read()
        self.open_now += 1
        self.peak = max(self.peak, self.open_now)
        if self.gate_at is not None:
            if self.open_now >= self.gate_at:
                self.gate.set()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.gate.wait(), timeout=self.gate_timeout_s)
        else:
            await asyncio.sleep(self.hold_s)
        self.open_now -= 1
        self.served += 1
        return await one_token_reply(request)


@contextlib.asynccontextmanager
async def counting_server(**options: Any) -> AsyncIterator[CountingServer]:
    """A `CountingServer(**options)` served while the block runs; its gate opens at the end, so no handler is
    left waiting."""
    state = CountingServer(**options)
    async with serving(chat_app(state.handle)) as url:
        state.url = url
        try:
            yield state
        finally:
            state.gate.set()


def chmod_binds() -> bool:
    """Whether chmod 0444 stops this process writing a file: False for root (or any process with
    CAP_DAC_OVERRIDE), where permission cases must use SQLite's own read-only switches instead."""
    import shutil
    import tempfile
    from pathlib import Path

    probe = Path(tempfile.mkdtemp()) / "probe"
    probe.write_bytes(b"")
    probe.chmod(0o444)
    try:
        with probe.open("wb"):
            return False
    except PermissionError:
        return True
    finally:
        shutil.rmtree(probe.parent)


def free_port() -> int:
    """A port nobody listens on now (bound and released on 127.0.0.1), for a config's `deploy.port`."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_printed_command(text: str, health_url: str, timeout_s: float) -> subprocess.Popen[bytes]:
    """Paste `text` (a command as printed, `VAR=value ... command`) into bash, in its own process group,
    and wait until `health_url` answers 200: the server's process, which the caller stops with
    `stop_group`. Fails the test (stopping the group first) when the server exits or is not ready in time."""
    import time
    import urllib.error
    import urllib.request

    proc = subprocess.Popen(
        ["bash", "-c", text],  # exactly as pasted (bash runs a lone command in its own place)
        start_new_session=True,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            err = proc.stderr.read().decode(errors="replace")[-2000:] if proc.stderr else ""
            stop_group(proc)
            pytest.fail(f"the printed command exited with status {proc.returncode}: {text}\n{err}")
        try:
            with urllib.request.urlopen(health_url, timeout=2) as resp:
                if resp.status == 200:
                    return proc
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.2)
    stop_group(proc)
    pytest.fail(f"the printed command was not ready at {health_url} within {timeout_s} s: {text}")


def stop_group(proc: subprocess.Popen[bytes]) -> None:
    """Stop the process group `start_printed_command` started (TERM, then KILL after 10 s) and reap it."""
    import os
    import signal

    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        try:
            proc.wait(timeout=10)
            break
        except subprocess.TimeoutExpired:
            continue
    proc.wait()
    if proc.stderr is not None:
        proc.stderr.close()
    with contextlib.suppress(ProcessLookupError):  # the group's other members, if the server left any
        os.killpg(proc.pid, signal.SIGKILL)


def run_bench(options: Any) -> str:
    """`bench` in-process on `options` (a `runs.bench.BenchOptions`): open, measure every cell, close the
    store; the run's id."""
    import asyncio

    from specfrontier.runs.bench import open_bench

    async def go() -> str:
        bench, run_id = await open_bench(options)
        await bench.run(run_id)
        bench.store.close()
        return str(run_id)

    return asyncio.run(go())
