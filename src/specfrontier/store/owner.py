"""Which process writes a run, and whether that process still lives.

A run is written by one specfrontier process at a time (`Store.claim_run`). The claim names the process
by pid *and* its start time (field 22 of /proc/PID/stat, in clock ticks since boot) *and* the boot id:
a pid alone is reused by the kernel, so after a crash (SIGKILL, power loss) a new, unrelated process
with the same pid would otherwise keep the run "owned" forever. Start time and boot id together name
one process for the machine's whole uptime.

Off Linux (no /proc) only the pid is recorded and liveness falls back to `os.kill(pid, 0)`: a reused pid
can then hold a dead writer's claim, which errs on the safe side (a refused resume, never two writers).
Processes in another pid namespace (a container sharing the store file) are invisible here and read as
ended.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

_BOOT_ID = Path("/proc/sys/kernel/random/boot_id")
_ENDED_STATES = ("Z", "X")
"""/proc states of a process that can no longer write: zombie (not yet reaped) and dead."""


@dataclass(frozen=True, slots=True)
class Owner:
    """A process that claimed a run (a `run_owner` row)."""

    pid: int
    start_ticks: int | None
    """Field 22 of /proc/PID/stat (start time since boot); None off Linux."""
    boot_id: str | None
    """/proc/sys/kernel/random/boot_id of the machine's boot; None off Linux."""
    claimed_at: str = ""

    def same_process(self, other: Owner) -> bool:
        """True when both name one process (the claimed_at time does not matter)."""
        return (self.pid, self.start_ticks, self.boot_id) == (other.pid, other.start_ticks, other.boot_id)


def boot_id() -> str | None:
    """This boot's id, or None where the kernel does not publish one (not Linux)."""
    try:
        return _BOOT_ID.read_text(encoding="ascii").strip() or None
    except OSError:
        return None


def _stat_fields(pid: int) -> list[str] | None:
    """/proc/PID/stat from field 3 (state) on, or None when there is no such process (or no /proc).

    The command name (field 2) is in parentheses and may itself hold spaces and ')', so the fields
    are split after its last ')'."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()


def start_ticks(pid: int) -> int | None:
    """Start time of `pid` in clock ticks since boot (field 22 of /proc/PID/stat); None: unknown."""
    fields = _stat_fields(pid)
    if fields is None or len(fields) < 20:
        return None
    return int(fields[19])  # field 22; fields[0] is field 3


def current_owner(claimed_at: str = "") -> Owner:
    """This process as an owner (computed on each call: a forked child is another process)."""
    pid = os.getpid()
    return Owner(pid, start_ticks(pid), boot_id(), claimed_at)


def is_alive(owner: Owner) -> bool:
    """True while the owner's very process runs: same boot, same pid, same start time, not a zombie."""
    here = boot_id()
    if owner.boot_id is None or owner.start_ticks is None or here is None:
        return _pid_exists(owner.pid)
    if owner.boot_id != here:
        return False  # the machine rebooted since the claim: every process of that boot has ended
    fields = _stat_fields(owner.pid)
    if fields is None or len(fields) < 20 or fields[0] in _ENDED_STATES:
        return False
    return int(fields[19]) == owner.start_ticks


def _pid_exists(pid: int) -> bool:
    """Fallback without /proc: signal 0 checks existence without touching the process."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by another user
        return True
    except OSError:
        return False
    return True


__all__ = ["Owner", "boot_id", "current_owner", "is_alive", "start_ticks"]
