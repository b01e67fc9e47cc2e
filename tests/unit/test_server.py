"""ServerProcess lifecycle with stub children (no engine): group kill, readiness, crash vs timeout."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

from specfrontier.errors import EngineStartError, EngineTimeout
from specfrontier.server import ServerProcess, free_port, group_alive, tail_of

# A parent that forks a grandchild, prints both pids, and sleeps: stopping must reap both.
FORKING_CHILD = """
import os, sys, time
child = os.fork()
if child == 0:
    time.sleep(120)
    os._exit(0)
print(os.getpid(), child, flush=True)
time.sleep(120)
"""

# A parent that exits at once but leaves a grandchild running in the group.
ORPHANING_CHILD = """
import os, time
if os.fork() == 0:
    time.sleep(120)
    os._exit(0)
"""


def _wait_for(predicate, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        time.sleep(0.02)


def test_stop_kills_and_reaps_the_whole_group(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    server = ServerProcess([sys.executable, "-c", FORKING_CHILD], log)
    server.start()
    pgid = server.pid
    assert pgid is not None
    _wait_for(lambda: len(log.read_text().split()) == 2)
    leader, grandchild = (int(x) for x in log.read_text().split())
    assert leader == pgid
    assert os.getpgid(grandchild) == pgid  # same group: killpg reaches it
    server.stop(grace_s=0.5)
    _wait_for(lambda: not group_alive(pgid))
    assert not group_alive(pgid)
    server.stop()  # idempotent


def test_stop_kills_group_even_after_the_leader_exited(tmp_path: Path) -> None:
    server = ServerProcess([sys.executable, "-c", ORPHANING_CHILD], tmp_path / "s.log")
    server.start()
    pgid = server.pid
    assert pgid is not None
    _wait_for(lambda: server.exited() is not None)
    assert group_alive(pgid)  # the grandchild still runs although the leader is gone
    server.stop(grace_s=0.5)
    _wait_for(lambda: not group_alive(pgid))


async def test_wait_ready_reports_a_crash_with_exit_code_and_log_tail(tmp_path: Path) -> None:
    code = "import sys; print('loading model'); print('error: unknown argument --bogus', flush=True); sys.exit(3)"
    server = ServerProcess([sys.executable, "-c", code], tmp_path / "s.log")
    server.start()
    try:
        with pytest.raises(EngineStartError) as info:
            await server.wait_ready(f"http://127.0.0.1:{free_port()}/health", timeout_s=20)
    finally:
        server.stop()
    assert not isinstance(info.value, EngineTimeout)
    assert "status 3" in str(info.value)
    assert "unknown argument --bogus" in info.value.log_tail


async def test_wait_ready_times_out_on_a_live_but_silent_process(tmp_path: Path) -> None:
    server = ServerProcess([sys.executable, "-c", "import time; time.sleep(60)"], tmp_path / "s.log")
    server.start()
    try:
        with pytest.raises(EngineTimeout, match="not ready"):
            await server.wait_ready(f"http://127.0.0.1:{free_port()}/health", timeout_s=0.5)
    finally:
        server.stop()


async def test_wait_ready_waits_through_503_then_returns_startup_time(tmp_path: Path) -> None:
    port = free_port()
    # Answers 503 for the first 0.3 s (like llama-server loading a model), then 200.
    code = f"""
import http.server, time
start = time.monotonic()
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(503 if time.monotonic() - start < 0.3 else 200)
        self.end_headers()
    def log_message(self, *a):
        pass
http.server.HTTPServer(("127.0.0.1", {port}), H).serve_forever()
"""
    server = ServerProcess([sys.executable, "-c", code], tmp_path / "s.log")
    server.start()
    try:
        startup_s = await server.wait_ready(f"http://127.0.0.1:{port}/health", timeout_s=20)
    finally:
        server.stop()
    assert 0.3 <= startup_s < 20
    assert server.startup_s == startup_s


def test_missing_binary_is_a_start_error_naming_the_fix(tmp_path: Path) -> None:
    server = ServerProcess([str(tmp_path / "no-such-binary")], tmp_path / "s.log")
    with pytest.raises(EngineStartError, match=r"engine\.binary"):
        server.start()


def test_tail_of_returns_last_lines_and_tolerates_missing_files(tmp_path: Path) -> None:
    log = tmp_path / "x.log"
    log.write_text("\n".join(f"line {i}" for i in range(100)))
    assert tail_of(log, 3).splitlines() == ["line 97", "line 98", "line 99"]
    assert tail_of(tmp_path / "missing.log") == ""
