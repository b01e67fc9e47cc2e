"""A guard process that stops a server's whole process group if specfrontier dies without doing it.

Why a separate process: the server leader gets `PR_SET_PDEATHSIG`, so the kernel kills it when the tool
dies, but that setting is not inherited by the processes the server forks (vLLM's engine core, SGLang's
scheduler and detokenizer). After a SIGKILL of the tool they would survive, re-parented to pid 1, holding
the GPU. Nothing inside a SIGKILLed process can run, so someone outside it must act: this guard.

Protocol (stdin is a pipe whose write end only the tool holds; nobody else inherits it):
- the tool writes `watch PGID\\n` right after the server is spawned;
- on a clean stop the tool stops the group itself, then writes `done\\n`: the guard exits without
  signalling anything (the group id may be reused later, so it must not be touched then);
- if the tool dies first, the kernel closes the pipe: the guard reads EOF and stops the group, SIGTERM
  then SIGKILL after a grace period, the same sequence `ServerProcess.stop` uses.

The guard runs in its own session, so a Ctrl-C on the terminal's foreground group does not reach it
before the tool has had its chance to clean up; it ignores SIGINT and SIGHUP for the same reason. It
imports nothing beyond the standard library, so it starts in tens of milliseconds.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
from collections.abc import Iterable

GRACE_S = 5.0


def group_alive(pgid: int) -> bool:
    """True if any process of the group still exists (a group without members cannot be signalled)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def wait_group_gone(pgid: int, deadline: float) -> None:
    """Poll until no process of the group is left or `deadline` (time.monotonic) passes."""
    while group_alive(pgid) and time.monotonic() < deadline:
        time.sleep(0.05)


def stop_group(pgid: int, grace_s: float = GRACE_S) -> None:
    """SIGTERM the group, wait up to `grace_s` for it to go, then SIGKILL whatever is left."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGTERM)
    wait_group_gone(pgid, time.monotonic() + grace_s)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def guard(lines: Iterable[bytes | str], grace_s: float = GRACE_S) -> int | None:
    """Follow the protocol on an iterator of lines; return the group stopped (None: nothing to stop)."""
    pgid: int | None = None
    for raw in lines:
        line = raw.decode() if isinstance(raw, bytes) else str(raw)
        words = line.split()
        if words[:1] == ["watch"] and len(words) == 2 and words[1].isdigit():
            pgid = int(words[1])
        elif words == ["done"]:
            return None
    if pgid is not None:  # EOF without `done`: the tool died holding a live server
        stop_group(pgid, grace_s)
    return pgid


def main() -> int:
    for sig in (signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    guard(sys.stdin.buffer)
    return 0


if __name__ == "__main__":
    sys.exit(main())
