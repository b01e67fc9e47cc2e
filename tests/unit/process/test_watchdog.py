"""The guard process (`process.watchdog`): it stops a server's whole group when the tool dies without doing
it, and leaves the group alone once the tool said it stopped it."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

from builders import FORKING_CHILD, wait_for
from specfrontier.process.launch import group_alive
from specfrontier.process.watchdog import guard


def test_guard_stops_the_group_when_the_pipe_closes_without_done() -> None:
    """EOF without `done` is the tool's death: the guard stops the whole group it was told to watch."""
    leader = subprocess.Popen([sys.executable, "-c", FORKING_CHILD], stdout=subprocess.PIPE, start_new_session=True)
    assert leader.stdout is not None
    grandchild = int(leader.stdout.readline().split()[1])
    assert guard(iter([f"watch {leader.pid}\n"]), grace_s=1.0) == leader.pid
    leader.wait(timeout=10)
    leader.stdout.close()
    wait_for(lambda: not group_alive(leader.pid))
    assert not Path(f"/proc/{grandchild}").exists() or "Z" in Path(f"/proc/{grandchild}/stat").read_text().split()[2]


def test_guard_leaves_the_group_alone_after_done() -> None:
    """`done` means the tool stopped the group itself: the id may be reused later and must not be touched."""
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
    wait_for(lambda: len((tmp_path / "s.log").read_text().split()) == 2)
    assert group_alive(pgid)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)
    proc.stdout.close()
    wait_for(lambda: not group_alive(pgid), timeout_s=15)
