"""Fault matrix, files (issue 29, cases 3, 5, 6 and 10): what sits at an output path, a setting name too
long for a file name, a huge value or a broken line in the config, and a store file that is no store, is
damaged, or gets two runs in one second.

Every case runs the real CLI process (the run-id collision excepted: it needs the clock and the random
digits forced, so it drives the real Store on a real SQLite file) and asserts the one line the user sees
(exit code, no traceback) and that nothing the user had is destroyed: a device node, a FIFO and a symlink
stay what they were, an unrelated `NAME.tmp` keeps its bytes, and a damaged or foreign store file is not
written.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import stat
import subprocess
import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from tests.faults.conftest import cli, corrupt_request_pages, count_rows, latest_run, sim_config, write_config

from specfrontier.errors import StoreError
from specfrontier.store import Store


def _one_line(done: subprocess.CompletedProcess[str], code: int, kind: str) -> str:
    """Exit `code`, nothing on stdout, one `kind: ...` line on stderr (no traceback)."""
    assert "Traceback" not in done.stderr, done.stderr[:2000]
    assert done.returncode == code, done.stderr[:2000]
    assert done.stdout == ""
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr[:2000]
    assert lines[0].startswith(f"{kind}: "), lines[0][:2000]
    return lines[0]


def _listing(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


# -- case 3: -o never destroys what sits at the path ----------------------------------------------
def _virtual(store: Path) -> dict[str, Any]:
    """One setting at one level on the virtual simulator: a run of about a second."""
    return {
        "engine": {"name": "sim", "min_requests": 8},
        "concurrency": [1],
        "repeats": 1,
        "workload": {"max_tokens": 16, "ignore_eos": True},
        "settings": [{"name": "no-spec"}],
        "store": str(store),
    }


def _tune(tmp_path: Path, store: Path, *options: str) -> subprocess.CompletedProcess[str]:
    return cli("tune", "--config", str(write_config(tmp_path / "c.yaml", _virtual(store))), *options, cwd=tmp_path)


@pytest.fixture(scope="module")
def sim_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A stored run to report (`_virtual`), checkpointed into its main file (a test may copy it)."""
    work = tmp_path_factory.mktemp("sim-run")
    store = work / "s.db"
    done = _tune(work, store, "--quiet")
    assert done.returncode == 0, done.stderr
    db = sqlite3.connect(store)
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    db.close()
    return store, latest_run(store)


def _report(sim_run: tuple[Path, str], target: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    store, run_id = sim_run
    return cli("report", run_id, "--store", str(store), "-f", "json", "-o", str(target), cwd=cwd)


def _is_report(text: str, run_id: str) -> bool:
    return bool(json.loads(text)["run"]["run_id"] == run_id)


def test_output_through_a_symlink_writes_its_target_and_keeps_the_link(
    tmp_path: Path, sim_run: tuple[Path, str]
) -> None:
    real = tmp_path / "kept" / "report.json"
    real.parent.mkdir()
    real.write_text("old\n")
    real.chmod(0o640)
    link = tmp_path / "latest.json"
    link.symlink_to(Path("kept") / "report.json")  # relative, as `ln -s` makes them
    done = _report(sim_run, link, tmp_path)
    assert (done.returncode, done.stderr) == (0, "")
    assert link.is_symlink() and os.readlink(link) == str(Path("kept") / "report.json")
    assert _is_report(real.read_text(), sim_run[1])
    assert stat.S_IMODE(real.stat().st_mode) == 0o640  # the file keeps its permissions
    assert _listing(real.parent) == ["report.json"] and _listing(tmp_path) == ["kept", "latest.json"]


def test_an_unrelated_tmp_file_beside_the_output_is_left_alone(tmp_path: Path, sim_run: tuple[Path, str]) -> None:
    target = tmp_path / "report.json"
    mine = tmp_path / "report.json.tmp"
    mine.write_text("the user's own notes\n")
    done = _report(sim_run, target, tmp_path)
    assert (done.returncode, done.stderr) == (0, "")
    assert _is_report(target.read_text(), sim_run[1])
    assert mine.read_text() == "the user's own notes\n"
    assert _listing(tmp_path) == ["report.json", "report.json.tmp"]  # no temporary file of ours left


def test_output_into_a_fifo_is_written_through_and_the_fifo_stays(tmp_path: Path, sim_run: tuple[Path, str]) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    received: list[bytes] = []
    reader = threading.Thread(target=lambda: received.append(fifo.read_bytes()), daemon=True)
    reader.start()
    done = _report(sim_run, fifo, tmp_path)
    reader.join(timeout=30)
    assert (done.returncode, done.stderr) == (0, "")
    assert stat.S_ISFIFO(fifo.lstat().st_mode)  # still a FIFO, not a regular file renamed over it
    assert received and _is_report(received[0].decode(), sim_run[1])
    assert _listing(tmp_path) == ["pipe"]


def _device(path: Path, minor: int) -> Path:
    """A character device node of the memory driver (major 1: minor 3 = null, 7 = full) in the test's
    folder: the real kind of node `/dev/full` is, without ever touching /dev itself."""
    try:
        os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(1, minor))
        path.open("w").close()  # a container may let the node be made but not opened
    except OSError as exc:
        pytest.skip(f"cannot make and open a device node here ({exc.strerror})")
    return path


def test_output_to_a_full_device_is_one_line_and_the_device_stays(tmp_path: Path, sim_run: tuple[Path, str]) -> None:
    full = _device(tmp_path / "full", 7)
    done = _report(sim_run, full, tmp_path)
    line = _one_line(done, 2, "ConfigError")
    assert line == f"ConfigError: -o = '{full}': cannot write it (No space left on device); fix: choose another path"
    assert stat.S_ISCHR(full.lstat().st_mode) and full.lstat().st_rdev == os.makedev(1, 7)
    assert _listing(tmp_path) == ["full"]


def test_output_to_a_null_device_succeeds_and_the_device_stays(tmp_path: Path, sim_run: tuple[Path, str]) -> None:
    null = _device(tmp_path / "null", 3)
    done = _report(sim_run, null, tmp_path)
    assert (done.returncode, done.stderr) == (0, "")
    assert stat.S_ISCHR(null.lstat().st_mode) and null.lstat().st_rdev == os.makedev(1, 3)
    assert _listing(tmp_path) == ["null"]


# -- case 5: a setting name too long for a file name ----------------------------------------------
def test_a_setting_name_too_long_is_refused_before_launch(tmp_path: Path) -> None:
    store = tmp_path / "s.db"
    long_name = "x" * 260
    settings = [{"name": "no-spec"}, {"name": long_name, "algorithm": "EAGLE3", "num_steps": 2}]
    config = write_config(tmp_path / "c.yaml", sim_config(store, settings=settings))
    done = cli("tune", "--config", str(config), cwd=tmp_path)
    line = _one_line(done, 2, "ConfigError")
    assert line == (
        f"ConfigError: {config}: settings[1].name = '{'x' * 79}… (260 characters): longer than 64 characters "
        "(it labels report rows and names the server's log file); fix: shorten it to 64 at most"
    )
    assert not store.exists() and not (tmp_path / "specfrontier-logs").exists()  # nothing launched


# -- case 6: a huge value, a broken line ----------------------------------------------------------
def test_a_huge_value_under_an_unknown_key_is_quoted_cut(tmp_path: Path) -> None:
    store = tmp_path / "s.db"
    config = tmp_path / "c.yaml"
    config.write_text(json.dumps({**sim_config(store), "notes": "y" * 10_000_000}))  # JSON is YAML
    done = cli("tune", "--config", str(config), cwd=tmp_path)
    line = _one_line(done, 2, "ConfigError")
    assert line == (
        f"ConfigError: {config}: notes = '{'y' * 79}… (10000000 characters): Extra inputs are not permitted; "
        "fix: remove this key (it is not a known field; check the spelling)"
    )
    assert not store.exists()


def test_a_yaml_syntax_error_is_one_line_with_file_line_and_column(tmp_path: Path) -> None:
    store = tmp_path / "s.db"
    config = tmp_path / "c.yaml"
    config.write_text(f"engine:\n  name: sim\nstore: {store}\nconcurrency: [1, 2\nrepeats: 1\n")
    done = cli("tune", "--config", str(config), cwd=tmp_path)
    line = _one_line(done, 2, "ConfigError")
    assert line.startswith(f"ConfigError: {config}:5:8: not valid YAML: expected ',' or ']', but got ':' (")
    assert line.endswith("at line 4, column 14); fix: correct the YAML syntax there")
    assert not store.exists()


# -- case 10: a store file that is no store, a damaged store, two runs in one second --------------
def _sqlite_without_tables(path: Path) -> Path:
    """A database of another program that holds no table (yet): only its header page and a version."""
    db = sqlite3.connect(path)
    db.execute("PRAGMA user_version = 7")
    db.close()
    assert path.stat().st_size > 0
    return path


@pytest.mark.parametrize(
    ("content", "said", "fix"),
    [
        ("text", "opening: file is not a database (SQLITE_NOTADB)", " (or a new file name)"),
        ("sqlite-no-tables", "not a specfrontier store (an SQLite database with no tables)", ", or a new file name"),
        ("sqlite-other-tables", "not a specfrontier store (no meta table)", ", or a new file name"),
    ],
    ids=["text", "sqlite-no-tables", "sqlite-other-tables"],
)
def test_tune_refuses_a_non_empty_file_that_is_no_store_and_leaves_it_unchanged(
    tmp_path: Path, content: str, said: str, fix: str
) -> None:
    target = tmp_path / "notes.db"
    if content == "text":
        target.write_text("my notes, do not lose them\n")
    elif content == "sqlite-no-tables":
        _sqlite_without_tables(target)
    else:
        db = sqlite3.connect(target)
        db.execute("CREATE TABLE contacts(name TEXT)")
        db.commit()
        db.close()
    before = target.read_bytes()
    done = _tune(tmp_path, target, "--quiet")
    line = _one_line(done, 2, "StoreRefused")  # bad input: exit 2 (issue 39)
    assert (
        line == f"StoreRefused: store = '{target}': {said}; fix: pass the --store written by `specfrontier tune`{fix}"
    )
    assert target.read_bytes() == before
    assert _listing(tmp_path) == ["c.yaml", "notes.db"]
    assert not (tmp_path / "specfrontier-logs").exists()


def test_tune_starts_a_store_in_a_zero_byte_file_and_says_so(tmp_path: Path) -> None:
    """A zero-byte file holds nothing to lose (`touch runs.db`, `mktemp`): it becomes the store, and the
    run's first line says so."""
    target = tmp_path / "runs.db"
    target.write_bytes(b"")
    done = _tune(tmp_path, target)
    assert done.returncode == 0, done.stderr
    said = " ".join(done.stdout.split())  # the first line, as rich folds it to the console's width
    assert f"-> store {target} (a new store, in the empty file that was there)" in said
    assert count_rows(target).runs == 1


def test_tune_into_a_damaged_store_refuses_with_the_recover_fix(tmp_path: Path, sim_run: tuple[Path, str]) -> None:
    store = tmp_path / "runs.db"
    shutil.copy(sim_run[0], store)
    corrupt_request_pages(store)
    before = store.read_bytes()
    done = _tune(tmp_path, store, "--quiet")
    line = _one_line(done, 2, "StoreRefused")
    assert line.startswith(f"StoreRefused: store = '{store}': opening: ")
    assert line.endswith(
        f"; fix: restore a copy, or recover what is readable with `sqlite3 {store} .recover | sqlite3 NEW.db`"
    )
    assert store.read_bytes() == before  # no new run written into it
    assert not (tmp_path / "specfrontier-logs").exists()


def test_two_runs_created_in_one_second_with_the_same_digits_get_distinct_ids(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The clock stopped on one second and the random digits forced to repeat once: the second run
    draws again instead of failing on the first run's id."""
    import specfrontier.store.sqlite as store_module

    second = datetime(2026, 12, 4, 23, 59, 59, tzinfo=UTC)

    class _Stopped(datetime):
        @classmethod
        def now(cls, tz: Any = None) -> _Stopped:
            return cls.fromtimestamp(second.timestamp(), tz)

    digits = iter(["beef", "beef", "cafe"])
    monkeypatch.setattr(store_module, "datetime", _Stopped)
    monkeypatch.setattr(store_module.secrets, "token_hex", lambda n: next(digits))
    store = Store(tmp_path / "runs.db")
    try:
        first = store.create_run(engine="sim", config={}, environment={})
        again = store.create_run(engine="sim", config={}, environment={})
    except StoreError as exc:  # what a collision did before: a duplicate-key error
        pytest.fail(f"second run in the same second failed: {exc}")
    finally:
        store.close()
    assert (first, again) == ("20261204-235959-beef", "20261204-235959-cafe")
    assert count_rows(tmp_path / "runs.db").runs == 2
