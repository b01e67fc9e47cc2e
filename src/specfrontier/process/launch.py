"""Process lifecycle shared by every engine adapter.

A server is started in its own session (so its process group id is its pid), bound to 127.0.0.1 on a
free port, with stdout/stderr going to a log file. It is always stopped by signalling the whole group
and then reaping it, even if the leader has already exited: workers a server forked must not outlive
it. If specfrontier itself dies (even by SIGKILL, when no cleanup can run), two things stop the server:
the kernel kills the leader (PR_SET_PDEATHSIG), and a guard process (`specfrontier.process.watchdog`) sees the
tool's end of a pipe close and stops the whole group, the processes the server forked included.

Readiness is proven, not assumed: the health URL must answer 200 AND every socket listening on the port
must belong to the launched group (`port_owner`), so a program that took the port first is never
measured in the server's place. An exit before readiness is described by its cause (a signal is named,
with what it usually means), not by a raw status number.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, NoReturn
from urllib.parse import urlsplit

import aiohttp

from specfrontier.errors import EngineStartError, EngineTimeout, PortTakenError
from specfrontier.process.port_owner import port_ownership
from specfrontier.process.watchdog import group_alive, wait_group_gone
from specfrontier.units import ns_to_s

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


_SIGNAL_CAUSES = {
    signal.SIGILL: "illegal instruction: the binary uses CPU instructions this host lacks (for llama.cpp, a "
    "build made for another CPU); fix: rebuild for this host with scripts/install.sh (portable build)",
    signal.SIGKILL: "killed: most often the kernel's out-of-memory killer (see `dmesg`), or the engine's own "
    "supervisor after one of its processes failed (SGLang then kills its process tree: see the log's cause); "
    "fix: lower the concurrency, context or model size, or free memory",
    signal.SIGSEGV: "segmentation fault in the engine; fix: see the server log, try another engine version",
    signal.SIGABRT: "aborted by the engine itself (a failed assertion or fatal error); fix: see the server log",
    signal.SIGBUS: "bus error (often a truncated or changed model file); fix: check the model file",
    signal.SIGTERM: "terminated by a SIGTERM that specfrontier did not send; fix: see who stops processes here",
}


def describe_exit(code: int) -> str:
    """'exited with status 1', or for a negative Popen status the signal's name and usual cause."""
    if code >= 0:
        return f"exited with status {code}"
    try:
        sig = signal.Signals(-code)
    except ValueError:
        return f"was killed by signal {-code}"
    cause = _SIGNAL_CAUSES.get(sig, "see the server log")
    return f"was killed by {sig.name} ({cause})"


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


_CAUSE_WORDS = ("error", "exception", "out of memory", "oom", "fatal", "failed", "cannot", "can't", "abort")
"""Words of a log line that says why a server stopped (Python exceptions, CUDA OOM, llama.cpp's errors)."""
_EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception)(: |$)")
"""The closing line of a Python traceback (`RuntimeError: ...`, `torch.OutOfMemoryError: ...`)."""
_CAUSE_CHARS = 300
CAUSE_LINES = 60
"""Log lines searched for the cause: a supervisor's own shutdown lines and a compiler's output can follow
the exception by dozens of lines (SGLang's JIT build failure: 28 lines)."""


def log_cause(tail: str) -> str | None:
    """The line of a server log's tail that says why it stopped: the last exception a traceback closed with
    (e.g. `torch.OutOfMemoryError: CUDA out of memory ...`), else the last line naming an error, else the
    last line that is not blank nor a traceback frame; None for an empty log. Why: "exited with status 1"
    alone sends the user to the log for a cause the log states in one line, and an engine's supervisor
    logs its own shutdown after the exception (SGLang: "Received sigquit from a child process. It usually
    means the child failed."), which names no cause."""
    lines = [ln.strip() for ln in tail.splitlines()]
    meaningful = [
        ln for ln in lines if ln and not ln.startswith(('File "', "Traceback (most recent call last)", "^", "~"))
    ]
    if not meaningful:
        return None
    found = next((ln for ln in reversed(meaningful) if _EXCEPTION_LINE.match(ln)), None) or next(
        (ln for ln in reversed(meaningful) if any(w in ln.lower() for w in _CAUSE_WORDS)), meaningful[-1]
    )
    return found if len(found) <= _CAUSE_CHARS else found[: _CAUSE_CHARS - 3] + "..."


PROBE_TIMEOUT_S = 10.0
"""Longest one readiness probe may take to answer, unless the adapter says more (`EngineAdapter.health_timeout_s`).
Why not ~1 s: a health handler may do work before it answers (SGLang's `/health_generate` runs a generation
and sleeps; issue 37), and a probe cut short never sees a server that is ready."""


async def _probe_status(session: aiohttp.ClientSession, url: str) -> int | None:
    """The status of one GET of `url`, or None when it failed or took longer than the session's timeout."""
    try:
        async with session.get(url) as resp:
            return resp.status
    except (TimeoutError, aiohttp.ClientError, OSError):
        return None


class ServerProcess:
    """One server process group: start, wait until healthy, stop. Usable as a context manager."""

    def __init__(self, argv: Sequence[str], log_path: Path, *, extra_env: Mapping[str, str] | None = None) -> None:
        """`extra_env`: variables the server needs on top of this process's environment (an adapter's
        `environment()`); the rest is inherited."""
        self.argv = list(argv)
        self.log_path = log_path
        self._env = {**os.environ, **extra_env} if extra_env else None
        self._proc: subprocess.Popen[bytes] | None = None
        self._started_ns = 0
        self._guard: subprocess.Popen[bytes] | None = None
        self.startup_s: float | None = None

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def start(self) -> None:
        """Spawn the guard, then the server; never through a shell (arguments may come from a config file)."""
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._guard = _start_guard()
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
                self._release_guard()
                raise EngineStartError(
                    f"server: argv[0] = {self.argv[0]!r}: cannot execute ({exc.strerror}); "
                    "fix: check engine.binary or run scripts/install.sh"
                ) from exc
        _tell(self._guard, f"watch {self._proc.pid}\n")

    def exited(self) -> int | None:
        """The exit status if the leader has exited, else None."""
        return None if self._proc is None else self._proc.poll()

    async def wait_exited(self, timeout_s: float, poll_s: float = 0.02) -> int | None:
        """The exit status once the leader has exited, waiting up to `timeout_s` for it (None: still running).

        Why wait: a crashing server's sockets are closed while it exits, before the kernel lets it be reaped,
        so its clients see "Connection reset" or "Cannot connect" a moment before `poll()` can see the exit
        (one poll right after such a window missed about 1 crash in 4, issue 29)."""
        deadline = time.monotonic() + timeout_s
        while (code := self.exited()) is None and time.monotonic() < deadline:
            await asyncio.sleep(poll_s)
        return code

    async def wait_ready(
        self, url: str, *, timeout_s: float, poll_s: float = 0.05, probe_timeout_s: float = PROBE_TIMEOUT_S
    ) -> float:
        """Poll `url` until it answers 200; return seconds from spawn to ready.

        A process that exits while we wait is a start failure (with its exit code and log tail);
        one that stays alive past `timeout_s` is a timeout. 503 ("Loading model") means keep waiting.

        Each probe may take up to `probe_timeout_s` to answer (an engine's health handler may run a
        generation first: SGLang's `/health_generate` sleeps at least 1 s and up to its
        HEALTH_CHECK_TIMEOUT, 20 s, before it answers). While a probe is in flight the process is still
        watched: an exit or the overall deadline ends the wait at once, not when the probe returns.
        """
        if self._proc is None:
            raise RuntimeError("wait_ready() before start()")
        deadline = time.monotonic() + timeout_s
        timeout = aiohttp.ClientTimeout(total=probe_timeout_s)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            while True:
                self._raise_if_exited()
                probe = asyncio.ensure_future(_probe_status(session, url))
                try:
                    while not probe.done():
                        self._raise_if_exited()
                        if time.monotonic() > deadline:
                            self._raise_not_ready(url, timeout_s)
                        await asyncio.wait({probe}, timeout=poll_s)
                finally:
                    if not probe.done():
                        probe.cancel()
                        with contextlib.suppress(asyncio.CancelledError):
                            await probe
                if probe.result() == 200:
                    self._check_port_owner(url)
                    self.startup_s = ns_to_s(time.perf_counter_ns() - self._started_ns)
                    return self.startup_s
                if time.monotonic() > deadline:
                    self._raise_not_ready(url, timeout_s)
                await asyncio.sleep(poll_s)

    def _raise_if_exited(self) -> None:
        """A start failure naming the exit and the log's own cause, if the leader has exited."""
        code = self.exited()
        if code is None:
            return
        tail = tail_of(self.log_path)
        cause = log_cause(tail_of(self.log_path, CAUSE_LINES))
        said = f"; its log says: {cause}" if cause else ""
        raise EngineStartError(
            f"server {describe_exit(code)} before it was ready{said}",  # EngineStartError adds the log's path
            log_path=self.log_path,
            log_tail=tail,
        )

    def _raise_not_ready(self, url: str, timeout_s: float) -> NoReturn:
        raise EngineTimeout(
            f"server not ready at {url} after {timeout_s:.0f} s; fix: raise engine.startup_timeout_s or check the log",
            log_path=self.log_path,
            log_tail=tail_of(self.log_path),
        )

    def _check_port_owner(self, url: str) -> None:
        """Raise PortTakenError if another program listens on the health URL's port (see port_owner)."""
        assert self._proc is not None
        port = urlsplit(url).port
        if port is None:
            return
        owner = port_ownership(port, self._proc.pid)
        if owner.ours is False:
            raise PortTakenError(
                f"port 127.0.0.1:{port} answered, but it is held by {owner.describe_foreign()}, "
                "not by the launched server (it took the port between specfrontier's choice and the "
                "server's bind); fix: resume the run (a new port is chosen per launch) or stop that program",
                log_path=self.log_path,
            )

    def stop(self, grace_s: float = 5.0) -> None:
        """SIGTERM the group, wait up to `grace_s`, SIGKILL the group, reap, release the guard. Idempotent.

        The group is signalled even when the leader already exited, because its children may not have.
        The leader is reaped only after the group is gone, so its pid (the group id) cannot be reused
        while the guard still knows it.
        """
        proc = self._proc
        if proc is None:
            self._release_guard()
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=grace_s)
        wait_group_gone(proc.pid, deadline)  # the children too (vLLM's engine core shuts down after its API server)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        # Children killed here are reaped by init, not by us: until then they still count as members of the
        # group. Wait for that (bounded), so "stopped" means no process of the group is left.
        wait_group_gone(proc.pid, time.monotonic() + REAP_WAIT_S)
        self._proc = None
        self._release_guard()

    def _release_guard(self) -> None:
        """Tell the guard the group is stopped (it must not signal it later), and reap it."""
        guard, self._guard = self._guard, None
        if guard is None:
            return
        _tell(guard, "done\n")
        with contextlib.suppress(OSError):
            if guard.stdin is not None:
                guard.stdin.close()
        try:
            guard.wait(timeout=5)
        except subprocess.TimeoutExpired:  # pragma: no cover - the guard exits at once on `done`
            guard.kill()
            guard.wait()

    def __enter__(self) -> ServerProcess:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


REAP_WAIT_S = 10.0
"""Longest wait for init to reap a stopped server's killed children (they hold no port or memory by then)."""


def _start_guard() -> subprocess.Popen[bytes]:
    """The watchdog process for one server (see `specfrontier.process.watchdog`): its stdin is a pipe only this
    process holds (Popen's pipes are not inherited by later children), in a session of its own."""
    return subprocess.Popen(
        [sys.executable, "-m", "specfrontier.process.watchdog"],
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )


def _tell(guard: subprocess.Popen[bytes] | None, line: str) -> None:
    stream: IO[bytes] | None = guard.stdin if guard is not None else None
    if stream is None:
        return
    with contextlib.suppress(OSError, ValueError):
        stream.write(line.encode())
        stream.flush()


__all__ = ["PROBE_TIMEOUT_S", "ServerProcess", "describe_exit", "free_port", "group_alive", "tail_of"]
