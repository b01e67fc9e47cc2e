"""Run ownership: one writing process per run, and a run whose writer died reads as interrupted.

The other writers here are real processes (a child Python that claims the run and waits), killed with
a real SIGKILL; liveness is read from the real /proc.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from specfrontier.errors import StoreError
from specfrontier.store import SCHEMA_VERSION, Store
from specfrontier.store.owner import Owner, boot_id, current_owner, is_alive, start_ticks

HOLDER = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from specfrontier.store import Store
    store = Store(Path(sys.argv[1]))
    store.claim_run(sys.argv[2])
    print("claimed", flush=True)
    sys.stdin.read()  # hold the claim until the test closes stdin (or kills this process)
    store.release_run(sys.argv[2])
    store.close()
    """
)


@pytest.fixture
def stored(tmp_path: Path) -> tuple[Path, str]:
    """A store with one interrupted run whose writer (this process) has let go of it, as after Ctrl-C."""
    path = tmp_path / "runs.db"
    store = Store(path)
    run_id = store.create_run(engine="llamacpp", config={}, environment={})
    store.set_run_status(run_id, "interrupted")
    store.release_run(run_id)
    store.close()
    return path, run_id


@pytest.fixture
def holder(stored: tuple[Path, str]) -> Iterator[subprocess.Popen[str]]:
    """Another process that has claimed the stored run and holds it until stdin closes."""
    path, run_id = stored
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(path), run_id],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line == "claimed\n", proc.communicate()
    yield proc
    if proc.poll() is None:
        proc.kill()
    proc.communicate()


def _owner_rows(path: Path) -> list[tuple[object, ...]]:
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return db.execute("SELECT run_id, pid, start_ticks, boot_id FROM run_owner").fetchall()
    finally:
        db.close()


def _raw(path: Path, sql: str, *args: object) -> None:
    db = sqlite3.connect(path)
    with db:
        db.execute(sql, args)
    db.close()


# -- claims ----------------------------------------------------------------------------------------------
def test_a_new_run_is_claimed_by_its_creator(tmp_path: Path) -> None:
    store = Store(tmp_path / "runs.db")
    run_id = store.create_run(engine="llamacpp", config={}, environment={})
    me = current_owner()
    assert _owner_rows(tmp_path / "runs.db") == [(run_id, me.pid, me.start_ticks, me.boot_id)]
    assert store.run(run_id).status == "running"
    store.claim_run(run_id)  # claiming again from the owning process is a no-op
    store.close()


def test_a_run_held_by_a_live_process_cannot_be_claimed(
    stored: tuple[Path, str], holder: subprocess.Popen[str]
) -> None:
    path, run_id = stored
    store = Store(path)
    store.set_run_status(run_id, "running")
    assert store.run(run_id).status == "running"  # its writer lives
    with pytest.raises(StoreError) as info:
        store.claim_run(run_id)
    message = str(info.value)
    assert message.startswith(
        f"run = {run_id!r}: being written by another specfrontier process (pid {holder.pid}, since 20"
    )
    assert message.endswith(
        f"; fix: wait for it to end (or stop it), then resume with `specfrontier tune --resume {run_id} --store {path}`"
    )
    assert "\n" not in message
    assert [row[1] for row in _owner_rows(path)] == [holder.pid]  # the refused claim changed nothing
    holder.communicate("")  # the holder releases and ends
    assert holder.returncode == 0
    store.claim_run(run_id)
    assert [row[1] for row in _owner_rows(path)] == [os.getpid()]
    store.close()


def test_a_killed_writer_leaves_an_interrupted_run_that_can_be_claimed(
    stored: tuple[Path, str], holder: subprocess.Popen[str]
) -> None:
    path, run_id = stored
    store = Store(path)
    store.set_run_status(run_id, "running")
    holder.send_signal(signal.SIGKILL)
    _wait_for_zombie(holder.pid)  # not reaped yet: a zombie is not a writer either
    row = store.run(run_id)
    assert (row.status, row.stored_status, row.finished_at) == ("interrupted", "running", None)
    holder.wait()
    assert [r.status for r in store.runs()] == ["interrupted"]
    store.claim_run(run_id)
    assert store.run(run_id).status == "running"  # ours now, and we live
    store.close()


def _wait_for_zombie(pid: int) -> None:
    deadline = time.monotonic() + 10
    while Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
        assert time.monotonic() < deadline, "the killed process never became a zombie"
        time.sleep(0.01)


def test_release_drops_only_this_process_claim(stored: tuple[Path, str], holder: subprocess.Popen[str]) -> None:
    path, run_id = stored
    store = Store(path)
    store.release_run(run_id)
    assert [row[1] for row in _owner_rows(path)] == [holder.pid]
    store.close()


def test_claiming_an_unknown_run_names_the_known_ones(stored: tuple[Path, str]) -> None:
    path, run_id = stored
    store = Store(path)
    with pytest.raises(StoreError, match=rf"run = 'nope': not in store .*latest: {run_id}\).*fix: pick an id"):
        store.claim_run("nope")
    store.close()


# -- what `runs` shows -----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "owner",
    [
        None,  # no owner recorded (a tool older than run_owner, or a claim released without a final status)
        "pid reused",  # this very pid, but another start time: the claimant died and the pid was reused
        "other boot",  # claimed before a reboot
    ],
)
def test_a_running_run_without_a_live_owner_reads_as_interrupted(stored: tuple[Path, str], owner: str | None) -> None:
    path, run_id = stored
    _raw(path, "UPDATE run SET status='running' WHERE run_id=?", run_id)
    me = current_owner()
    assert me.start_ticks is not None and me.boot_id is not None
    if owner is not None:
        ticks, boot = (me.start_ticks - 1, me.boot_id) if owner == "pid reused" else (me.start_ticks, "0-0-0")
        _raw(path, "INSERT INTO run_owner VALUES (?, ?, ?, ?, 'then')", run_id, me.pid, ticks, boot)
    before = path.read_bytes()
    store = Store(path, read_only=True)
    assert [(r.status, r.stored_status) for r in store.runs()] == [("interrupted", "running")]
    store.close()
    assert path.read_bytes() == before  # derived on read, never written
    writer = Store(path)
    writer.claim_run(run_id)  # a dead claim is taken over
    writer.close()


def test_a_finished_status_is_shown_as_stored(stored: tuple[Path, str]) -> None:
    path, run_id = stored
    store = Store(path)
    for status in ("done", "failed", "interrupted", "incomplete"):
        store.set_run_status(run_id, status)
        row = store.run(run_id)
        assert (row.status, row.stored_status) == (status, status)
        assert row.finished_at is not None
    store.set_run_status(run_id, "running")
    assert store.run(run_id).finished_at is None
    with pytest.raises(ValueError, match="unknown status 'finished'"):
        store.set_run_status(run_id, "finished")
    store.close()


def test_an_older_store_gets_run_owner_when_opened_for_writing(stored: tuple[Path, str]) -> None:
    path, run_id = stored
    _raw(path, "DROP TABLE run_owner")
    _raw(path, "UPDATE run SET status='running' WHERE run_id=?", run_id)
    reader = Store(path, read_only=True)  # an old store read as it is: no owners, so no live writer
    assert reader.run(run_id).status == "interrupted"
    reader.close()
    writer = Store(path)
    writer.claim_run(run_id)
    assert writer.run(run_id).status == "running"
    assert writer._db.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()[0] == str(SCHEMA_VERSION)
    writer.close()


# -- liveness ----------------------------------------------------------------------------------------------
def test_liveness_names_one_process_across_pid_reuse() -> None:
    me = current_owner()
    assert me.pid == os.getpid() and me.start_ticks == start_ticks(os.getpid()) and me.boot_id == boot_id()
    assert is_alive(me)
    assert not is_alive(Owner(me.pid, (me.start_ticks or 0) + 1, me.boot_id))
    assert not is_alive(Owner(me.pid, me.start_ticks, "another-boot"))
    assert me.same_process(Owner(me.pid, me.start_ticks, me.boot_id, "later"))


def test_without_proc_facts_liveness_falls_back_to_the_pid() -> None:
    ended = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead_pid = int(ended.stdout)
    assert is_alive(Owner(os.getpid(), None, None))
    assert not is_alive(Owner(dead_pid, None, None)) or Path(f"/proc/{dead_pid}").exists()  # unless reused
