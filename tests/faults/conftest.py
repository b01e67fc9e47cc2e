"""The fault matrix: shared helpers.

Every test in this folder injects one fault (a knob of the simulator's HTTP face, a signal, a damaged or
read-only store, bad input) and asserts three things:
- a clear record: the one line the user sees (exit code, message naming cause and fix) and the stored
  status of the run and its settings;
- rows neither lost nor duplicated, counted with plain SQL (`count_rows`) against a clean run of the
  same config (`clean_rows`);
- no process left: every process a test starts (CLI, server, the children a server forks, client
  workers) inherits this session's tag in its environment, and `no_tagged_processes` fails the test if
  any of them is still alive when it ends (after killing them, so one leak does not poison the rest).
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import signal
import sqlite3
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from builders import CLI, cli_env, cli_process

TAG_KEY = "SPECFRONTIER_FAULT_SESSION"
TAG_VALUE = uuid.uuid4().hex
os.environ[TAG_KEY] = TAG_VALUE  # inherited by every process started from here on (this one is not tagged)
TAG = f"{TAG_KEY}={TAG_VALUE}".encode()


def tagged_processes() -> list[int]:
    """Pids of live processes started (directly or not) by this test session, zombies excluded."""
    pids = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            if TAG not in (proc / "environ").read_bytes().split(b"\0"):
                continue
            state = (proc / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:  # exited meanwhile, or not ours to read
            continue
        if state != "Z":
            pids.append(int(proc.name))
    return pids


def wait_for_no_tagged_processes(timeout_s: float = 10.0) -> list[int]:
    """Poll until no tagged process is alive (a group being stopped needs a moment); the ones left."""
    deadline = time.monotonic() + timeout_s
    left = tagged_processes()
    while left and time.monotonic() < deadline:
        time.sleep(0.1)
        left = tagged_processes()
    return left


_MATRIX: dict[str, dict[str, Any]] = {}
"""Per test: outcome, orphan processes and the row counts it recorded (`matrix`); written as a Markdown
table at the end of the session when SPECFRONTIER_FAULT_MATRIX names a file (docs/reliability.md)."""


class MatrixEntry:
    """What one fault case records for the matrix: cells and requests before the fault's end state
    (kept), after (the end state, or after the resume) and in the clean run of the same config."""

    def __init__(self, entry: dict[str, Any]) -> None:
        self.entry = entry

    def rows(self, *, kept: Rows | None = None, after: Rows | None = None, clean: Rows | None = None) -> None:
        for key, rows in (("kept", kept), ("after", after), ("clean", clean)):
            if rows is not None:
                self.entry[key] = f"{rows.cells}/{rows.requests}"


@pytest.fixture
def matrix(request: pytest.FixtureRequest) -> MatrixEntry:
    return MatrixEntry(_MATRIX.setdefault(request.node.nodeid, {}))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    entry = _MATRIX.setdefault(item.nodeid, {})
    if report.when == "call" or report.failed:
        entry["outcome"] = report.outcome if report.when == "call" else f"{report.outcome} ({report.when})"


def pytest_sessionfinish(session: pytest.Session) -> None:
    target = os.environ.get("SPECFRONTIER_FAULT_MATRIX")
    if not target or not _MATRIX:
        return
    lines: list[str] = []
    group = ""
    for nodeid, e in sorted(_MATRIX.items()):
        module, _, case = nodeid.partition("::")
        if module != group:
            group = module
            lines += ["", f"`{Path(module).name}`", "", "| case | outcome | kept | after | clean | orphans |"]
            lines.append("|---|---|---|---|---|---|")
        lines.append(
            f"| `{case}` | {e.get('outcome', '?')} | {e.get('kept', '-')} | {e.get('after', '-')} | "
            f"{e.get('clean', '-')} | {e.get('orphans', '?')} |"
        )
    Path(target).write_text("\n".join(lines).lstrip("\n") + "\n")


_STARTED: list[subprocess.Popen[bytes]] = []
"""CLI processes `start_cli` started in the current test (reaped at its end, even when it failed)."""


@pytest.fixture(autouse=True)
def no_tagged_processes(request: pytest.FixtureRequest) -> Iterator[None]:
    yield
    while _STARTED:  # a test that failed half-way may leave its CLI running: stop and reap it, close its pipes
        proc = _STARTED.pop()
        if proc.poll() is None:
            proc.kill()
        proc.communicate(timeout=30)
    left = wait_for_no_tagged_processes()
    _MATRIX.setdefault(request.node.nodeid, {})["orphans"] = len(left)
    described = [_describe(pid) for pid in left]  # before the kill: a dying process's cmdline reads empty
    for pid in left:  # by pid, never by name: nothing outside this session is touched
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    assert not left, f"processes left running: {described}"


def _describe(pid: int) -> str:
    try:
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        cmd = "?"
    return f"{pid}: {cmd[:160]}"


@dataclass(frozen=True, slots=True)
class Rows:
    """Row counts of a store, by plain SQL (independent of the Store class under test)."""

    runs: int
    settings: int
    cells: int
    requests: int
    cell_keys: tuple[tuple[str, str, int, int], ...]
    """(setting, workload, concurrency, repeat) of every stored cell, sorted (duplicates kept)."""
    requests_per_cell: tuple[int, ...]
    """Request rows of each cell, in `cell_keys` order."""


def count_rows(store: Path, run_id: str | None = None) -> Rows:
    """Rows of the whole store, or of one run."""
    if not store.exists():
        return Rows(0, 0, 0, 0, (), ())
    db = sqlite3.connect(f"file:{store}?mode=ro", uri=True)
    try:
        if db.execute("SELECT 1 FROM sqlite_master WHERE name='cell'").fetchone() is None:
            return Rows(0, 0, 0, 0, (), ())  # a store whose schema is still being created
        where, args = ("WHERE run_id=?", (run_id,)) if run_id else ("", ())
        runs = db.execute(f"SELECT COUNT(*) FROM run {where}", args).fetchone()[0]
        settings = db.execute(f"SELECT COUNT(*) FROM setting {where}", args).fetchone()[0]
        cells = db.execute(
            f"SELECT c.setting_id, c.workload, c.concurrency, c.repeat, "
            "(SELECT COALESCE(MAX(b.requests), 0) FROM request_blob b WHERE b.cell_id = c.cell_id) "
            f"FROM cell c {where} "
            "ORDER BY c.setting_id, c.workload, c.concurrency, c.repeat",
            args,
        ).fetchall()
    finally:
        db.close()
    keys = tuple((str(s), str(w), int(c), int(r)) for s, w, c, r, _ in cells)
    per_cell = tuple(int(row[4]) for row in cells)
    return Rows(int(runs), int(settings), len(cells), sum(per_cell), keys, per_cell)


def run_status(store: Path, run_id: str) -> str:
    """The stored status column of a run, as written (not as `runs` derives it)."""
    db = sqlite3.connect(f"file:{store}?mode=ro", uri=True)
    try:
        return str(db.execute("SELECT status FROM run WHERE run_id=?", (run_id,)).fetchone()[0])
    finally:
        db.close()


def cli(
    *args: str,
    cwd: Path,
    timeout: float = 180.0,
    stdin: Any = subprocess.DEVNULL,
    limits: Mapping[int, int] | None = None,
    before: str = "",
) -> subprocess.CompletedProcess[str]:
    """Run `specfrontier ARGS` as a real process (a shell's view: exit code, stdout, stderr); `limits`: its
    resource limits (`resource.RLIMIT_*` -> value), e.g. its address space, so that a fault that used to take
    gigabytes fails fast instead, or its file size, so that a store outgrows it as a full disk would; `before`:
    Python run in that process first (a fault of the tool's own process, e.g. a thread that starves its client)."""
    argv = [sys.executable, "-c", before + CLI[-1]] if before else CLI

    def cap() -> None:
        for limit, value in (limits or {}).items():
            resource.setrlimit(limit, (value, value))

    return cli_process(*args, cwd=cwd, timeout=timeout, stdin=stdin, preexec_fn=cap if limits else None, argv=argv)


def tune(work: Path, data: dict[str, Any], *extra: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    """`specfrontier tune --quiet` on config `data` (written to work/tune.yaml) as a real process in `work`."""
    return cli("tune", "--config", str(write_config(work / "tune.yaml", data)), "--quiet", *extra, cwd=work,
               timeout=timeout)  # fmt: skip


def json_report(work: Path, store: Path, run_id: str) -> dict[str, Any]:
    """`specfrontier report RUN --format json` as a real process: the report it printed (it must succeed)."""
    done = cli("report", run_id, "--store", str(store), "--format", "json", cwd=work)
    assert done.returncode == 0, done.stderr
    report: dict[str, Any] = json.loads(done.stdout)
    return report


def line_starting(stderr: str, start: str) -> str:
    """The line of stderr that starts with `start` (exactly one), with no traceback anywhere."""
    assert "Traceback" not in stderr, stderr
    lines = [ln for ln in stderr.splitlines() if ln.startswith(start)]
    assert len(lines) == 1, stderr
    return lines[0]


def only_line(stderr: str) -> str:
    """The whole of stderr: exactly one line, no traceback."""
    assert "Traceback" not in stderr, stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    return lines[0]


def refusal(done: subprocess.CompletedProcess[str], code: int, start: str, *, stdout_empty: bool = True) -> str:
    """How a refused command ends: exit `code`, nothing on stdout (unless `stdout_empty` is False), and one line
    on stderr, starting with `start`, with no traceback: that line."""
    assert "Traceback" not in done.stderr, done.stderr[-2000:]
    assert done.returncode == code, done.stderr[-2000:]
    if stdout_empty:
        assert done.stdout == ""
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr[-2000:]
    assert lines[0].startswith(start), lines[0][:2000]
    return lines[0]


def checkpointed_run(work: Path, data: dict[str, Any]) -> tuple[Path, str]:
    """A finished `tune --quiet` of config `data` in `work`, its WAL checkpointed into the main file (so a
    test may copy the store): the store and the run id."""
    store = Path(data["store"])
    done = cli("tune", "--config", str(write_config(work / "tune.yaml", data)), "--quiet", cwd=work)
    assert done.returncode == 0, done.stderr
    db = sqlite3.connect(store)
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    db.close()
    return store, latest_run(store)


def start_cli(*args: str, cwd: Path, **popen: Any) -> subprocess.Popen[bytes]:
    """Start `specfrontier ARGS` in the background (for signals sent mid-run)."""
    popen.setdefault("stdout", subprocess.PIPE)
    popen.setdefault("stderr", subprocess.PIPE)
    proc = subprocess.Popen([*CLI, *args], cwd=cwd, env=cli_env(), stdin=subprocess.DEVNULL, **popen)
    _STARTED.append(proc)
    return proc


def sim_config(store: Path, settings: list[dict[str, Any]] | None = None, **overrides: Any) -> dict[str, Any]:
    """A small sweep on the simulator's HTTP face: 2 settings x C = 1, 2 x 2 repeats, 4 requests per cell.
    Its requests last ~0.1 s of wall time, where a shared 2-core host lags the client by 5-70 ms: the cases
    that are not about the client accept a lag up to a whole request lifetime (`max_client_lag_share: 1`)
    so that the host's load does not decide them; the client's own case keeps the default."""
    data: dict[str, Any] = {
        "max_client_lag_share": 1.0,
        "engine": {"name": "sim", "face": "http", "time_scale": 4.0, "startup_timeout_s": 30},
        "workload": {"max_tokens": 32, "ignore_eos": True},
        "concurrency": [1, 2],
        "repeats": 2,
        "rounds_per_cell": 2,
        "warmup_rounds": 1,
        "request_timeout_s": 30,
        "client_workers": 1,
        "settings": settings
        if settings is not None
        else [{"name": "no-spec"}, {"name": "steps2", "algorithm": "EAGLE3", "num_steps": 2}],
        "store": str(store),
    }
    data.update(overrides)
    return data


def write_config(path: Path, data: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(data))
    return path


def corrupt_request_pages(store: Path) -> None:
    """Overwrite the root page of the `request_blob` b-tree, a page in the middle of the file, with 0xFF
    (the store checkpointed into its main file first)."""
    db = sqlite3.connect(f"file:{store}?mode=ro", uri=True)
    page_size, pages = (db.execute(f"PRAGMA {p}").fetchone()[0] for p in ("page_size", "page_count"))
    root = db.execute("SELECT rootpage FROM sqlite_master WHERE name='request_blob'").fetchone()[0]
    db.close()
    assert 1 < root < pages, (root, pages)
    with store.open("r+b") as fh:
        fh.seek((root - 1) * page_size)
        fh.write(b"\xff" * page_size)


def latest_run(store: Path) -> str:
    db = sqlite3.connect(f"file:{store}?mode=ro", uri=True)
    try:
        return str(db.execute("SELECT run_id FROM run ORDER BY created_at DESC, run_id DESC LIMIT 1").fetchone()[0])
    finally:
        db.close()


@pytest.fixture(scope="session")
def clean_rows(tmp_path_factory: pytest.TempPathFactory) -> Rows:
    """The rows a clean run of `sim_config()` stores (what every fault case is counted against)."""
    work = tmp_path_factory.mktemp("clean")
    store = work / "clean.db"
    config = write_config(work / "clean.yaml", sim_config(store))
    done = cli("tune", "--config", str(config), "--quiet", cwd=work)
    assert done.returncode == 0, done.stderr
    rows = count_rows(store)
    assert rows.cells == 2 * 2 * 2 and rows.runs == 1
    return rows
