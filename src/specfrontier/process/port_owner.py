"""Who listens on a local TCP port: proof that the server answering is the one we launched.

A port is chosen free, then handed to the engine, which binds it seconds or minutes later (SGLang and
vLLM load the model first). In between another program can take it; its 200 on /health would then be
taken for our server's readiness, and the sweep would measure the wrong server (seen: a no-speculation
setting with 79% acceptance). So readiness also checks that every socket listening on the port is held
by a process of the launched server's process group (or session: the server may create sub-groups).

Linux only, read from /proc: `/proc/net/tcp{,6}` maps listening sockets to inodes and `/proc/PID/fd`
maps inodes to processes. Where /proc cannot tell (another OS, a hidden namespace), the check answers
"unknown" and readiness falls back to the health answer alone.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

_LISTEN = "0A"
_PROC = Path("/proc")


@dataclass(frozen=True, slots=True)
class PortOwnership:
    """The answer for one port: ours, someone else's, or unknown (None)."""

    ours: bool | None
    foreign_pids: tuple[int, ...] = ()
    """Processes outside the server's group holding a listening socket on the port (when visible)."""

    def describe_foreign(self) -> str:
        if not self.foreign_pids:
            return "a process specfrontier cannot inspect"
        return ", ".join(f"pid {pid} ({_command(pid)})" for pid in self.foreign_pids[:3])


def listening_inodes(port: int, proc: Path = _PROC) -> set[int] | None:
    """Inodes of the sockets listening on `port` (any local address); None when /proc/net is unreadable."""
    found: set[int] = set()
    readable = False
    for table in ("tcp", "tcp6"):
        try:
            lines = (proc / "net" / table).read_text().splitlines()[1:]
        except OSError:
            continue
        readable = True
        for line in lines:
            fields = line.split()
            if len(fields) < 10 or fields[3] != _LISTEN:
                continue
            local_port = int(fields[1].rsplit(":", 1)[1], 16)
            if local_port == port:
                found.add(int(fields[9]))
    return found if readable else None


def _socket_inodes(pid: int, proc: Path) -> set[int]:
    inodes: set[int] = set()
    try:
        entries = list((proc / str(pid) / "fd").iterdir())
    except OSError:
        return inodes
    for entry in entries:
        try:
            target = os.readlink(entry)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(int(target[8:-1]))
    return inodes


def _group_ids(pid: int, proc: Path) -> tuple[int, int] | None:
    """(process group id, session id) from /proc/PID/stat; None if it is gone."""
    try:
        after_name = (proc / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return int(after_name[2]), int(after_name[3])


def _command(pid: int, proc: Path = _PROC) -> str:
    try:
        raw = (proc / str(pid) / "cmdline").read_bytes()
    except OSError:
        return "?"
    return raw.replace(b"\0", b" ").decode(errors="replace").strip()[:80] or "?"


def port_ownership(port: int, group: int, proc: Path = _PROC) -> PortOwnership:
    """Whether every listener on `port` belongs to process group (or session) `group`."""
    inodes = listening_inodes(port, proc)
    if not inodes:  # unreadable, or no listener visible from this namespace: cannot tell
        return PortOwnership(None)
    ours: set[int] = set()
    foreign: list[int] = []
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        pid = int(entry.name)
        held = _socket_inodes(pid, proc) & inodes
        if not held:
            continue
        ids = _group_ids(pid, proc)
        if ids is not None and group in ids:
            ours |= held
        else:
            foreign.append(pid)
    if foreign or ours != inodes:
        return PortOwnership(False, tuple(foreign))
    return PortOwnership(True)


__all__ = ["PortOwnership", "listening_inodes", "port_ownership"]
