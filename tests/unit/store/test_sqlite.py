"""The SQLite store: exact round trips, one transaction per unit, crash safety, schema and id checks."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from builders import StoredRun
from builders import record_ms as _record
from specfrontier.errors import StoreError
from specfrontier.records import RequestRecord, RequestSpecStats, SpecCounters
from specfrontier.store import SCHEMA_VERSION, Store

MS = 1_000_000  # ns per ms


def _store_with_setting(path: Path, *names: str) -> tuple[Store, str]:
    run = StoredRun(path, config={"repeats": 3}, environment={"cpu": "x"})
    for name in names or ("baseline",):
        run.setting(name)
    return run.store, run.run_id


def _cell(
    store: Store, run_id: str, requests: list[RequestRecord], *, repeat: int = 0, setting: str = "baseline"
) -> int:
    return StoredRun.of(store, run_id).cell(setting, 2, requests, repeat=repeat)


# Every field set to something unusual at least once: huge perf_counter stamps, chunk tuples, None and
# empty chunk_tokens, spec with and without verify_steps, errors, unicode and markup in the text.
BIG = 2**62
RECORDS = [
    RequestRecord(
        prompt_id="chat-ünï-0",
        send_ns=BIG,
        end_ns=BIG + 900 * MS,
        first_token_ns=BIG + 100 * MS,
        chunk_ns=(BIG + 100 * MS, BIG + 500 * MS, BIG + 900 * MS),
        chunk_tokens=(1, 3, 2),
        prompt_tokens=17,
        completion_tokens=6,
        spec=RequestSpecStats(draft_tokens=8, accepted_tokens=5, verify_steps=3),
        finish_reason="length",
        output_text='héllo 世界 🚀 <script>alert("x")</script> | a\nb\ttab',
    ),
    RequestRecord(
        prompt_id="p1",
        send_ns=0,
        end_ns=10,
        first_token_ns=5,
        chunk_ns=(5, 10),
        chunk_tokens=None,
        completion_tokens=2,
        spec=RequestSpecStats(draft_tokens=0, accepted_tokens=0),
        finish_reason="stop",
    ),
    RequestRecord(prompt_id="p2", send_ns=3, end_ns=3, first_token_ns=None, chunk_tokens=(), completion_tokens=0),
    _record(0, None, 7, None, error="http 500: boom 'quoted' \"dq\" ✗"),
]


def test_round_trip_reproduces_every_request_field(tmp_path: Path) -> None:
    path = tmp_path / "deep" / "store.db"
    store, run_id = _store_with_setting(path, "baseline", "ngram")
    counters = SpecCounters(draft_tokens=40, accepted_tokens=25, verify_steps=12, accepted_per_position=(9, 7, 0, 9))
    cell_id = store.record_cell(
        run_id,
        setting_id="ngram",
        workload="builtin:cpu-mix t=0",
        concurrency=4,
        repeat=2,
        requests=RECORDS,
        counters=counters,
        acceptance_source="metrics",
    )
    store.close()

    reopened = Store(path)
    (cell,) = reopened.cells(run_id)
    assert cell.cell_id == cell_id
    assert (cell.setting_id, cell.workload, cell.concurrency, cell.repeat) == ("ngram", "builtin:cpu-mix t=0", 4, 2)
    assert cell.counters == counters
    assert cell.acceptance_source == "metrics"
    assert cell.requests == tuple(RECORDS)  # dataclass equality: every field, in order
    # JSON columns come back as the tuple types the dataclass declares, None and () kept apart
    assert type(cell.requests[0].chunk_ns) is tuple
    assert type(cell.requests[0].chunk_tokens) is tuple
    assert cell.requests[1].chunk_tokens is None
    assert cell.requests[2].chunk_tokens == ()
    assert cell.requests[1].spec == RequestSpecStats(0, 0, None)
    assert cell.requests[3].spec is None and cell.requests[3].error == "http 500: boom 'quoted' \"dq\" ✗"
    reopened.close()


def test_run_and_setting_rows_round_trip(tmp_path: Path) -> None:
    store = Store(tmp_path / "s.db")
    config = {"settings": [{"name": "ngram", "spec_type": "ngram-simple"}], "concurrency": [1, 2, 4]}
    environment = {"cpu": "Xeon ü", "cpu_count": 16}
    run_id = store.create_run(engine="llamacpp", config=config, environment=environment)
    params = {"spec_type": "ngram-simple", "ngram_size_n": 3, "extra_args": ["--foo", "a b"]}
    store.add_setting(run_id, setting_id="ngram", position=0, name="ngram", params=params, speculative=True)
    command = ("/opt/llama server", "-m", "model.gguf", "--spec-type", "ngram-simple")
    store.update_setting(
        run_id,
        "ngram",
        status="ok",
        command=command,
        capacity=4,
        capacity_source="/props total_slots",
        context_tokens=8192,
        startup_s=1.25,
        log_path="/tmp/log.txt",
    )
    store.set_run_status(run_id, "done")

    run = store.run(run_id)
    assert (run.run_id, run.engine, run.status) == (run_id, "llamacpp", "done")
    assert run.config == config and run.environment == environment
    assert run.finished_at is not None
    (s,) = store.settings(run_id)
    assert (s.setting_id, s.position, s.name, s.params, s.speculative, s.status) == (
        "ngram",
        0,
        "ngram",
        params,
        True,
        "ok",
    )
    assert s.command == command
    assert (s.capacity, s.capacity_source, s.context_tokens, s.startup_s) == (4, "/props total_slots", 8192, 1.25)
    assert (s.error, s.log_path, s.log_tail) == (None, "/tmp/log.txt", None)
    store.close()


def test_done_cells_lists_stored_repeats_of_this_run_only(tmp_path: Path) -> None:
    store, run_id = _store_with_setting(tmp_path / "s.db", "baseline", "ngram")
    other = store.create_run(engine="llamacpp", config={}, environment={})
    store.add_setting(other, setting_id="baseline", position=0, name="baseline", params={}, speculative=False)
    assert store.done_cells(run_id) == set()
    _cell(store, run_id, [_record(0, 1, 2, 2)], repeat=0)
    _cell(store, run_id, [_record(0, 1, 2, 2)], repeat=1)
    _cell(store, run_id, [_record(0, 1, 2, 2)], repeat=0, setting="ngram")
    _cell(store, other, [_record(0, 1, 2, 2)], repeat=5)
    assert store.done_cells(run_id) == {("baseline", "w", 2, 0), ("baseline", "w", 2, 1), ("ngram", "w", 2, 0)}
    assert store.done_cells(other) == {("baseline", "w", 2, 5)}
    store.close()


def test_exception_inside_transaction_leaves_nothing(tmp_path: Path) -> None:
    store = Store(tmp_path / "s.db")
    with pytest.raises(RuntimeError, match="midway"), store.transaction() as db:
        db.execute(
            "INSERT INTO run(run_id, created_at, engine, status, config_json, environment_json) "
            "VALUES ('r1', 'now', 'llamacpp', 'running', '{}', '{}')"
        )
        raise RuntimeError("midway")
    assert store.runs() == []
    # The connection is usable again (no transaction left open).
    run_id = store.create_run(engine="llamacpp", config={}, environment={})
    assert [r.run_id for r in store.runs()] == [run_id]
    store.close()


def test_record_cell_failing_on_its_last_write_stores_no_cell(tmp_path: Path) -> None:
    store, run_id = _store_with_setting(tmp_path / "s.db")
    with sqlite3.connect(tmp_path / "s.db") as db:  # a digest already there for the next cell (no foreign keys)
        db.execute("INSERT INTO cell_digest(cell_id, digest) VALUES (1, x'00')")
    with pytest.raises(StoreError, match=r"recording a cell: UNIQUE constraint failed: cell_digest\.cell_id") as info:
        _cell(store, run_id, [_record(0, 1, 2, 2)])
    assert isinstance(info.value.__cause__, sqlite3.IntegrityError)
    assert store.cells(run_id) == []
    assert store.done_cells(run_id) == set()
    store.close()


def test_cell_survives_a_close_and_reopen(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    store, run_id = _store_with_setting(path)
    _cell(store, run_id, [_record(0, 10, 100, 5)])
    store.close()
    again = Store(path)
    assert again.done_cells(run_id) == {("baseline", "w", 2, 0)}
    assert again.cells(run_id)[0].requests == (_record(0, 10, 100, 5),)
    again.close()


def test_cell_survives_a_hard_crash_of_the_writer(tmp_path: Path) -> None:
    """The writing process dies (os._exit, no close, no cleanup) right after record_cell returns."""
    path = tmp_path / "s.db"
    script = textwrap.dedent(
        f"""
        import os
        from pathlib import Path
        from specfrontier.records import RequestRecord
        from specfrontier.store import Store
        s = Store(Path({str(path)!r}))
        run_id = s.create_run(engine="llamacpp", config={{}}, environment={{}})
        s.add_setting(run_id, setting_id="b", position=0, name="b", params={{}}, speculative=False)
        s.record_cell(run_id, setting_id="b", workload="w", concurrency=1, repeat=0,
                      requests=[RequestRecord("p", 0, 9, 4, completion_tokens=3)], counters=None,
                      acceptance_source=None)
        print(run_id, flush=True)
        os._exit(9)
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 9, done.stderr
    run_id = done.stdout.strip()
    store = Store(path)
    assert store.done_cells(run_id) == {("b", "w", 1, 0)}
    assert store.cells(run_id)[0].requests[0].completion_tokens == 3
    store.close()


def _set_schema_version(path: Path, value: str) -> None:
    db = sqlite3.connect(path)
    with db:
        db.execute("UPDATE meta SET value=? WHERE key='schema_version'", (value,))
    db.close()


def test_newer_schema_version_is_refused_with_the_fix(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    Store(path).close()
    _set_schema_version(path, "999")
    with pytest.raises(StoreError) as info:
        Store(path)
    message = str(info.value)
    assert "schema_version = 999" in message
    assert f"reads schema versions 4, {SCHEMA_VERSION}" in message
    assert "fix: pip install -U specfrontier" in message


def test_older_schema_version_is_refused_with_the_fix(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    Store(path).close()
    _set_schema_version(path, "0")
    with pytest.raises(StoreError, match=r"schema_version = 0: .*fix: use a new --store file"):
        Store(path)


def test_a_file_that_is_not_sqlite_is_a_store_error(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_text("not a database at all, just some text " * 100, encoding="utf-8")
    with pytest.raises(StoreError, match=r"notes\.txt.*fix:"):
        Store(path)


def test_unknown_run_lists_known_ids(tmp_path: Path) -> None:
    store = Store(tmp_path / "s.db")
    with pytest.raises(StoreError, match=r"run = 'nope': .*latest: none.*fix:"):
        store.run("nope")
    first = store.create_run(engine="llamacpp", config={}, environment={})
    second = store.create_run(engine="llamacpp", config={}, environment={})
    with pytest.raises(StoreError) as info:
        store.run("nope")
    message = str(info.value)
    assert first in message and second in message
    assert "specfrontier runs" in message
    store.close()


@pytest.mark.parametrize("column", ["name", "params_json", "status=1, name", "position"])
def test_update_setting_rejects_unknown_columns(tmp_path: Path, column: str) -> None:
    store, run_id = _store_with_setting(tmp_path / "s.db")
    with pytest.raises(ValueError, match="unknown column"):
        store.update_setting(run_id, "baseline", **{column: "x"})
    (s,) = store.settings(run_id)
    assert (s.name, s.status, s.params) == ("baseline", "pending", {})
    store.close()


def test_wal_journal_mode_is_on(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    store = Store(path)
    assert store._db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    store.close()
    # WAL is persistent: a plain connection opened later sees it too.
    db = sqlite3.connect(path)
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    db.close()


def test_open_loop_cells_are_keyed_by_rate_and_round_trip(tmp_path: Path) -> None:
    store, run_id = _store_with_setting(tmp_path / "s.db")
    facts = {"target_rate": 2.0, "sent": 3, "measured": 1, "cap_waits": 0}
    for rate in (2.0, 4.0):
        store.record_cell(
            run_id,
            setting_id="baseline",
            workload="w",
            concurrency=0,
            repeat=0,
            requests=[_record(0, 1, 2, 2)],
            counters=None,
            acceptance_source=None,
            request_rate=rate,
            load={**facts, "target_rate": rate},
        )
    _cell(store, run_id, [_record(0, 1, 2, 2)])  # a closed-loop cell alongside
    rows = {(c.load_mode, c.request_rate): c for c in store.cells(run_id)}
    assert set(rows) == {("open", 2.0), ("open", 4.0), ("closed", None)}
    assert rows[("open", 4.0)].load == {**facts, "target_rate": 4.0}
    assert rows[("closed", None)].load is None and rows[("closed", None)].concurrency == 2
    assert store.done_open_cells(run_id) == {("baseline", "w", 2.0, 0), ("baseline", "w", 4.0, 0)}
    assert store.done_cells(run_id) == {("baseline", "w", 2, 0)}
    with pytest.raises(StoreError, match=r"UNIQUE constraint failed.*fix: let one `specfrontier tune --resume"):
        _cell(store, run_id, [_record(0, 1, 2, 2)])  # the same closed cell twice
    store.update_setting(run_id, "baseline", first_ttft_ms=12.5, first_e2e_ms=80.0)
    setting = store.settings(run_id)[0]
    assert (setting.first_ttft_ms, setting.first_e2e_ms) == (12.5, 80.0)
    store.close()


def test_an_undecodable_request_blob_is_one_store_error_naming_the_cell(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    store, run_id = _store_with_setting(path)
    cell_id = _cell(store, run_id, [_record(0, 10, 100, 5)])
    with sqlite3.connect(path) as db:
        db.execute("UPDATE request_blob SET data = x'00ff' WHERE cell_id=? AND part='chunks'", (cell_id,))
    (cell,) = store.cells(run_id)
    assert cell.stored_digest is not None and cell.digest.metrics.requests == 1  # figures still read
    with pytest.raises(StoreError, match=rf"cell {cell_id}: its stored requests cannot be decoded .*restore it"):
        list(cell.requests)
    store.close()


def test_a_damaged_digest_is_computed_again_from_the_requests(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    store, run_id = _store_with_setting(path)
    _cell(store, run_id, [_record(0, 10, 100, 5), _record(20, 30, 150, 5)])
    (stored,) = store.cells(run_id)
    with sqlite3.connect(path) as db:
        db.execute("UPDATE cell_digest SET digest = x'78'")
    (cell,) = store.cells(run_id)
    assert stored.stored_digest is not None and cell.stored_digest is None
    assert cell.digest == stored.stored_digest
    store.close()
