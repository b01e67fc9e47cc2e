"""Store failures as one-line StoreErrors, and read-only stores that are never written.

Every failure here is a real one of a real SQLite file: a write refused by SQLite (`PRAGMA query_only`,
as root too, where chmod stops nothing), a full database (`PRAGMA max_page_count`), a page overwritten
with garbage, a read-only file or folder (as a non-root user), an empty file, another program's database.
"""

from __future__ import annotations

import hashlib
import sqlite3
from dataclasses import replace
from pathlib import Path

import pytest

from builders import StoredRun, chmod_binds, record_ms
from specfrontier.errors import StoreError
from specfrontier.store import Store
from specfrontier.store.connect import Access, connect, read_only_access, side_files, uri

CHMOD_BINDS = chmod_binds()


def _filled(path: Path, *, cells: int = 6, requests: int = 8) -> tuple[Store, str]:
    """An open store with one run of `cells` cells; long texts make the file span many pages."""
    run = StoredRun(path, config={"repeats": cells}).setting("b")
    for repeat in range(cells):
        _cell(run.store, run.run_id, repeat, requests)
    return run.store, run.run_id


def _text(repeat: int, i: int) -> str:
    """1 KB of hex digits that do not repeat (the store compresses texts: these still take ~500 bytes)."""
    return f"cell {repeat} " + "".join(hashlib.sha256(f"{repeat}-{i}-{k}".encode()).hexdigest() for k in range(16))


def _cell(store: Store, run_id: str, repeat: int, requests: int = 8) -> int:
    records = [replace(record_ms(0, 10, 100 + i, 30), output_text=_text(repeat, i)) for i in range(requests)]
    return StoredRun.of(store, run_id).cell("b", 1, records, repeat=repeat)


def _closed(path: Path, **kwargs: int) -> str:
    """A filled store, closed and checkpointed: the main file holds everything, no -wal is left."""
    store, run_id = _filled(path, **kwargs)
    store.close()
    assert not side_files(path)[0].exists()
    return run_id


def _reads_immutably(path: Path, run_id: str, *, cells: int) -> None:
    """Opened read-only, the store at `path` is read through the immutable fallback, all its `cells` cells, and
    its folder holds nothing else afterwards (no -wal, no -shm)."""
    store = Store(path, read_only=True)
    assert store.access is Access.immutable
    assert len(store.cells(run_id)) == cells
    store.close()
    assert sorted(p.name for p in path.parent.iterdir()) == ["runs.db"]


def _snapshot(path: Path) -> tuple[bytes, int]:
    return path.read_bytes(), path.stat().st_mtime_ns


def _one_line(exc: pytest.ExceptionInfo[StoreError]) -> str:
    message = str(exc.value)
    assert "\n" not in message and "; fix: " in message, message
    return message


# -- writes that fail mid-run ------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("pragma", "said"),
    [
        ("PRAGMA query_only=ON", "attempt to write a readonly database"),
        ("PRAGMA max_page_count={pages}", "database or disk is full"),
    ],
)
def test_a_write_failing_mid_run_is_one_store_error_that_says_how_to_resume(
    tmp_path: Path, pragma: str, said: str
) -> None:
    path = tmp_path / "runs.db"
    store, run_id = _filled(path, cells=2)
    pages = store._db.execute("PRAGMA page_count").fetchone()[0]
    store._db.execute(pragma.format(pages=pages))  # SQLite itself now refuses every further write
    with pytest.raises(StoreError) as info:
        _cell(store, run_id, repeat=2)
    message = _one_line(info)
    assert message.startswith(f"store = {str(path)!r}, run = {run_id!r}: recording a cell: {said}")
    assert "results stored before it are kept" in message
    assert f"then resume the run with `specfrontier tune --resume {run_id} --store {path}`" in message
    assert isinstance(info.value.__cause__, sqlite3.Error)
    store.close()
    again = Store(path)
    assert again.done_cells(run_id) == {("b", "w", 1, 0), ("b", "w", 1, 1)}  # kept; the failed cell left nothing
    assert again.run(run_id).stored_status == "running"
    again.close()


def test_a_failed_write_leaves_the_store_usable(tmp_path: Path) -> None:
    store, run_id = _filled(tmp_path / "runs.db", cells=1)
    store._db.execute("PRAGMA query_only=ON")
    with pytest.raises(StoreError, match=r"updating a setting: attempt to write a readonly database"):
        store.update_setting(run_id, "b", status="running")
    with pytest.raises(StoreError, match=r"setting the status: .*; fix: .*--resume"):
        store.set_run_status(run_id, "failed")  # what the sweep does next fails the same way, in one line
    store._db.execute("PRAGMA query_only=OFF")
    assert not store._db.in_transaction  # rolled back, not left open
    store.update_setting(run_id, "b", status="done")
    assert store.settings(run_id)[0].status == "done"
    store.close()


@pytest.mark.skipif(not CHMOD_BINDS, reason="chmod binds no root; SQLITE_READONLY is covered by query_only above")
def test_resuming_into_a_read_only_file_gets_the_fix(tmp_path: Path, writable_again: None) -> None:
    """SQLite opens a read-only file read-only without a word; the first write (`tune --resume`
    claims the run before it launches anything) is the one-line error."""
    path = tmp_path / "runs.db"
    run_id = _closed(path, cells=1)
    path.chmod(0o444)
    before = _snapshot(path)
    store = Store(path)
    with pytest.raises(StoreError) as info:
        store.claim_run(run_id)
    message = _one_line(info)
    assert message.startswith(f"store = {str(path)!r}, run = {run_id!r}: claiming: attempt to write a readonly")
    assert message.endswith(
        f"fix: make {path} and its folder writable, then resume the run with "
        f"`specfrontier tune --resume {run_id} --store {path}`"
    )
    store.close()
    assert _snapshot(path) == before


def test_a_folder_as_store_is_one_store_error(tmp_path: Path) -> None:
    with pytest.raises(StoreError) as info:
        Store(tmp_path)
    assert "unable to open database file" in _one_line(info)
    with pytest.raises(StoreError, match=r": a folder, not a store file; fix: pass the --store written by"):
        Store(tmp_path, read_only=True)


# -- damaged files ---------------------------------------------------------------------------------------
def _corrupt_middle_page(path: Path) -> None:
    """Overwrite the root page of the `request_blob` table (a page in the middle of the file) with 0xFF."""
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    page_size = db.execute("PRAGMA page_size").fetchone()[0]
    pages = db.execute("PRAGMA page_count").fetchone()[0]
    root = db.execute("SELECT rootpage FROM sqlite_master WHERE name='request_blob'").fetchone()[0]
    db.close()
    assert 1 < root < pages and pages > 10, (root, pages)
    with path.open("r+b") as fh:
        fh.seek((root - 1) * page_size)
        fh.write(b"\xff" * page_size)


def test_a_damaged_page_is_one_store_error_with_the_recover_fix(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    run_id = _closed(path)
    _corrupt_middle_page(path)
    store = Store(path, read_only=True)  # page 1 (the schema) is intact: the damage shows on reading
    assert store.run(run_id).run_id == run_id
    with pytest.raises(StoreError) as info:
        store.cells(run_id)
    message = _one_line(info)
    assert message.startswith(f"store = {str(path)!r}, run = {run_id!r}: reading cells: ")
    assert "database disk image is malformed" in message
    assert message.endswith(
        f"; fix: restore a copy, or recover what is readable with `sqlite3 {path} .recover | sqlite3 NEW.db`"
    )
    store.close()


def test_a_damaged_page_refuses_a_writable_open_before_anything_is_written(tmp_path: Path) -> None:
    """A writer checks every page first (`PRAGMA quick_check`): nothing is added to a damaged store."""
    path = tmp_path / "runs.db"
    _closed(path)
    _corrupt_middle_page(path)
    before = _snapshot(path)
    with pytest.raises(StoreError) as info:
        Store(path)
    message = _one_line(info)
    assert message.startswith(f"store = {str(path)!r}: opening: damaged (*** in database main *** Page ")
    assert message.endswith(
        f"; fix: restore a copy, or recover what is readable with `sqlite3 {path} .recover | sqlite3 NEW.db`"
    )
    assert _snapshot(path) == before


def test_a_text_file_is_not_an_sqlite_file(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_text("not a database at all, just some text " * 100, encoding="utf-8")
    before = _snapshot(path)
    with pytest.raises(StoreError) as info:
        Store(path, read_only=True)
    assert "file is not a database" in _one_line(info)
    assert "fix: pass the --store written by `specfrontier tune`" in str(info.value)
    assert _snapshot(path) == before


# -- read-only stores ------------------------------------------------------------------------------------
def test_reading_a_store_read_only_never_writes_it(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    run_id = _closed(path)
    before = _snapshot(path)
    store = Store(path, read_only=True)
    assert store.access is Access.read_only
    assert [r.run_id for r in store.runs()] == [run_id]
    assert store.run(run_id).config == {"repeats": 6}
    assert len(store.cells(run_id)) == 6 and store.settings(run_id)[0].name == "b"
    assert store.imported_cells(run_id) == [] and len(store.done_cells(run_id)) == 6
    store.close()
    assert _snapshot(path) == before


def test_writing_through_a_read_only_store_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    run_id = _closed(path, cells=1)
    before = _snapshot(path)
    store = Store(path, read_only=True)
    writes = [
        lambda: store.create_run(engine="x", config={}, environment={}),
        lambda: store.set_run_status(run_id, "done"),
        lambda: store.add_setting(run_id, setting_id="n", position=1, name="n", params={}, speculative=True),
        lambda: store.update_setting(run_id, "b", status="done"),
        lambda: _cell(store, run_id, repeat=9),
        lambda: store.record_imported_cells(run_id, []),
        lambda: store.claim_run(run_id),
        lambda: store.release_run(run_id),
    ]
    for write in writes:
        with pytest.raises(StoreError, match=r"opened read-only .*; fix: "):
            write()
    with pytest.raises(StoreError, match="opened read-only"), store.transaction():
        pass
    store.close()
    assert _snapshot(path) == before


def test_a_read_only_reader_sees_what_a_running_writer_committed(tmp_path: Path) -> None:
    """mode=ro (not immutable) is the default because it reads the -wal of a sweep in progress."""
    path = tmp_path / "runs.db"
    writer, run_id = _filled(path, cells=2)
    assert side_files(path)[0].stat().st_size > 0  # the cells are in the -wal, not yet in the main file
    reader = Store(path, read_only=True)
    assert len(reader.cells(run_id)) == 2
    assert reader.run(run_id).status == "running"  # the writer is this (live) process
    reader.close()
    writer.close()


@pytest.mark.parametrize(("content", "what"), [(b"", "no tables"), (None, "no meta table")])
def test_a_file_without_the_schema_is_refused_unchanged(tmp_path: Path, content: bytes | None, what: str) -> None:
    path = tmp_path / "empty.txt"
    if content is None:  # another program's SQLite database
        db = sqlite3.connect(path)
        db.execute("CREATE TABLE notes(text)")
        db.commit()
        db.close()
    else:
        path.write_bytes(content)
    before = _snapshot(path)
    with pytest.raises(StoreError) as info:
        Store(path, read_only=True)
    assert _one_line(info) == (
        f"store = {str(path)!r}: not a specfrontier store ({what}); fix: pass the --store written by "
        "`specfrontier tune`"
    )
    assert _snapshot(path) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty.txt"]  # no -wal, no -shm, no journal


def test_a_writer_refuses_another_programs_database(tmp_path: Path) -> None:
    path = tmp_path / "other.db"
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE notes(text)")
    db.commit()
    db.close()
    before = _snapshot(path)
    with pytest.raises(StoreError, match=r"not a specfrontier store \(no meta table\); fix: .*or a new file name"):
        Store(path)
    assert _snapshot(path) == before


def test_a_missing_store_is_not_created_by_a_reader(tmp_path: Path) -> None:
    path = tmp_path / "nope.db"
    with pytest.raises(StoreError, match=r"nope\.db': no such file; fix: pass the --store written by"):
        Store(path, read_only=True)
    assert not path.exists()


# -- the read-only folder fallback ----------------------------------------------------------------------
def test_the_fallback_is_chosen_only_where_side_files_cannot_be_created(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    _closed(path, cells=1)
    assert read_only_access(path, can_create_side_files=True) is Access.read_only
    assert read_only_access(path, can_create_side_files=False) is Access.immutable
    side_files(path)[1].write_bytes(b"")  # an -shm exists: a WAL reader can use it without creating one
    assert read_only_access(path, can_create_side_files=False) is Access.read_only
    assert uri(tmp_path / "a b?.db", Access.immutable).endswith("/a%20b%3F.db?mode=ro&immutable=1")


def test_the_immutable_fallback_reads_the_store_and_creates_no_side_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As in a read-only folder: the Store asks `side_files_creatable`, which says no there."""
    path = tmp_path / "runs.db"
    run_id = _closed(path, cells=3)
    before = _snapshot(path)
    monkeypatch.setattr("specfrontier.store.sqlite.side_files_creatable", lambda _path: False)
    _reads_immutably(path, run_id, cells=3)
    assert _snapshot(path) == before
    db = connect(path, Access.immutable)  # the URI really is immutable: no side file even for a raw reader
    assert db.execute("SELECT COUNT(*) FROM cell").fetchone()[0] == 3
    db.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["runs.db"]


def test_the_fallback_refuses_to_hide_results_still_in_the_wal(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    writer, _ = _filled(path, cells=1)  # open: its cells are in a non-empty -wal
    side_files(path)[1].unlink()  # as if the folder were read-only and no -shm could exist
    with pytest.raises(StoreError, match=r"runs\.db-wal holds results not yet in the main file.*; fix: make "):
        read_only_access(path, can_create_side_files=False)
    writer.close()


@pytest.mark.skipif(not CHMOD_BINDS, reason="root creates files in a 0555 folder; the fallback is tested above")
def test_a_read_only_folder_is_read_through_the_fallback(tmp_path: Path, writable_again: None) -> None:
    folder = tmp_path / "ro"
    folder.mkdir()
    path = folder / "runs.db"
    run_id = _closed(path, cells=2)
    path.chmod(0o444)
    folder.chmod(0o555)
    before = _snapshot(path)
    _reads_immutably(path, run_id, cells=2)
    assert _snapshot(path) == before
