"""Fault matrix, servers: a server that fails (at start, mid-run, by stalling, by garbling its streams,
by a signal), another program on its port, a server that forks a child, and the tool itself killed or
interrupted. Each case runs the real CLI (or the sweep in-process where a port must be forced) against
the simulator's HTTP face, a real subprocess speaking SGLang's interface, and checks:
- the record: exit code, the one line that names cause and fix, the stored run and setting status;
- the rows: no cell lost or duplicated, against a clean run of the same config (`clean_rows`);
- no process left (the conftest fixture, which also covers the server's forked children).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from tests.faults.conftest import (
    MatrixEntry,
    Rows,
    checkpointed_run,
    cli,
    count_rows,
    json_report,
    latest_run,
    line_starting,
    run_status,
    sim_config,
    start_cli,
    tagged_processes,
    tune,
    wait_for_no_tagged_processes,
    write_config,
)

from specfrontier.config.load import parse_config
from specfrontier.runs.sweep import open_sweep
from specfrontier.sim.serve import FORKED_CHILD_MARK
from specfrontier.store import Store

pytestmark = pytest.mark.slow

PROMPTS = 4
"""builtin:cpu-mix has 4 prompts: a cell at C=1 or 2 with rounds_per_cell 2 sends 4 requests."""
FIRST_AND_WARMUP = 1 + 2
"""Requests a freshly launched server answers before its first cell: the cold-start one and warmup (1 x C=2)."""


def _settings(steps2_args: list[str]) -> list[dict[str, Any]]:
    return [{"name": "no-spec"}, {"name": "steps2", "algorithm": "EAGLE3", "num_steps": 2, "extra_args": steps2_args}]


def _resume(work: Path, store: Path, run_id: str) -> subprocess.CompletedProcess[str]:
    return cli("tune", "--resume", run_id, "--store", str(store), "--quiet", cwd=work, timeout=240)


def _settings_status(store: Path, run_id: str) -> dict[str, tuple[str, str]]:
    return {s.name: (s.status, s.error or "") for s in Store(store).settings(run_id)}


def _same_rows(rows: Rows, clean: Rows) -> None:
    """Every cell of the clean run is stored exactly once, with as many requests."""
    assert rows.cell_keys == clean.cell_keys
    assert rows.requests_per_cell == clean.requests_per_cell
    assert len(set(rows.cell_keys)) == len(rows.cell_keys)


# -- a server that fails ----------------------------------------------------------------------------


def test_crash_mid_run_is_partial_evidence_never_recommended_and_resume_completes_it(
    tmp_path: Path, clean_rows: Rows, matrix: MatrixEntry
) -> None:
    store = tmp_path / "s.db"
    once = tmp_path / "crashed-once"
    crash_at = FIRST_AND_WARMUP + PROMPTS + 2  # in the first repeat's C=2 cell
    knobs = ["--crash-after", str(crash_at), "--crash-once-file", str(once)]
    done = tune(tmp_path, sim_config(store, _settings(knobs)))
    assert done.returncode == 3, done.stderr
    line = line_starting(done.stderr, "INCOMPLETE:")
    assert "steps2: server exited with status 1 during the cell C=2" in line and "--resume" in line
    run_id = latest_run(store)
    assert run_status(store, run_id) == "incomplete"
    assert _settings_status(store, run_id)["steps2"][0] == "failed"
    partial = count_rows(store)
    assert partial.cell_keys == tuple(k for k in clean_rows.cell_keys if k[0] == "no-spec" or k[2:] == (1, 0))
    report = json_report(tmp_path, store, run_id)
    assert {r["setting"] for r in report["recommendations"]} == {"no-spec"}  # steps2 was faster, but crashed
    assert all(not c["complete"] for c in report["cells"] if c["setting"]["name"] == "steps2")

    resumed = _resume(tmp_path, store, run_id)
    assert resumed.returncode == 0, resumed.stderr
    assert run_status(store, run_id) == "done"
    _same_rows(count_rows(store), clean_rows)
    assert {r["setting"] for r in json_report(tmp_path, store, run_id)["recommendations"]} == {"steps2"}
    matrix.rows(kept=partial, after=count_rows(store), clean=clean_rows)


def test_every_setting_failing_at_start_exits_1_with_no_evidence(tmp_path: Path, matrix: MatrixEntry) -> None:
    store = tmp_path / "s.db"
    data = sim_config(store, [{"name": "no-spec", "extra_args": ["--fail-at-start"]}])
    done = tune(tmp_path, data)
    assert done.returncode == 1, done.stderr
    line = line_starting(done.stderr, "FAILED:")
    assert "no-spec: server exited with status 1 before it was ready" in line
    run_id = latest_run(store)
    assert run_status(store, run_id) == "failed"
    assert count_rows(store).cells == 0
    matrix.rows(after=count_rows(store))


def test_start_failures_are_recorded_and_the_sweep_goes_on(tmp_path: Path, matrix: MatrixEntry) -> None:
    """OOM above a capacity, a server that never becomes healthy, and one slow to start (which is fine)."""
    store = tmp_path / "s.db"
    settings = [
        {"name": "no-spec", "extra_args": ["--slow-start", "2"]},
        {"name": "oom", "algorithm": "EAGLE3", "num_steps": 1, "max_running_requests": 40,
         "extra_args": ["--oom-above", "10"]},
        {"name": "hangs", "extra_args": ["--hang"]},
    ]  # fmt: skip
    data = sim_config(store, settings)
    data["engine"]["startup_timeout_s"] = 8
    done = tune(tmp_path, data)
    assert done.returncode == 3, done.stderr
    run_id = latest_run(store)
    status = _settings_status(store, run_id)
    assert status["no-spec"][0] == "done"
    assert Store(store).settings(run_id)[0].startup_s is not None
    assert (Store(store).settings(run_id)[0].startup_s or 0) >= 2.0
    assert status["oom"][0] == "failed" and "out of memory" in (Store(store).settings(run_id)[1].log_tail or "").lower()
    assert status["hangs"][0] == "failed" and "not ready" in status["hangs"][1]
    assert {k[0] for k in count_rows(store).cell_keys} == {"no-spec"}
    assert count_rows(store).cells == 4
    matrix.rows(after=count_rows(store))


def test_a_stalled_server_is_abandoned_after_consecutive_timeouts(tmp_path: Path, matrix: MatrixEntry) -> None:
    store = tmp_path / "s.db"
    data = sim_config(store, _settings(["--stall-stream-after", "3"]), request_timeout_s=1.0)
    started = time.monotonic()
    done = tune(tmp_path, data)
    elapsed = time.monotonic() - started
    assert done.returncode == 3, done.stderr
    line = line_starting(done.stderr, "INCOMPLETE:")
    assert "stopped answering: 3 requests in a row timed out after 1 s each" in line
    run_id = latest_run(store)
    assert _settings_status(store, run_id)["steps2"][0] == "failed"
    assert {k[0] for k in count_rows(store).cell_keys} == {"no-spec"}
    # The cold-start request, then the warmup's two: abandoned after ~2 timeouts of 1 s, not 16 requests x 1 s.
    assert elapsed < 60
    matrix.rows(after=count_rows(store))


def test_garbled_streams_fail_the_setting_instead_of_storing_empty_cells(tmp_path: Path, matrix: MatrixEntry) -> None:
    store = tmp_path / "s.db"
    done = tune(tmp_path, sim_config(store, _settings(["--malformed-sse"])))
    assert done.returncode == 3, done.stderr
    line = line_starting(done.stderr, "INCOMPLETE:")
    assert "steps2: every request of warmup" in line and "malformed SSE data" in line
    assert {k[0] for k in count_rows(store).cell_keys} == {"no-spec"}
    matrix.rows(after=count_rows(store))


def test_a_drafter_that_is_silently_wrong_is_flagged_with_cause_and_fix(
    tmp_path: Path, clean_rows: Rows, matrix: MatrixEntry
) -> None:
    """The reported SGLang case: EAGLE-3 weights run under --speculative-algorithm EAGLE start, serve and accept
    nothing, with no error. The face's profile ships an EAGLE-3 head (`model.draft_head`), so an EAGLE setting
    drafts tokens the target never accepts: the run completes (evidence, exit 0) and the report names the
    setting, the evidence and SGLang's fix; the correct EAGLE3 setting is not flagged."""
    store = tmp_path / "s.db"
    settings = [{"name": "no-spec"}, {"name": "wrong-head", "algorithm": "EAGLE", "num_steps": 2}]
    done = tune(tmp_path, sim_config(store, settings))
    assert done.returncode == 0, done.stderr
    run_id = latest_run(store)
    report = json_report(tmp_path, store, run_id)
    found = report["misconfiguration"]
    assert [(m["setting"], m["check"]) for m in found] == [("wrong-head", "drafts_rejected")], found
    assert "acceptance length 1.000" in found[0]["evidence"]
    assert "algorithm to the head's kind (here likely EAGLE3)" in found[0]["cause"]
    terminal = cli("report", run_id, "--store", str(store), cwd=tmp_path)
    assert "wrong-head: likely misconfigured" in " ".join(terminal.stdout.split())
    rows = count_rows(store)  # the clean run's shape (its speculative setting has another name)
    assert (rows.cells, rows.requests, len(set(rows.cell_keys))) == (clean_rows.cells, clean_rows.requests, 8)
    matrix.rows(after=rows, clean=clean_rows)

    good = tmp_path / "good.db"
    settings = [{"name": "no-spec"}, {"name": "right-head", "algorithm": "EAGLE3", "num_steps": 2}]
    assert tune(tmp_path, sim_config(good, settings)).returncode == 0
    assert json_report(tmp_path, good, latest_run(good))["misconfiguration"] == []


def _fake_llama_server(path: Path, sig: str) -> Path:
    """An executable that answers llama-server's --help/--version probes, then dies by `sig` when launched."""
    path.write_text(
        "#!/bin/sh\n"
        'case "$1" in\n'
        '  --help) echo "--port N  --host H  --threads N  --ctx-size N  --parallel N  --metrics"; exit 0;;\n'
        '  --version) echo "version: 1 (fake)"; exit 0;;\n'
        "esac\n"
        f"kill -{sig} $$\n"
    )
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def test_a_server_killed_by_sigill_is_named_with_its_cause(tmp_path: Path) -> None:
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")
    store = tmp_path / "s.db"
    data = {
        "engine": {"binary": str(_fake_llama_server(tmp_path / "llama-server", "ILL")), "model": str(model)},
        "settings": [{"name": "baseline"}],
        "concurrency": [1],
        "repeats": 1,
        "store": str(store),
    }
    done = tune(tmp_path, data)
    assert done.returncode == 1, done.stderr
    line = line_starting(done.stderr, "FAILED:")
    assert "was killed by SIGILL (illegal instruction: the binary uses CPU instructions this host lacks" in line
    assert "status -4" not in done.stderr


# -- another program on the port --------------------------------------------------------------------


class _Impostor:
    """An HTTP server that answers 200 to everything on one port, counting what it was asked."""

    def __init__(self) -> None:
        self.requests: list[str] = []
        self.runner: web.AppRunner | None = None

    async def start(self) -> int:
        async def any_request(request: web.Request) -> web.Response:
            self.requests.append(f"{request.method} {request.path}")
            return web.json_response({"ok": True})

        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", any_request)
        self.runner = web.AppRunner(app)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        server = site._server
        assert server is not None
        port: int = server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        return port

    async def stop(self) -> None:
        if self.runner is not None:
            await self.runner.cleanup()


@pytest.mark.parametrize("taken", [1, 2], ids=["first-launch", "every-launch"])
async def test_a_port_held_by_another_server_is_never_measured(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, taken: int, matrix: MatrixEntry
) -> None:
    """The launched server binds its port only after 1.5 s (like SGLang loading weights); meanwhile the
    impostor answers the health check. Readiness must see the port is not ours: relaunch on a new port
    once, and fail the setting (naming the impostor) if that port is taken too."""
    import specfrontier.process.launch as server_module
    import specfrontier.runs.sweep as sweep_module

    impostor = _Impostor()
    port = await impostor.start()
    handed: list[int] = []

    def free_port() -> int:
        chosen = port if len(handed) < taken else server_module.free_port()
        handed.append(chosen)
        return chosen

    monkeypatch.setattr(sweep_module, "free_port", free_port)
    data = sim_config(tmp_path / "s.db", [{"name": "no-spec", "extra_args": ["--bind-delay", "1.5"]}])
    try:
        sweep, run_id = open_sweep(parse_config(data), None, resume=None)
        outcome = await sweep.run(run_id)
    finally:
        await impostor.stop()
    assert not any(r.startswith("POST") for r in impostor.requests), impostor.requests
    (setting,) = sweep.store.settings(run_id)
    if taken == 1:
        assert outcome.status == "done" and setting.status == "done"
        assert handed[0] == port and handed[1] != port
        assert count_rows(tmp_path / "s.db").cells == 4
    else:
        assert outcome.status == "failed" and setting.status == "failed"
        assert f"port 127.0.0.1:{port} answered, but it is held by pid {os.getpid()}" in (setting.error or "")
        assert count_rows(tmp_path / "s.db").cells == 0
    matrix.rows(after=count_rows(tmp_path / "s.db"))


# -- a server that forks, and the tool killed or interrupted ---------------------------------------


def _forked_children() -> list[int]:
    found = []
    for pid in tagged_processes():
        try:
            if FORKED_CHILD_MARK.encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
                found.append(pid)
        except OSError:
            continue
    return found


def _wait_for(predicate: Any, proc: subprocess.Popen[bytes], what: str, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert proc.poll() is None, (what, proc.communicate())
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def test_a_forking_server_is_stopped_with_its_children(tmp_path: Path, clean_rows: Rows, matrix: MatrixEntry) -> None:
    store = tmp_path / "s.db"
    done = tune(tmp_path, sim_config(store, _settings(["--fork-child"])))
    assert done.returncode == 0, done.stderr
    _same_rows(count_rows(store), clean_rows)
    matrix.rows(after=count_rows(store), clean=clean_rows)
    assert not _forked_children()


def test_sigkill_of_the_tool_leaves_no_server_nor_forked_child_and_resume_completes(
    tmp_path: Path, clean_rows: Rows, matrix: MatrixEntry
) -> None:
    store = tmp_path / "s.db"
    config = write_config(tmp_path / "tune.yaml", sim_config(store, _settings(["--fork-child"])))
    proc = start_cli("tune", "--config", str(config), "--quiet", cwd=tmp_path)
    _wait_for(lambda: bool(_forked_children()), proc, "the forked child of steps2")
    _wait_for(lambda: count_rows(store).cells >= 5, proc, "a cell of steps2")
    children = _forked_children()
    proc.kill()  # SIGKILL: no cleanup runs in the tool
    proc.communicate(timeout=30)
    assert wait_for_no_tagged_processes(15) == [], "server, forked child or guard survived the tool"
    assert all(not Path(f"/proc/{pid}").exists() for pid in children)
    run_id = latest_run(store)
    listed = json.loads(cli("runs", "--store", str(store), "--json", cwd=tmp_path).stdout)
    assert [r["status"] for r in listed if r["id"] == run_id] == ["interrupted"]
    kept = count_rows(store)
    resumed = _resume(tmp_path, store, run_id)
    assert resumed.returncode == 0, resumed.stderr
    _same_rows(count_rows(store), clean_rows)
    matrix.rows(kept=kept, after=count_rows(store), clean=clean_rows)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP], ids=["SIGINT", "SIGTERM", "SIGHUP"])
def test_a_signal_interrupts_cleanly_and_resume_completes(
    tmp_path: Path, clean_rows: Rows, sig: signal.Signals, matrix: MatrixEntry
) -> None:
    store = tmp_path / "s.db"
    config = write_config(tmp_path / "tune.yaml", sim_config(store))
    proc = start_cli("tune", "--config", str(config), "--quiet", cwd=tmp_path)
    _wait_for(lambda: count_rows(store).cells >= 2, proc, "two cells")
    proc.send_signal(sig)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr
    line = line_starting(stderr.decode(), "interrupted:")
    assert "every finished cell is stored; resume with: specfrontier tune --resume" in line
    run_id = latest_run(store)
    assert run_status(store, run_id) == "interrupted"
    kept = count_rows(store)
    assert kept.cells >= 2
    resumed = _resume(tmp_path, store, run_id)
    assert resumed.returncode == 0, resumed.stderr
    _same_rows(count_rows(store), clean_rows)
    matrix.rows(kept=kept, after=count_rows(store), clean=clean_rows)


def test_a_closed_stdout_interrupts_with_a_message_and_resume_completes(
    tmp_path: Path, clean_rows: Rows, matrix: MatrixEntry
) -> None:
    """`specfrontier tune | head -1`: the reader goes away after one line."""
    store = tmp_path / "s.db"
    config = write_config(tmp_path / "tune.yaml", sim_config(store))
    proc = start_cli("tune", "--config", str(config), cwd=tmp_path)
    assert proc.stdout is not None
    proc.stdout.readline()
    proc.stdout.close()  # what `head -1` does after its line
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 130, stderr
    line = line_starting(stderr.decode(), "interrupted:")
    assert "stdout was closed (broken pipe)" in line and "--resume" in line
    run_id = latest_run(store)
    assert run_status(store, run_id) == "interrupted"
    kept = count_rows(store)
    resumed = _resume(tmp_path, store, run_id)
    assert resumed.returncode == 0, resumed.stderr
    _same_rows(count_rows(store), clean_rows)
    matrix.rows(kept=kept, after=count_rows(store), clean=clean_rows)


def test_two_tunes_on_one_store_keep_their_rows_apart(tmp_path: Path, clean_rows: Rows, matrix: MatrixEntry) -> None:
    store = tmp_path / "s.db"
    config = write_config(tmp_path / "tune.yaml", sim_config(store))
    procs = [start_cli("tune", "--config", str(config), "--quiet", cwd=tmp_path) for _ in range(2)]
    for proc in procs:
        _, stderr = proc.communicate(timeout=240)
        assert proc.returncode == 0, stderr
    listed = json.loads(cli("runs", "--store", str(store), "--json", cwd=tmp_path).stdout)
    assert len(listed) == 2 and {r["status"] for r in listed} == {"done"}
    for run in listed:
        _same_rows(count_rows(store, run["id"]), clean_rows)
    matrix.rows(after=count_rows(store), clean=clean_rows)


# -- bench against a server that fails every request -------------------------------------------------


def test_bench_where_every_request_fails_exits_1(tmp_path: Path, matrix: MatrixEntry) -> None:
    """A plain HTTP file server: /v1/models is a 404 (allowed), every completion POST a 501."""
    from specfrontier.process.launch import free_port

    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1", "--directory", str(tmp_path)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            with socket.socket() as sock:
                if sock.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.1)
        probe = cli("bench", "--url", f"http://127.0.0.1:{port}", "--concurrency", "1", "--repeats", "1",
                    "--store", str(tmp_path / "b.db"), "--quiet", cwd=tmp_path)  # fmt: skip
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=10)
    assert probe.returncode == 1, probe.stderr
    line = line_starting(probe.stderr, "EngineResponseError:")
    assert "every request of the warmup failed" in line and "http 501" in line
    run_id = latest_run(tmp_path / "b.db")
    assert run_status(tmp_path / "b.db", run_id) == "failed"
    assert count_rows(tmp_path / "b.db").cells == 0
    matrix.rows(after=count_rows(tmp_path / "b.db"))


def test_a_tool_stopped_after_a_settings_last_cell_leaves_it_done_after_resume(
    tmp_path: Path, clean_rows: Rows, matrix: MatrixEntry
) -> None:
    store, run_id = checkpointed_run(tmp_path, sim_config(tmp_path / "s.db"))
    # The state a kill, a crash or a lost Ray node leaves between storing a setting's last cell and marking
    # the setting done: every cell stored, the setting still `running`, the run not finished.
    Store(store).update_setting(run_id, "steps2", status="running")
    Store(store).set_run_status(run_id, "incomplete")
    kept = count_rows(store)
    launches = _settings_launches(store, run_id)
    resumed = _resume(tmp_path, store, run_id)
    assert resumed.returncode == 0, resumed.stderr
    assert run_status(store, run_id) == "done"
    assert _settings_status(store, run_id)["steps2"] == ("done", "")  # was left `running` before the fix
    assert _settings_launches(store, run_id) == launches  # nothing missing: nothing launched again
    _same_rows(count_rows(store), clean_rows)
    matrix.rows(kept=kept, after=count_rows(store), clean=clean_rows)


def _settings_launches(store: Path, run_id: str) -> dict[str, tuple[float | None, str | None]]:
    return {s.name: (s.startup_s, s.log_path) for s in Store(store).settings(run_id)}
