"""ServerProcess lifecycle with stub children (no engine): group kill, readiness, crash vs timeout."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

from specfrontier.errors import EngineStartError, EngineTimeout
from specfrontier.process.launch import ServerProcess, free_port, group_alive, tail_of

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
    assert str(info.value).split("\n")[0].count(f"(log: {tmp_path / 's.log'})") == 1  # named once, not twice


async def test_wait_ready_times_out_on_a_live_but_silent_process(tmp_path: Path) -> None:
    server = ServerProcess([sys.executable, "-c", "import time; time.sleep(60)"], tmp_path / "s.log")
    server.start()
    try:
        with pytest.raises(EngineTimeout, match="not ready"):
            await server.wait_ready(f"http://127.0.0.1:{free_port()}/health", timeout_s=0.5)
    finally:
        server.stop()


async def test_wait_exited_sees_an_exit_that_comes_after_the_first_look(tmp_path: Path) -> None:
    """A crashing server closes its sockets before it can be reaped: one look (`exited`) finds it alive,
    a bounded wait sees its status; a server that lives on costs the wait and reads None."""
    server = ServerProcess([sys.executable, "-c", "import time, os; time.sleep(0.5); os._exit(3)"], tmp_path / "s.log")
    server.start()
    try:
        assert server.exited() is None
        assert await server.wait_exited(10.0) == 3
    finally:
        server.stop()
    alive = ServerProcess([sys.executable, "-c", "import time; time.sleep(60)"], tmp_path / "t.log")
    alive.start()
    try:
        assert await alive.wait_exited(0.3) is None
        assert await alive.wait_exited(0.0) is None
    finally:
        alive.stop()


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


# A health endpoint that answers only after `delay` seconds (SGLang's /health_generate runs a one-token
# generation and sleeps in 1 s steps before it answers: 0.5.23 srt/entrypoints/http_server.py:775-785);
# `exit_after` > 0: the process dies that long after start, while a probe is in flight.
SLOW_HEALTH = """
import http.server, os, sys, threading, time
port, delay, exit_after = int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3])
if exit_after > 0:
    threading.Timer(exit_after, lambda: os._exit(7)).start()
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        time.sleep(delay)
        self.send_response(200)
        self.end_headers()
    def log_message(self, *a):
        pass
http.server.ThreadingHTTPServer(("127.0.0.1", port), H).serve_forever()
"""


async def _wait_ready_on_slow_health(tmp_path: Path, delay: str, exit_after: str, path: str, **wait: float) -> float:
    """Start SLOW_HEALTH, wait for it as the sweep does (`wait`: wait_ready's timeouts), stop it."""
    port = free_port()
    server = ServerProcess([sys.executable, "-c", SLOW_HEALTH, str(port), delay, exit_after], tmp_path / "s.log")
    server.start()
    try:
        return await server.wait_ready(f"http://127.0.0.1:{port}{path}", **wait)
    finally:
        server.stop()


async def test_wait_ready_finds_a_server_whose_health_takes_3_s(tmp_path: Path) -> None:
    """Issue 37: each probe had 1 s, so a health answer that takes longer was never seen and a ready SGLang
    timed out after startup_timeout_s. The default probe now waits long enough, the process still watched."""
    startup_s = await _wait_ready_on_slow_health(tmp_path, "3", "0", "/health_generate", timeout_s=30)
    assert 3.0 <= startup_s < 30


async def test_wait_ready_sees_an_exit_while_a_long_probe_is_in_flight(tmp_path: Path) -> None:
    """A probe may take long (the adapter's `health_timeout_s`: SGLang 30 s), but a process that dies meanwhile
    is reported as it dies, not when the probe gives up."""
    started = time.monotonic()
    with pytest.raises(EngineStartError) as info:
        await _wait_ready_on_slow_health(tmp_path, "60", "1.5", "/health", timeout_s=120, probe_timeout_s=60)
    assert not isinstance(info.value, EngineTimeout)
    assert "status 7" in str(info.value)
    assert time.monotonic() - started < 10


async def test_wait_ready_deadline_ends_a_probe_in_flight(tmp_path: Path) -> None:
    """The overall deadline holds while a probe is in flight: a health answer slower than the whole budget
    is a timeout at the deadline."""
    started = time.monotonic()
    with pytest.raises(EngineTimeout, match="not ready"):
        await _wait_ready_on_slow_health(tmp_path, "60", "0", "/health", timeout_s=1.0, probe_timeout_s=60)
    assert time.monotonic() - started < 5


def test_missing_binary_is_a_start_error_naming_the_fix(tmp_path: Path) -> None:
    server = ServerProcess([str(tmp_path / "no-such-binary")], tmp_path / "s.log")
    with pytest.raises(EngineStartError, match=r"engine\.binary"):
        server.start()


def test_tail_of_returns_last_lines_and_tolerates_missing_files(tmp_path: Path) -> None:
    log = tmp_path / "x.log"
    log.write_text("\n".join(f"line {i}" for i in range(100)))
    assert tail_of(log, 3).splitlines() == ["line 97", "line 98", "line 99"]
    assert tail_of(tmp_path / "missing.log") == ""


# -- the guard (specfrontier.process.watchdog) and the port owner ------------------------------------------


def test_guard_stops_the_group_when_the_pipe_closes_without_done() -> None:
    """EOF without `done` is the tool's death: the guard stops the whole group it was told to watch."""
    import subprocess

    from specfrontier.process.watchdog import guard

    leader = subprocess.Popen([sys.executable, "-c", FORKING_CHILD], stdout=subprocess.PIPE, start_new_session=True)
    assert leader.stdout is not None
    grandchild = int(leader.stdout.readline().split()[1])
    assert guard(iter([f"watch {leader.pid}\n"]), grace_s=1.0) == leader.pid
    leader.wait(timeout=10)
    leader.stdout.close()
    _wait_for(lambda: not group_alive(leader.pid))
    assert not Path(f"/proc/{grandchild}").exists() or "Z" in Path(f"/proc/{grandchild}/stat").read_text().split()[2]


def test_guard_leaves_the_group_alone_after_done() -> None:
    """`done` means the tool stopped the group itself: the id may be reused later and must not be touched."""
    import subprocess

    from specfrontier.process.watchdog import guard

    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    try:
        assert guard(iter([f"watch {bystander.pid}\n", "done\n"]), grace_s=0.1) is None
        assert bystander.poll() is None
    finally:
        bystander.kill()
        bystander.wait()


def test_a_server_whose_tool_is_killed_is_stopped_by_its_guard(tmp_path: Path) -> None:
    """A tool process that starts a forking server and is then SIGKILLed: the server's group, the
    grandchild included (it has no parent-death signal), is gone soon after."""
    import signal
    import subprocess

    tool = tmp_path / "tool.py"
    tool.write_text(
        "import sys, time\n"
        "from pathlib import Path\n"
        "from specfrontier.process.launch import ServerProcess\n"
        f"server = ServerProcess([sys.executable, '-c', {FORKING_CHILD!r}], Path({str(tmp_path / 's.log')!r}))\n"
        "server.start()\n"
        "print(server.pid, flush=True)\n"
        "time.sleep(120)\n"
    )
    proc = subprocess.Popen([sys.executable, str(tool)], stdout=subprocess.PIPE)
    assert proc.stdout is not None
    pgid = int(proc.stdout.readline())
    _wait_for(lambda: len((tmp_path / "s.log").read_text().split()) == 2)
    assert group_alive(pgid)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)
    proc.stdout.close()
    _wait_for(lambda: not group_alive(pgid), timeout_s=15)


async def test_readiness_refuses_a_port_held_by_another_program(tmp_path: Path) -> None:
    """The health URL answers 200, but from a server this test runs, not from the launched process."""
    from aiohttp import web

    from specfrontier.errors import PortTakenError

    async def ok(request: web.Request) -> web.Response:
        return web.Response(text="ok")

    app = web.Application()
    app.router.add_get("/health", ok)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    site = web.TCPSite(runner, "127.0.0.1", port)
    await site.start()
    server = ServerProcess([sys.executable, "-c", "import time; time.sleep(60)"], tmp_path / "s.log")
    try:
        server.start()
        with pytest.raises(
            PortTakenError, match=rf"port 127.0.0.1:{port} answered, but it is held by pid {os.getpid()}"
        ):
            await server.wait_ready(f"http://127.0.0.1:{port}/health", timeout_s=10)
    finally:
        server.stop(grace_s=0.5)
        await runner.cleanup()


def test_port_ownership_reads_proc_listeners() -> None:
    """Ours when the listener belongs to the group, someone else's otherwise, unknown with no listener."""
    import socket

    from specfrontier.process.port_owner import port_ownership

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        mine = port_ownership(port, os.getpgid(0))
        other = port_ownership(port, 1)
    assert mine.ours is True
    assert other.ours is False and other.foreign_pids == (os.getpid(),)
    assert port_ownership(port, os.getpgid(0)).ours is None  # closed: no listener to judge


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        (1, "exited with status 1"),
        (-4, "was killed by SIGILL (illegal instruction: the binary uses CPU instructions this host lacks"),
        (-9, "was killed by SIGKILL (killed: most often the kernel's out-of-memory killer"),
        (-11, "was killed by SIGSEGV (segmentation fault"),
        (-200, "was killed by signal 200"),
    ],
)
def test_describe_exit_names_the_signal_and_its_usual_cause(code: int, expected: str) -> None:
    from specfrontier.process.launch import describe_exit

    assert describe_exit(code).startswith(expected)
