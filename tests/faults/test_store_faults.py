"""Fault matrix, the store: a damaged page, a read-only store, a file that is no store, two writers of one
run, and a tool killed with SIGKILL mid-run.

Each case asserts the one line the user sees (no traceback), the stored status, the rows (none lost,
none duplicated, against a clean run of the same config) and, through the conftest fixture, that no
process is left.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import signal
import sqlite3
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.faults.conftest import (
    CLI,
    MatrixEntry,
    Rows,
    cli,
    corrupt_request_pages,
    count_rows,
    latest_run,
    run_status,
    sim_config,
    start_cli,
    wait_for_no_tagged_processes,
    write_config,
)

from builders import chmod_binds

pytestmark = pytest.mark.slow


CHMOD_BINDS = chmod_binds()


def _one_line(stderr: str) -> str:
    """The whole of stderr: exactly one line, no traceback."""
    assert "Traceback" not in stderr, stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    return lines[0]


def _snapshot(path: Path) -> tuple[bytes, int]:
    return path.read_bytes(), path.stat().st_mtime_ns


def _checkpoint(store: Path) -> None:
    """Move every committed page into the main file and drop the -wal (as the last writer's close does)."""
    db = sqlite3.connect(store)
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    db.close()


def _cells(store: Path) -> int:
    """Stored cells so far (0 until the schema exists)."""
    try:
        return count_rows(store).cells
    except sqlite3.DatabaseError:
        return 0


def _wait_for_cells(store: Path, n: int, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 120
    while _cells(store) < n:
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, f"fewer than {n} cells stored in time"
        time.sleep(0.05)


def _assert_complete(rows: Rows, clean: Rows, kept: Rows) -> None:
    """Every cell of the clean run, once, with its requests; the cells stored before the fault among them."""
    assert rows.cell_keys == clean.cell_keys  # sorted with duplicates kept: none lost, none twice
    assert rows.requests_per_cell == clean.requests_per_cell
    assert set(kept.cell_keys) <= set(rows.cell_keys) and len(kept.cell_keys) >= 1


@pytest.fixture(scope="module")
def tuned(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A store with one done run of `sim_config()`, checkpointed into its main file (tests copy it)."""
    work = tmp_path_factory.mktemp("tuned")
    store = work / "runs.db"
    done = cli("tune", "--config", str(write_config(work / "tune.yaml", sim_config(store))), "--quiet", cwd=work)
    assert done.returncode == 0, done.stderr
    _checkpoint(store)
    return store, latest_run(store)


@pytest.fixture
def writable_again(tmp_path: Path) -> Iterator[None]:
    yield
    for p in [tmp_path, *tmp_path.rglob("*")]:
        p.chmod(0o755 if p.is_dir() else 0o644)


# -- (a) a damaged page ---------------------------------------------------------------------------------
def test_report_on_a_damaged_page_is_one_line_with_the_recover_fix(tuned: tuple[Path, str], tmp_path: Path) -> None:
    store = tmp_path / "runs.db"
    shutil.copy(tuned[0], store)
    run_id = tuned[1]
    corrupt_request_pages(store)
    before = _snapshot(store)
    done = cli("report", run_id, "--store", str(store), "--format", "json", cwd=tmp_path)
    assert done.returncode == 2 and done.stdout == ""  # the store named cannot be used: bad input (issue 39)
    line = _one_line(done.stderr)
    assert line.startswith(f"StoreRefused: store = {str(store)!r}, run = {run_id!r}: reading cells: ")
    assert "database disk image is malformed" in line
    assert line.endswith(
        f"; fix: restore a copy, or recover what is readable with `sqlite3 {store} .recover | sqlite3 NEW.db`"
    )
    assert run_status(store, run_id) == "done"
    assert _snapshot(store) == before  # the reader wrote nothing into the damaged file


# -- (b) a read-only store in a read-only folder --------------------------------------------------------
def test_read_commands_work_on_a_store_nobody_may_write(
    tuned: tuple[Path, str], tmp_path: Path, clean_rows: Rows, writable_again: None, matrix: MatrixEntry
) -> None:
    folder = tmp_path / "shared"
    folder.mkdir()
    store = folder / "runs.db"
    shutil.copy(tuned[0], store)
    run_id = tuned[1]
    rows = count_rows(tuned[0], run_id)  # of the original: a raw reader would leave side files in `folder`
    assert (rows.cell_keys, rows.requests_per_cell) == (clean_rows.cell_keys, clean_rows.requests_per_cell)
    matrix.rows(after=rows, clean=clean_rows)
    store.chmod(0o444)
    folder.chmod(0o555)
    before = _snapshot(store)

    listed = cli("runs", "--json", "--store", str(store), cwd=tmp_path)
    assert (listed.returncode, listed.stderr) == (0, "")
    assert [(r["id"], r["status"]) for r in json.loads(listed.stdout)] == [(run_id, "done")]
    report = cli("report", run_id, "--store", str(store), "--format", "json", cwd=tmp_path)
    assert (report.returncode, report.stderr) == (0, "")
    assert json.loads(report.stdout)["run"]["status"] == "done"

    assert _snapshot(store) == before  # not a byte, not even the mtime: the rows counted above are all there
    if CHMOD_BINDS:  # a real read-only folder: the immutable fallback, and no side file could be made
        assert sorted(p.name for p in folder.iterdir()) == ["runs.db"]


# -- (c) a file that is no store ------------------------------------------------------------------------
@pytest.mark.parametrize(
    "command",
    [
        ["runs"],
        ["runs", "--json"],
        ["report", "r1"],
        ["compare", "r1", "r2"],
        ["plan", "r1"],
        ["schedule", "r1", "--engine", "vllm"],
        ["recommend", "r1", "--traffic", "day.yaml"],
    ],
)
def test_a_read_command_refuses_an_empty_file_and_leaves_it_empty(tmp_path: Path, command: list[str]) -> None:
    empty = tmp_path / "empty.txt"
    empty.write_bytes(b"")
    done = cli(*command, "--store", "empty.txt", cwd=tmp_path)
    assert done.returncode == 2 and done.stdout == ""
    assert _one_line(done.stderr) == (
        "StoreRefused: store = 'empty.txt': not a specfrontier store (no tables); "
        "fix: pass the --store written by `specfrontier tune`"
    )
    assert empty.stat().st_size == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty.txt"]


def test_a_read_command_on_a_missing_store_keeps_its_message(tmp_path: Path) -> None:
    done = cli("runs", "--store", "nope.db", cwd=tmp_path)
    assert done.returncode == 2
    assert _one_line(done.stderr) == (
        "StoreRefused: --store = 'nope.db': no such file; fix: run `specfrontier tune` or pass --store"
    )
    assert list(tmp_path.iterdir()) == []


# -- (d) two resumes of one run at once -----------------------------------------------------------------
def _interrupted_run(tmp_path: Path, cells: int) -> tuple[Path, str]:
    """A run of `sim_config()` stopped by Ctrl-C after `cells` cells (exit 130, status interrupted)."""
    store = tmp_path / "runs.db"
    config = write_config(tmp_path / "tune.yaml", sim_config(store))
    proc = start_cli("tune", "--config", str(config), "--quiet", cwd=tmp_path)
    _wait_for_cells(store, cells, proc)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    run_id = latest_run(store)
    assert run_status(store, run_id) == "interrupted"
    return store, run_id


def _wait_for_owner(store: Path, run_id: str, proc: subprocess.Popen[bytes]) -> None:
    """Until `proc` has claimed the run (its row in run_owner)."""
    deadline = time.monotonic() + 60
    while True:
        db = sqlite3.connect(f"file:{store}?mode=ro", uri=True)
        try:
            row = db.execute("SELECT pid FROM run_owner WHERE run_id=?", (run_id,)).fetchone()
        finally:
            db.close()
        if row is not None and row[0] == proc.pid:
            return
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the first resume never claimed the run"
        time.sleep(0.05)


def test_a_second_resume_of_a_run_being_written_stops_with_one_line(
    tmp_path: Path, clean_rows: Rows, matrix: MatrixEntry
) -> None:
    store, run_id = _interrupted_run(tmp_path, cells=1)
    kept = count_rows(store, run_id)
    first = start_cli("tune", "--resume", run_id, "--store", str(store), "--quiet", cwd=tmp_path)
    _wait_for_owner(store, run_id, first)

    second = cli("tune", "--resume", run_id, "--store", str(store), "--quiet", cwd=tmp_path)
    assert second.returncode == 1
    line = _one_line(second.stderr)
    assert line.startswith(
        f"StoreError: run = {run_id!r}: being written by another specfrontier process (pid {first.pid}, since "
    )
    assert line.endswith(
        "; fix: wait for it to end (or stop it), then resume with "
        f"`specfrontier tune --resume {run_id} --store {store}`"
    )
    assert first.poll() is None  # the refused resume disturbed nothing

    _, err = first.communicate(timeout=180)
    assert first.returncode == 0, err
    assert run_status(store, run_id) == "done"
    _assert_complete(count_rows(store, run_id), clean_rows, kept)
    matrix.rows(kept=kept, after=count_rows(store, run_id), clean=clean_rows)


# -- (e) the tool SIGKILLed mid-run ---------------------------------------------------------------------
def test_a_killed_tool_leaves_an_interrupted_run_that_resumes_whole(
    tmp_path: Path, clean_rows: Rows, matrix: MatrixEntry
) -> None:
    store = tmp_path / "runs.db"
    config = write_config(tmp_path / "tune.yaml", sim_config(store))
    proc = start_cli("tune", "--config", str(config), "--quiet", cwd=tmp_path)
    _wait_for_cells(store, 2, proc)
    proc.kill()  # SIGKILL: no handler runs, the status stays as written
    proc.communicate(timeout=30)
    assert wait_for_no_tagged_processes() == []  # its server went with it (PDEATHSIG + watchdog)

    run_id = latest_run(store)
    kept = count_rows(store, run_id)
    assert run_status(store, run_id) == "running"
    listed = cli("runs", "--json", "--store", str(store), cwd=tmp_path)
    assert (listed.returncode, listed.stderr) == (0, "")
    assert [(r["id"], r["status"]) for r in json.loads(listed.stdout)] == [(run_id, "interrupted")]

    done = cli("tune", "--resume", run_id, "--store", str(store), "--quiet", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    assert run_status(store, run_id) == "done"
    _assert_complete(count_rows(store, run_id), clean_rows, kept)
    matrix.rows(kept=kept, after=count_rows(store, run_id), clean=clean_rows)


# -- (f) the store stops taking writes mid-sweep; (g) a truncated store ---------------------------------
def test_a_store_that_stops_taking_writes_mid_sweep_is_one_line_and_resumes_whole(
    tmp_path: Path, clean_rows: Rows, matrix: MatrixEntry
) -> None:
    """A file-size limit (RLIMIT_FSIZE, which binds root too, unlike chmod) makes SQLite's writes fail
    with EFBIG once the store outgrows it, as a full disk would: one line naming the resume, the cells
    stored before it kept, the run interrupted, and the resume (without the limit) completes it."""
    store = tmp_path / "s.db"
    config = write_config(tmp_path / "tune.yaml", sim_config(store))

    def limit_file_size() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (150_000, 150_000))

    env = {k: v for k, v in os.environ.items() if k not in ("FORCE_COLOR", "TTY_COMPATIBLE")}
    done = subprocess.run(
        [*CLI, "tune", "--config", str(config), "--quiet"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
        preexec_fn=limit_file_size,
    )
    assert done.returncode == 1, done.stderr
    line = _one_line(done.stderr)
    run_id = latest_run(store)
    assert line.startswith("StoreError: ") and f"resume the run with `specfrontier tune --resume {run_id}" in line
    kept = count_rows(store)
    assert 1 <= kept.cells < clean_rows.cells
    listed = json.loads(cli("runs", "--store", str(store), "--json", cwd=tmp_path).stdout)
    assert [r["status"] for r in listed] == ["interrupted"]
    resumed = cli("tune", "--resume", run_id, "--store", str(store), "--quiet", cwd=tmp_path, timeout=180)
    assert resumed.returncode == 0, resumed.stderr
    _assert_complete(count_rows(store), clean_rows, kept)
    matrix.rows(kept=kept, after=count_rows(store), clean=clean_rows)


def test_report_on_a_truncated_store_is_one_line(tuned: tuple[Path, str], tmp_path: Path) -> None:
    source, run_id = tuned
    store = tmp_path / "cut.db"
    data = source.read_bytes()
    store.write_bytes(data[: len(data) // 2])  # a copy cut short (a full disk during a copy, a partial download)
    before = _snapshot(store)
    done = cli("report", run_id, "--store", str(store), "--format", "json", cwd=tmp_path)
    assert done.returncode == 2 and done.stdout == ""
    line = _one_line(done.stderr)
    assert line.startswith("StoreRefused: ") and str(store) in line and "fix:" in line
    assert _snapshot(store) == before
