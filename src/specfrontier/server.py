"""Process lifecycle shared by every engine adapter.

A server is started in its own session (so its process group id is its pid), bound to 127.0.0.1 on a
free port, with stdout/stderr going to a log file. It is always stopped by signalling the whole group
and then reaping it, even if the leader has already exited: workers a server forked must not outlive
it. On Linux the child also asks the kernel to kill it if specfrontier dies (PR_SET_PDEATHSIG), so a
SIGKILLed tool leaves no server behind.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import aiohttp

from specfrontier.errors import EngineStartError, EngineTimeout

_PR_SET_PDEATHSIG = 1


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free right now (the server binds it a moment later)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def tail_of(path: Path, lines: int = 25) -> str:
    """The last lines of a log file (empty if it does not exist)."""
    try:
        with path.open("rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - 16384))
            text = fh.read().decode("utf-8", errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


class ServerProcess:
    """One server process group: start, wait until healthy, stop. Usable as a context manager."""

    def __init__(self, argv: Sequence[str], log_path: Path, *, env: dict[str, str] | None = None) -> None:
        self.argv = list(argv)
        self.log_path = log_path
        self._env = env
        self._proc: subprocess.Popen[bytes] | None = None
        self._started_ns = 0
        self.startup_s: float | None = None

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def start(self) -> None:
        """Spawn the server; never through a shell (arguments may come from a config file)."""
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log:
            self._started_ns = time.perf_counter_ns()
            try:
                self._proc = subprocess.Popen(
                    self.argv,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                    env=self._env,
                    preexec_fn=_die_with_parent,
                )
            except OSError as exc:
                raise EngineStartError(
                    f"server: argv[0] = {self.argv[0]!r}: cannot execute ({exc.strerror}); "
                    "fix: check engine.binary or run scripts/install.sh"
                ) from exc

    def exited(self) -> int | None:
        """The exit status if the leader has exited, else None."""
        return None if self._proc is None else self._proc.poll()

    async def wait_ready(self, url: str, *, timeout_s: float, poll_s: float = 0.05) -> float:
        """Poll `url` until it answers 200; return seconds from spawn to ready.

        A process that exits while we wait is a start failure (with its exit code and log tail);
        one that stays alive past `timeout_s` is a timeout. 503 ("Loading model") means keep waiting.
        """
        if self._proc is None:
            raise RuntimeError("wait_ready() before start()")
        deadline = time.monotonic() + timeout_s
        timeout = aiohttp.ClientTimeout(total=max(1.0, poll_s * 20))
        async with aiohttp.ClientSession(timeout=timeout) as session:
            while True:
                code = self.exited()
                if code is not None:
                    raise EngineStartError(
                        f"server exited with status {code} before it was ready",
                        log_path=self.log_path,
                        log_tail=tail_of(self.log_path),
                    )
                with contextlib.suppress(aiohttp.ClientError, asyncio.TimeoutError):
                    async with session.get(url) as resp:
                        if resp.status == 200:
                            self.startup_s = (time.perf_counter_ns() - self._started_ns) / 1e9
                            return self.startup_s
                if time.monotonic() > deadline:
                    raise EngineTimeout(
                        f"server not ready at {url} after {timeout_s:.0f} s; "
                        "fix: raise engine.startup_timeout_s or check the log",
                        log_path=self.log_path,
                        log_tail=tail_of(self.log_path),
                    )
                await asyncio.sleep(poll_s)

    def stop(self, grace_s: float = 5.0) -> None:
        """SIGTERM the group, wait up to `grace_s`, SIGKILL the group, reap. Idempotent.

        The group is signalled even when the leader already exited, because its children may not have.
        """
        proc = self._proc
        if proc is None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=grace_s)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        self._proc = None

    def __enter__(self) -> ServerProcess:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def group_alive(pgid: int) -> bool:
    """True if any process of the group still exists (used by tests to prove no orphan is left)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


__all__ = ["ServerProcess", "free_port", "group_alive", "tail_of"]
