"""A child process that dies with its parent: the kernel's `PR_SET_PDEATHSIG`, set once for both kinds of
child the tool starts.

Why: when specfrontier is killed (SIGKILL: no cleanup runs), what it started must not live on: a server
leader (`process.launch`, set between fork and exec) must stop serving, and a load worker
(`load.workers`) must stop loading the server. The kernel sends the child SIGKILL when its parent goes.
"""

from __future__ import annotations

import ctypes
import signal
import sys

PR_SET_PDEATHSIG = 1
"""prctl(2)'s option number (linux/prctl.h)."""


def die_with_parent() -> None:  # pragma: no cover - runs in the child (between fork and exec, or a worker)
    """Ask the kernel to SIGKILL this process when its parent dies (Linux; elsewhere nothing).

    The signal fires when the *thread* that started the child exits, not the whole parent: a caller that
    starts children from a thread keeps that thread alive as long as they run (`load.workers` joins its
    workers before it returns)."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


__all__ = ["PR_SET_PDEATHSIG", "die_with_parent"]
