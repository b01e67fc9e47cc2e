"""Tiny builders shared by the unit tests (importable because pytest puts tests/ on the path)."""

from __future__ import annotations

import contextlib
import importlib.util
import re
import subprocess
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from specfrontier.cli import main
from specfrontier.records import RequestRecord
from specfrontier.store import Store

MS = 1_000_000  # ns per ms
BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


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
    from specfrontier.analysis import load_run  # analysis only for the tests that build runs

    store = Store(path)
    run_id = store.create_run(engine=engine, config=config or {}, environment=environment or {})
    for pos, (name, params) in enumerate(settings.items()):
        store.add_setting(run_id, setting_id=name, position=pos, name=name, params=params, speculative=bool(params))
        store.update_setting(run_id, name, status="ok", command=(*command, name), startup_s=0.4)
        for rep, agg in enumerate(aggs.get(name, [])):
            store.record_cell(
                run_id,
                setting_id=name,
                workload="w",
                concurrency=1,
                repeat=rep,
                requests=[record_ms(0, 100, 1000, agg)],
                counters=None,
                acceptance_source=None,
            )
    data = load_run(store, run_id)
    store.close()
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
    store = Store(path)
    run_id = store.create_run(engine="external", config=config or {}, environment={"engine_version": "x"})
    for pos, (name, by_level) in enumerate(cells.items()):
        store.add_setting(run_id, setting_id=name, position=pos, name=name, params={}, speculative=pos > 0)
        store.update_setting(run_id, name, status="done", command=["srv", name])
        for c, requests in by_level.items():
            store.record_cell(
                run_id,
                setting_id=name,
                workload="w",
                concurrency=c,
                repeat=0,
                requests=requests,
                counters=None,
                acceptance_source=None,
                client_health=client_health(name, c) if client_health is not None else None,
            )
    return store, run_id


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
