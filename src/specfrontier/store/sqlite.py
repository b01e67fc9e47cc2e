"""The SQLite result store.

WAL mode and one transaction per finished cell: a crash of the engine or of the tool loses at most the
cell in flight, and `tune --resume RUN` picks up from the cells that are stored. The schema version is
checked on open so an old tool never misreads a newer store (or the reverse). A run has at most one
writing process (`claim_run`); a run stored as running whose writer has ended reads as interrupted.
"""

from __future__ import annotations

import functools
import json
import secrets
import sqlite3
import struct
import zlib
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeVar, cast

from specfrontier.commands import resume_command
from specfrontier.errors import StoreError, StoreRefused, clip
from specfrontier.records import RequestRecord, RequestSpecStats, SpecCounters
from specfrontier.store.connect import Access, connect, read_only_access, side_files_creatable
from specfrontier.store.failures import converted, fix_for
from specfrontier.store.owner import Owner, current_owner, is_alive
from specfrontier.store.schema import DDL, MIGRATIONS, READABLE_VERSIONS, RUN_OWNER_DDL, SCHEMA_VERSION

FINAL_STATUSES = ("done", "failed", "interrupted", "incomplete")
"""Statuses of a run that ended; `incomplete`: it ended with cells missing (a setting failed), resumable."""
RUN_STATUSES = ("running", *FINAL_STATUSES)

if TYPE_CHECKING:  # numpy and the metrics come with these: imported where cells are read or written, so
    # that the commands that only list runs start light
    from specfrontier.metrics.digest import CellDigest
    from specfrontier.store.cell_requests import CellRequests
    from specfrontier.store.codec import EncodedCell, RequestHeads

_DAMAGED_FIX = (
    "fix: the store file is damaged: restore it from a copy (a stored cell is not measured again by --resume)"
)

_Method = TypeVar("_Method", bound=Callable[..., Any])
_T = TypeVar("_T")


_DONE_KEYS = {
    "closed": "SELECT setting_id, workload, concurrency, repeat FROM cell WHERE run_id=? AND load_mode='closed'",
    "open": "SELECT setting_id, workload, request_rate, repeat FROM cell WHERE run_id=? AND load_mode='open'",
}
"""Per load mode, the query for the keys of a run's stored cells (what --resume skips)."""
_RUN_ID_DRAWS = 64
"""Ids drawn for a new run before giving up (65536 per second: reached only if something is wrong)."""


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def new_run_id() -> str:
    """`YYYYMMDD-HHMMSS-xxxx` (UTC, 4 random hex digits): sorts by creation time, short to type."""
    return datetime.now(UTC).strftime("%Y%m%d-%H%M%S-") + secrets.token_hex(2)


ENGINE_WARNINGS_KEY = "engine_warnings"
"""A run environment's {setting: [warning, ...]}: what each setting's server log warned about its speed
(`EngineAdapter.performance_warnings`), written by the sweep and printed by the report."""

DRIFT_REFERENCE_KEY = "drift_reference"
"""A run environment's end-of-run drift reference (`drift_control: reference`, runs.sweep): the setting
measured again on one more launch after every setting, its startup and its whole cost in seconds, or why it
failed; analysis.drift reads it."""

REFERENCE_REPEAT = -1
"""The repeat index of an end-of-run drift reference cell: stored like a repeat of its setting's cell, but
no repeat of it (`Store.cells` leaves such cells out unless asked for them), so the setting's figures, its
repeats and everything drawn from them stay those of its own launch; `done_cells` lists them, so `--resume`
measures a missing reference once."""

LAUNCH_ENVIRONMENT_KEY = "launch_environment"
"""A run environment's {setting: {variable: value}}: the variables the adapter set for the setting's launch
(`EngineAdapter.environment`, config-derived, never a secret), so a deployable command carries what was
measured even after the config's defaults or the engine's installation change."""


@dataclass(frozen=True, slots=True)
class RunRow:
    run_id: str
    created_at: str
    finished_at: str | None
    engine: str
    status: str
    """The status a user sees: a stored `running` whose writer has ended (crash, SIGKILL) is `interrupted`."""
    config: dict[str, Any]
    environment: dict[str, Any]
    stored_status: str | None = None
    """The status column as written (None: not read from a store)."""


def shown_status(stored: str, owner: Owner | None) -> str:
    """`interrupted` for a run stored as running whose writer is gone (or was never recorded): only a
    live process updates a run, so nobody will ever mark it finished. Derived on read, never written."""
    if stored == "running" and (owner is None or not is_alive(owner)):
        return "interrupted"
    return stored


def _run_row(r: sqlite3.Row, owner: Owner | None) -> RunRow:
    return RunRow(
        r["run_id"],
        r["created_at"],
        r["finished_at"],
        r["engine"],
        shown_status(r["status"], owner),
        json.loads(r["config_json"]),
        json.loads(r["environment_json"]),
        stored_status=r["status"],
    )


@dataclass(frozen=True, slots=True)
class SettingRow:
    setting_id: str
    position: int
    name: str
    params: dict[str, Any]
    speculative: bool
    status: str
    command: tuple[str, ...] | None
    capacity: int | None
    capacity_source: str | None
    context_tokens: int | None
    startup_s: float | None
    error: str | None
    log_path: str | None
    log_tail: str | None
    first_ttft_ms: float | None = None
    """Cold start: TTFT of the first request after launch, before warmup (None: not measured)."""
    first_e2e_ms: float | None = None


@dataclass(frozen=True, slots=True)
class CellRow:
    """One measured repeat of a cell: its window counters and every request it sent."""

    cell_id: int
    setting_id: str
    workload: str
    concurrency: int
    repeat: int
    counters: SpecCounters | None
    acceptance_source: str | None
    requests: Sequence[RequestRecord]
    """Read from the store on first use when the row came from `Store.cells` (a `CellRequests`)."""
    load_mode: str = "closed"
    request_rate: float | None = None
    """Open loop: the target rate (req/s); `concurrency` is then the in-flight cap (0: none)."""
    load: dict[str, Any] | None = None
    """Open loop: how the schedule was kept (see `specfrontier.runs.sweep.open_loop_facts`)."""
    client_health: dict[str, Any] | None = None
    """The client's lag, CPU and saturation over the window (`ClientHealth.to_json`); None: not measured."""
    stored_digest: CellDigest | None = None
    """The figures stored when the cell was recorded (None: a schema-4 cell, or older definitions)."""

    @property
    def digest(self) -> CellDigest:
        """This repeat's figures: as stored, or computed from its requests where none was stored."""
        if self.stored_digest is not None:
            return self.stored_digest
        from specfrontier.metrics.digest import digest_requests

        return digest_requests(self.requests, self.concurrency if self.request_rate is None else None)


@dataclass(frozen=True, slots=True)
class ImportedCellRow:
    """Figures of one (setting, concurrency) of an imported run, as the source table gave them."""

    setting_id: str
    concurrency: int
    per_request_tok_s: float | None
    aggregate_tok_s: float | None
    acceptance_length: float | None
    acceptance_per_position: tuple[float, ...]
    source: str
    """Where the figures came from: file and row (or table key)."""


def _guarded(doing: str, *, writes: bool) -> Callable[[_Method], _Method]:
    """Run a Store method inside `converted`: any sqlite3.Error leaves it as a one-line StoreError.

    Every method about one run takes its id as the first argument; that id goes into the message, and a
    failed write then says how to resume that run."""

    def wrap(method: _Method) -> _Method:
        @functools.wraps(method)
        def guarded(self: Store, *args: Any, **kwargs: Any) -> Any:
            run_id = args[0] if args and isinstance(args[0], str) else None
            with converted(self.path, doing, writing=writes, run_id=run_id):
                return method(self, *args, **kwargs)

        return cast(_Method, guarded)

    return wrap


class Store:
    """A SQLite file of runs. Thread-unsafe by design: one sweep writes through one Store.

    `read_only=True` is for the commands that only read (runs, report, compare, plan, schedule): the file
    is opened with `mode=ro` (see `specfrontier.store.connect`), must already hold a specfrontier store,
    and is never written; every writing method then raises StoreError. Any `sqlite3.Error` of any method
    arrives as a one-line StoreError naming the store, the step and a fix (`specfrontier.store.failures`).
    """

    def __init__(self, path: Path, *, read_only: bool = False) -> None:
        self.path = path
        self.read_only = read_only
        self.version = SCHEMA_VERSION
        """The store's schema version (an older readable one when opened read-only)."""
        self.access = Access.read_write
        """How the file is open: read-write, read-only (mode=ro) or immutable (read-only folder fallback)."""
        self.created = False
        """Whether this open created the schema (a new store)."""
        self.started_in_empty_file = False
        """Whether the new store was started in a zero-byte file that was already there (`touch`, `mktemp`):
        allowed, since it held nothing to lose, and `tune` says so instead of doing it silently."""
        with converted(path, "opening", writing=not read_only):
            if read_only:
                self._db = self._open_read_only()
            else:
                self._db = self._open_writable()

    def _open_writable(self) -> sqlite3.Connection:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(
                f"store = {str(self.path)!r}: cannot create its folder ({exc}); fix: choose a writable path"
            ) from exc
        existed = self.path.exists()
        db = connect(self.path, Access.read_write)
        try:
            self._db = db
            self._require_specfrontier(allow_empty=True)
            self._require_undamaged()
            db.execute("PRAGMA foreign_keys=ON")
            self._init_schema()
            # WAL only once the schema is in: switching writes the header page, and a second process
            # opening the new store in between would see an SQLite file with no tables, which
            # `_require_specfrontier` refuses (another program's database); until its commit it sees none
            db.execute("PRAGMA journal_mode=WAL")
            self.started_in_empty_file = existed and self.created
        except BaseException:
            db.close()
            raise
        return db

    def _open_read_only(self) -> sqlite3.Connection:
        if not self.path.is_file():
            what = "a folder, not a store file" if self.path.is_dir() else "no such file"
            raise StoreRefused(
                f"store = {str(self.path)!r}: {what}; fix: pass the --store written by `specfrontier tune`"
            )
        self.access = read_only_access(self.path, can_create_side_files=side_files_creatable(self.path))
        db = connect(self.path, self.access)
        try:
            self._db = db
            self._require_specfrontier(allow_empty=False)
            self._check_version()
        except BaseException:
            db.close()
            raise
        return db

    def _require_specfrontier(self, *, allow_empty: bool) -> None:
        """Refuse a file that holds no specfrontier store: a reader must not mistake (or turn) an empty
        file or another program's database for one; a writer may start a store only in a file with
        nothing in it (none, or zero bytes: SQLite counts no page). A file that is not SQLite at all fails
        the first read with SQLITE_NOTADB (`failures.fix_for`: not-sqlite), before anything is written."""
        tables = {r[0] for r in self._db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        if "meta" in tables:
            return
        pages = int(self._db.execute("PRAGMA page_count").fetchone()[0])
        if allow_empty and not tables and pages == 0:
            return
        what = "no meta table" if tables else "no tables" if pages == 0 else "an SQLite database with no tables"
        fix = "pass the --store written by `specfrontier tune`" + (", or a new file name" if allow_empty else "")
        raise StoreRefused(f"store = {str(self.path)!r}: not a specfrontier store ({what}); fix: {fix}")

    def _require_undamaged(self) -> None:
        """Refuse to write into a damaged store: SQLite finds a damaged page only when it reads it, so
        `tune` used to add a whole new run (exit 0) to a store whose cells could no longer be read.
        `PRAGMA quick_check` reads every page once before anything is written (0.85 s for a 512 MB store,
        warm cache); a damage it finds, or one that stops it, gets the same fix as a read that meets it."""
        problem = str(self._db.execute("PRAGMA quick_check(1)").fetchone()[0])
        if problem != "ok":
            said = clip(" ".join(problem.split()))
            fix = fix_for("corrupt", self.path, writing=True, run_id=None)
            raise StoreRefused(f"store = {str(self.path)!r}: opening: damaged ({said}){fix}")

    def _stored_version(self) -> int | None:
        row = self._db.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
        return int(row["value"]) if row else None

    def _check_version(self) -> None:
        """An old tool must never misread a newer store (or the reverse); versions it can read
        (READABLE_VERSIONS) are read as they are."""
        found = self._stored_version()
        self.version = found or SCHEMA_VERSION
        if found not in READABLE_VERSIONS:
            fix = (
                "pip install -U specfrontier (this store was written by a newer version)"
                if found is not None and found > SCHEMA_VERSION
                else "use a new --store file (this store predates the current schema)"
            )
            raise StoreRefused(
                f"store = {str(self.path)!r}: schema_version = {found}: this specfrontier reads "
                f"schema versions {', '.join(map(str, READABLE_VERSIONS))}; fix: {fix}"
            )

    def _init_schema(self) -> None:
        """Check or create the schema in one write transaction: two processes creating the same new
        store take turns, and neither sees half a schema. `run_owner` is added to older stores here."""
        with self._transaction() as db:
            if db.execute("SELECT 1 FROM sqlite_master WHERE type='table' AND name='meta'").fetchone():
                self._check_version()
                self._migrate(db)
            else:
                self.created = True
                for statement in DDL.split(";"):
                    if statement.strip():
                        db.execute(statement)
                db.execute("INSERT INTO meta(key, value) VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
                self.version = SCHEMA_VERSION
            db.execute(RUN_OWNER_DDL)

    def _migrate(self, db: sqlite3.Connection) -> None:
        """Bring an older readable store to SCHEMA_VERSION (inside the open's write transaction): its
        stored rows stay as they are and are read as before; new rows take the current layout."""
        while self.version < SCHEMA_VERSION:
            for statement in MIGRATIONS[self.version].split(";"):
                if statement.strip():
                    db.execute(statement)
            self.version += 1
            db.execute("UPDATE meta SET value=? WHERE key='schema_version'", (str(self.version),))

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        """BEGIN ... COMMIT, or ROLLBACK and re-raise; sqlite3 errors pass unconverted (callers convert)."""
        if self.read_only:
            raise StoreError(
                f"store = {str(self.path)!r}: opened read-only (by a command that only reads); "
                "fix: write through a command that writes, such as `specfrontier tune`"
            )
        self._db.execute("BEGIN IMMEDIATE")
        try:
            yield self._db
            self._db.execute("COMMIT")
        except BaseException:
            self._rollback()
            raise

    def _rollback(self) -> None:
        """Roll back what is open. SQLite may have rolled back already (disk full, I/O error); a failing
        ROLLBACK must not hide the error that caused it, so its own error is dropped."""
        if self._db.in_transaction:
            with suppress(sqlite3.Error):
                self._db.execute("ROLLBACK")

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """BEGIN ... COMMIT, or ROLLBACK and re-raise: a unit is stored whole or not at all."""
        with converted(self.path, "writing", writing=True), self._transaction() as db:
            yield db

    @_guarded("closing", writes=False)
    def close(self) -> None:
        self._db.close()

    # -- runs ----------------------------------------------------------------------------------
    @_guarded("creating a run", writes=True)
    def create_run(self, *, engine: str, config: dict[str, Any], environment: dict[str, Any]) -> str:
        """A new run, status running, claimed by this process in the same transaction.

        Its id is the second it was created plus 4 random hex digits (`new_run_id`): two runs created in
        one second (two tunes started together, a script) draw again while the drawn id is taken. The
        check and the insert share one BEGIN IMMEDIATE transaction, so no other writer can take the id
        in between; before, a collision failed the second run with a duplicate-key error."""
        with self._transaction() as db:
            run_id = new_run_id()
            for _ in range(_RUN_ID_DRAWS):
                if db.execute("SELECT 1 FROM run WHERE run_id=?", (run_id,)).fetchone() is None:
                    break
                run_id = new_run_id()
            else:
                raise StoreError(
                    f"store = {str(self.path)!r}: no free run id after {_RUN_ID_DRAWS} draws in one second; "
                    "fix: run the command again"
                )
            db.execute(
                "INSERT INTO run(run_id, created_at, engine, status, config_json, environment_json) "
                "VALUES (?, ?, ?, 'running', ?, ?)",
                (run_id, _now(), engine, json.dumps(config), json.dumps(environment)),
            )
            self._own(db, run_id)
        return run_id

    @_guarded("updating the run's config", writes=True)
    def update_run_config(self, run_id: str, config: dict[str, Any]) -> None:
        """Replace the run's stored config: a resume that changed its launch arguments or timeouts
        (runs.resume_config), so that a later resume goes on with them."""
        with self._transaction() as db:
            db.execute("UPDATE run SET config_json=? WHERE run_id=?", (json.dumps(config), run_id))

    @_guarded("setting the status", writes=True)
    def set_run_status(self, run_id: str, status: str) -> None:
        """Store a status (RUN_STATUSES); a final one also stamps finished_at."""
        if status not in RUN_STATUSES:
            raise ValueError(f"set_run_status: unknown status {status!r} (known: {', '.join(RUN_STATUSES)})")
        finished = _now() if status in FINAL_STATUSES else None
        with self._transaction() as db:
            db.execute("UPDATE run SET status=?, finished_at=? WHERE run_id=?", (status, finished, run_id))

    @_guarded("claiming", writes=True)
    def claim_run(self, run_id: str) -> None:
        """Make this process the one writer of `run_id`, or raise StoreError if a live process is.

        Check and record happen in one BEGIN IMMEDIATE transaction, so of two processes resuming the
        same run at once exactly one wins. A claim of an ended process (crash, SIGKILL, reboot) is
        taken over; claiming again from the owning process is a no-op."""
        with self._transaction() as db:
            if db.execute("SELECT 1 FROM run WHERE run_id=?", (run_id,)).fetchone() is None:
                raise self._unknown_run(run_id)
            holder = self._owners(db, run_id).get(run_id)
            if holder is not None and not holder.same_process(current_owner()) and is_alive(holder):
                raise StoreError(
                    f"run = {run_id!r}: being written by another specfrontier process (pid {holder.pid}, "
                    f"since {holder.claimed_at}); fix: wait for it to end (or stop it), then resume with "
                    f"`{resume_command(run_id, self.path)}`"
                )
            self._own(db, run_id)

    @_guarded("releasing", writes=True)
    def release_run(self, run_id: str) -> None:
        """Drop this process's claim of `run_id` (another process's claim is left alone).

        Optional for a process that ends right after: a claim of an ended process counts for nothing.
        A caller in a `finally` may suppress its StoreError so that it does not hide the first error."""
        me = current_owner()
        with self._transaction() as db:
            db.execute(
                "DELETE FROM run_owner WHERE run_id=? AND pid=? AND start_ticks IS ? AND boot_id IS ?",
                (run_id, me.pid, me.start_ticks, me.boot_id),
            )

    def _own(self, db: sqlite3.Connection, run_id: str) -> None:
        me = current_owner(_now())
        db.execute(
            "INSERT OR REPLACE INTO run_owner(run_id, pid, start_ticks, boot_id, claimed_at) VALUES (?, ?, ?, ?, ?)",
            (run_id, me.pid, me.start_ticks, me.boot_id, me.claimed_at),
        )

    def _owners(self, db: sqlite3.Connection, run_id: str | None = None) -> dict[str, Owner]:
        """Claims by run id (of one run when given); none in a store that predates `run_owner`."""
        if db.execute("SELECT 1 FROM sqlite_master WHERE type='table' AND name='run_owner'").fetchone() is None:
            return {}
        rows = db.execute("SELECT * FROM run_owner WHERE ? IS NULL OR run_id=?", (run_id, run_id)).fetchall()
        return {r["run_id"]: Owner(r["pid"], r["start_ticks"], r["boot_id"], r["claimed_at"]) for r in rows}

    @_guarded("listing runs", writes=False)
    def runs(self) -> list[RunRow]:
        rows = self._db.execute("SELECT * FROM run ORDER BY created_at, run_id").fetchall()
        owners = self._owners(self._db)
        return [_run_row(r, owners.get(r["run_id"])) for r in rows]

    @_guarded("reading", writes=False)
    def run(self, run_id: str) -> RunRow:
        row = self._db.execute("SELECT * FROM run WHERE run_id=?", (run_id,)).fetchone()
        if row is None:
            raise self._unknown_run(run_id)
        return _run_row(row, self._owners(self._db, run_id).get(run_id))

    def _unknown_run(self, run_id: str) -> StoreRefused:
        latest = self._db.execute("SELECT run_id FROM run ORDER BY created_at DESC, run_id DESC LIMIT 5").fetchall()
        known = [r[0] for r in reversed(latest)]
        return StoreRefused(
            f"run = {run_id!r}: not in store {str(self.path)!r} (latest: {', '.join(known) or 'none'}); "
            "fix: pick an id from `specfrontier runs`"
        )

    # -- settings ------------------------------------------------------------------------------
    @_guarded("adding a setting", writes=True)
    def add_setting(
        self, run_id: str, *, setting_id: str, position: int, name: str, params: dict[str, Any], speculative: bool
    ) -> None:
        with self._transaction() as db:
            db.execute(
                "INSERT OR IGNORE INTO setting(run_id, setting_id, position, name, params_json, speculative, status) "
                "VALUES (?, ?, ?, ?, ?, ?, 'pending')",
                (run_id, setting_id, position, name, json.dumps(params, sort_keys=True), int(speculative)),
            )

    @_guarded("updating the run's environment", writes=True)
    def merge_environment(self, run_id: str, key: str, value: Any) -> None:
        """Set one key of the run's environment (e.g. the node a setting ran on, learnt during the run)."""
        self._update_environment(run_id, lambda environment: {**environment, key: value})

    @_guarded("updating the run's environment", writes=True)
    def merge_environment_entry(self, run_id: str, key: str, entry: str, value: Any) -> None:
        """Set `entry` of the mapping under `key` of the run's environment (e.g. one setting's launch
        variables), read and written in one transaction so writers of other entries lose nothing."""

        def merged(environment: dict[str, Any]) -> dict[str, Any]:
            known = environment.get(key)
            return {**environment, key: {**(known if isinstance(known, dict) else {}), entry: value}}

        self._update_environment(run_id, merged)

    def _update_environment(self, run_id: str, change: Callable[[dict[str, Any]], dict[str, Any]]) -> None:
        """The run's environment read, changed and written back in one transaction."""
        with self._transaction() as db:
            row = db.execute("SELECT environment_json FROM run WHERE run_id=?", (run_id,)).fetchone()
            environment = change(json.loads(row["environment_json"]) if row else {})
            db.execute("UPDATE run SET environment_json=? WHERE run_id=?", (json.dumps(environment), run_id))

    @_guarded("updating a setting", writes=True)
    def update_setting(self, run_id: str, setting_id: str, **fields: Any) -> None:
        """Set columns of a setting row (status, command, capacity, startup_s, error, log_tail ...)."""
        allowed = {
            "status",
            "command",
            "capacity",
            "capacity_source",
            "context_tokens",
            "startup_s",
            "error",
            "log_path",
            "log_tail",
            "first_ttft_ms",
            "first_e2e_ms",
            "params",
        }
        unknown = set(fields) - allowed
        if unknown:
            raise ValueError(f"update_setting: unknown column(s) {sorted(unknown)}")
        if "command" in fields:
            fields["command_json"] = json.dumps(list(fields.pop("command")))
        if "params" in fields:  # a resume that changed the setting's launch arguments (runs.resume_config)
            fields["params_json"] = json.dumps(fields.pop("params"), sort_keys=True)
        assignments = ", ".join(f"{k}=?" for k in fields)  # keys come from the allow-list above
        with self._transaction() as db:
            db.execute(
                f"UPDATE setting SET {assignments} WHERE run_id=? AND setting_id=?",  # noqa: S608
                (*fields.values(), run_id, setting_id),
            )

    @_guarded("reading settings", writes=False)
    def settings(self, run_id: str) -> list[SettingRow]:
        rows = self._db.execute("SELECT * FROM setting WHERE run_id=? ORDER BY position", (run_id,)).fetchall()
        return [
            SettingRow(
                r["setting_id"],
                r["position"],
                r["name"],
                json.loads(r["params_json"]),
                bool(r["speculative"]),
                r["status"],
                tuple(json.loads(r["command_json"])) if r["command_json"] else None,
                r["capacity"],
                r["capacity_source"],
                r["context_tokens"],
                r["startup_s"],
                r["error"],
                r["log_path"],
                r["log_tail"],
                r["first_ttft_ms"],
                r["first_e2e_ms"],
            )
            for r in rows
        ]

    # -- cells ---------------------------------------------------------------------------------
    @_guarded("recording a cell", writes=True)
    def record_cell(
        self,
        run_id: str,
        *,
        setting_id: str,
        workload: str,
        concurrency: int,
        repeat: int,
        requests: Sequence[RequestRecord] | EncodedCell,
        counters: SpecCounters | None,
        acceptance_source: str | None,
        request_rate: float | None = None,
        load: dict[str, Any] | None = None,
        client_health: dict[str, Any] | None = None,
        digest: CellDigest | None = None,
    ) -> int:
        """Store one finished repeat of a cell and all its requests in a single transaction.

        A `request_rate` makes it an open-loop cell (`concurrency` then is the in-flight cap, 0: none).
        The requests are stored as compressed blobs with the repeat's figures: `digest`, when the caller
        computed it for its own use (`metrics.digest.try_digest(requests, C, or None for an open-loop
        cell)`), else computed here; both before the transaction, so the write lock is held only for the
        writes. Requests already encoded (`store.codec.encode_requests`: what a worker process that
        simulated the cell sends back, a few compressed kilobytes instead of every record) come with their
        digest (None: none could be computed)."""
        from specfrontier.metrics.digest import pack_digest, try_digest
        from specfrontier.store.codec import EncodedCell, encode_requests

        if isinstance(requests, EncodedCell):
            encoded = requests
        else:
            encoded = encode_requests(requests)
            digest = digest or try_digest(requests, concurrency if request_rate is None else None)

        packed = pack_digest(digest) if digest is not None else None
        with self._transaction() as db:
            cur = db.execute(
                "INSERT INTO cell(run_id, setting_id, workload, concurrency, repeat, finished_at, draft_tokens, "
                "accepted_tokens, verify_steps, accepted_per_position_json, acceptance_source, load_mode, "
                "request_rate, load_json, client_health_json) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    run_id,
                    setting_id,
                    workload,
                    concurrency,
                    repeat,
                    _now(),
                    counters.draft_tokens if counters else None,
                    counters.accepted_tokens if counters else None,
                    counters.verify_steps if counters else None,
                    json.dumps(list(counters.accepted_per_position)) if counters else None,
                    acceptance_source,
                    "closed" if request_rate is None else "open",
                    request_rate,
                    json.dumps(load) if load is not None else None,
                    json.dumps(client_health) if client_health is not None else None,
                ),
            )
            cell_id = int(cur.lastrowid or 0)
            db.executemany(
                "INSERT INTO request_blob(cell_id, part, requests, data) VALUES (?, ?, ?, ?)",
                [(cell_id, part, encoded.count, data) for part, data in encoded.parts()],
            )
            if packed is not None:
                db.execute("INSERT INTO cell_digest(cell_id, digest) VALUES (?, ?)", (cell_id, packed))
        return cell_id

    @_guarded("reading stored cells", writes=False)
    def done_cells(self, run_id: str) -> set[tuple[str, str, int, int]]:
        """(setting_id, workload, concurrency, repeat) of every stored cell: what --resume skips."""
        return {(r[0], r[1], int(r[2]), int(r[3])) for r in self._done(run_id, "closed")}

    @_guarded("reading stored cells", writes=False)
    def done_open_cells(self, run_id: str) -> set[tuple[str, str, float, int]]:
        """(setting_id, workload, request_rate, repeat) of every stored open-loop cell."""
        return {(r[0], r[1], float(r[2]), int(r[3])) for r in self._done(run_id, "open")}

    def _done(self, run_id: str, mode: Literal["closed", "open"]) -> list[Any]:
        """The key rows of a run's stored cells of one load mode (its level: concurrency, or request rate)."""
        return self._db.execute(_DONE_KEYS[mode], (run_id,)).fetchall()

    @_guarded("reading cells", writes=False)
    def cells(self, run_id: str, setting_id: str | None = None, *, reference: bool = False) -> list[CellRow]:
        """The run's cells (only one setting's when `setting_id` is given), each with its stored digest
        and its requests as a `CellRequests`, read from the store only when first used. `reference`: the
        end-of-run drift reference cells (`REFERENCE_REPEAT`) instead, which are otherwise left out."""
        from specfrontier.metrics.digest import unpack_digest

        args = (run_id, setting_id, setting_id)
        cell_rows = self._db.execute(
            "SELECT * FROM cell WHERE run_id=? AND (? IS NULL OR setting_id=?) AND (repeat = ?) = ? ORDER BY cell_id",
            (*args, REFERENCE_REPEAT, int(reference)),
        ).fetchall()
        blobs: dict[int, int] = {}
        digests: dict[int, CellDigest | None] = {}
        if self.version >= 5:
            for r in self._db.execute(
                "SELECT cell_id, requests FROM request_blob JOIN cell USING (cell_id) "
                "WHERE part='head' AND cell.run_id=? AND (? IS NULL OR cell.setting_id=?)",
                args,
            ):
                blobs[int(r[0])] = int(r[1])
            for r in self._db.execute(
                "SELECT cell_id, digest FROM cell_digest JOIN cell USING (cell_id) "
                "WHERE cell.run_id=? AND (? IS NULL OR cell.setting_id=?)",
                args,
            ):
                digests[int(r[0])] = unpack_digest(r[1])
        legacy = self._legacy_counts(args) if any(int(r["cell_id"]) not in blobs for r in cell_rows) else {}
        out = []
        for r in cell_rows:
            cell_id = int(r["cell_id"])
            counters = None
            if r["draft_tokens"] is not None:
                counters = SpecCounters(
                    r["draft_tokens"],
                    r["accepted_tokens"],
                    r["verify_steps"],
                    tuple(json.loads(r["accepted_per_position_json"] or "[]")),
                )
            requests = (
                self._stored_requests(cell_id, blobs[cell_id])
                if cell_id in blobs
                else self._legacy_requests(cell_id, legacy.get(cell_id, 0))
            )
            out.append(
                CellRow(
                    cell_id,
                    r["setting_id"],
                    r["workload"],
                    int(r["concurrency"]),
                    int(r["repeat"]),
                    counters,
                    r["acceptance_source"],
                    requests,
                    r["load_mode"],
                    r["request_rate"],
                    json.loads(r["load_json"]) if r["load_json"] else None,
                    json.loads(r["client_health_json"]) if r["client_health_json"] else None,
                    digests.get(cell_id),
                )
            )
        return out

    def _blob(self, cell_id: int, part: str) -> bytes:
        with converted(self.path, "reading requests", writing=False):
            row = self._db.execute(
                "SELECT data FROM request_blob WHERE cell_id=? AND part=?", (cell_id, part)
            ).fetchone()
        if row is None:
            raise StoreRefused(
                f"store = {str(self.path)!r}: cell {cell_id} has no {part!r} part of its requests; {_DAMAGED_FIX}"
            )
        return bytes(row[0])

    def _stored_requests(self, cell_id: int, count: int) -> CellRequests:
        """A schema-5 cell: each part read from its blob when first needed."""
        from specfrontier.store.cell_requests import CellRequests
        from specfrontier.store.codec import decode_heads, decode_requests, decode_texts

        def decoded(read: Callable[[], _T]) -> Callable[[], _T]:
            def run() -> _T:
                try:
                    return read()
                except (zlib.error, ValueError, KeyError, IndexError, struct.error, UnicodeDecodeError) as exc:
                    raise StoreRefused(
                        f"store = {str(self.path)!r}: cell {cell_id}: its stored requests cannot be decoded "
                        f"({type(exc).__name__}: {exc}); {_DAMAGED_FIX}"
                    ) from exc

            return run

        def read_all() -> tuple[RequestRecord, ...]:
            return decode_requests(
                self._blob(cell_id, "head"), self._blob(cell_id, "chunks"), self._blob(cell_id, "text")
            )

        def read_heads() -> RequestHeads:
            return decode_heads(self._blob(cell_id, "head"))

        def read_texts() -> tuple[str, ...]:
            return decode_texts(read_heads(), self._blob(cell_id, "text"))

        return CellRequests(count, decoded(read_all), decoded(read_heads), decoded(read_texts))

    def _legacy_counts(self, args: tuple[str, str | None, str | None]) -> dict[int, int]:
        """Requests per cell kept as `request` rows (schema 4)."""
        rows = self._db.execute(
            "SELECT cell_id, COUNT(*) FROM request JOIN cell USING (cell_id) "
            "WHERE cell.run_id=? AND (? IS NULL OR cell.setting_id=?) GROUP BY cell_id",
            args,
        )
        return {int(r[0]): int(r[1]) for r in rows}

    def _legacy_requests(self, cell_id: int, count: int) -> CellRequests:
        """A schema-4 cell: its `request` rows, read when first needed."""
        from specfrontier.store.cell_requests import CellRequests

        def read_all() -> tuple[RequestRecord, ...]:
            with converted(self.path, "reading requests", writing=False):
                rows = self._db.execute("SELECT * FROM request WHERE cell_id=? ORDER BY idx", (cell_id,)).fetchall()
            return tuple(_record_from_row(r) for r in rows)

        return CellRequests(count, read_all)

    # -- imported cells ------------------------------------------------------------------------
    @_guarded("recording imported cells", writes=True)
    def record_imported_cells(self, run_id: str, rows: Sequence[ImportedCellRow]) -> None:
        """Store every imported cell of a run in one transaction (all or nothing)."""
        with self._transaction() as db:
            db.executemany(
                "INSERT INTO imported_cell VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                [
                    (
                        run_id,
                        r.setting_id,
                        r.concurrency,
                        r.per_request_tok_s,
                        r.aggregate_tok_s,
                        r.acceptance_length,
                        json.dumps(list(r.acceptance_per_position)) if r.acceptance_per_position else None,
                        r.source,
                    )
                    for r in rows
                ],
            )

    @_guarded("reading imported cells", writes=False)
    def imported_cells(self, run_id: str) -> list[ImportedCellRow]:
        """The imported cells of a run (empty for a measured run)."""
        rows = self._db.execute(
            "SELECT * FROM imported_cell WHERE run_id=? ORDER BY setting_id, concurrency", (run_id,)
        ).fetchall()
        return [
            ImportedCellRow(
                r["setting_id"],
                int(r["concurrency"]),
                r["per_request_tok_s"],
                r["aggregate_tok_s"],
                r["acceptance_length"],
                tuple(json.loads(r["acceptance_per_position_json"] or "[]")),
                r["source"],
            )
            for r in rows
        ]


def _record_from_row(r: sqlite3.Row) -> RequestRecord:
    """A request of a schema-4 store (one `request` row, chunk times as JSON text)."""
    spec = None
    if r["draft_tokens"] is not None:
        spec = RequestSpecStats(r["draft_tokens"], r["accepted_tokens"], r["verify_steps"])
    return RequestRecord(
        prompt_id=r["prompt_id"],
        send_ns=r["send_ns"],
        end_ns=r["end_ns"],
        first_token_ns=r["first_token_ns"],
        chunk_ns=tuple(json.loads(r["chunk_ns_json"])),
        chunk_tokens=tuple(json.loads(r["chunk_tokens_json"])) if r["chunk_tokens_json"] else None,
        prompt_tokens=r["prompt_tokens"],
        completion_tokens=r["completion_tokens"],
        spec=spec,
        finish_reason=r["finish_reason"],
        output_text=r["output_text"],
        error=r["error"],
    )


__all__ = ["FINAL_STATUSES", "RUN_STATUSES", "CellRow", "RunRow", "SettingRow", "Store", "shown_status"]
