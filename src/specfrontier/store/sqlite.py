"""The SQLite result store.

WAL mode and one transaction per finished cell: a crash of the engine or of the tool loses at most the
cell in flight, and `tune --resume RUN` picks up from the cells that are stored. The schema version is
checked on open so an old tool never misreads a newer store (or the reverse).
"""

from __future__ import annotations

import json
import secrets
import sqlite3
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from specfrontier.errors import StoreError
from specfrontier.records import RequestRecord, RequestSpecStats, SpecCounters
from specfrontier.store.schema import DDL, SCHEMA_VERSION


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


@dataclass(frozen=True, slots=True)
class RunRow:
    run_id: str
    created_at: str
    finished_at: str | None
    engine: str
    status: str
    config: dict[str, Any]
    environment: dict[str, Any]


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
    requests: tuple[RequestRecord, ...]
    load_mode: str = "closed"
    request_rate: float | None = None
    """Open loop: the target rate (req/s); `concurrency` is then the in-flight cap (0: none)."""
    load: dict[str, Any] | None = None
    """Open loop: how the schedule was kept (see `specfrontier.sweep.open_loop_facts`)."""
    client_health: dict[str, Any] | None = None
    """The client's lag, CPU and saturation over the window (`ClientHealth.to_json`); None: not measured."""


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


class Store:
    """A SQLite file of runs. Thread-unsafe by design: one sweep writes through one Store."""

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(path, isolation_level=None)
        except (OSError, sqlite3.Error) as exc:
            raise StoreError(f"store = {str(path)!r}: cannot open ({exc}); fix: choose a writable path") from exc
        self._db.row_factory = sqlite3.Row
        try:
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA foreign_keys=ON")
            self._init_schema()
        except sqlite3.DatabaseError as exc:
            self._db.close()
            raise StoreError(
                f"store = {str(path)!r}: cannot be used as a store ({exc}); "
                "fix: pass a store written by `specfrontier tune`, or a new path"
            ) from exc
        except StoreError:
            self._db.close()
            raise

    def _init_schema(self) -> None:
        has_meta = self._db.execute("SELECT 1 FROM sqlite_master WHERE name='meta'").fetchone()
        if has_meta:
            row = self._db.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
            found = int(row["value"]) if row else None
            if found != SCHEMA_VERSION:
                fix = (
                    "pip install -U specfrontier (this store was written by a newer version)"
                    if found is not None and found > SCHEMA_VERSION
                    else "use a new --store file (this store predates the current schema)"
                )
                raise StoreError(
                    f"store = {str(self.path)!r}: schema_version = {found}: this specfrontier reads "
                    f"version {SCHEMA_VERSION}; fix: {fix}"
                )
        if not has_meta:
            self._db.executescript(DDL)  # CREATE ... IF NOT EXISTS: safe if two processes race here
        self._db.execute("INSERT OR IGNORE INTO meta(key, value) VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """BEGIN ... COMMIT, or ROLLBACK and re-raise: a unit is stored whole or not at all."""
        self._db.execute("BEGIN IMMEDIATE")
        try:
            yield self._db
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")

    def close(self) -> None:
        self._db.close()

    # -- runs ----------------------------------------------------------------------------------
    def create_run(self, *, engine: str, config: dict[str, Any], environment: dict[str, Any]) -> str:
        run_id = datetime.now(UTC).strftime("%Y%m%d-%H%M%S-") + secrets.token_hex(2)
        with self.transaction() as db:
            db.execute(
                "INSERT INTO run(run_id, created_at, engine, status, config_json, environment_json) "
                "VALUES (?, ?, ?, 'running', ?, ?)",
                (run_id, _now(), engine, json.dumps(config), json.dumps(environment)),
            )
        return run_id

    def set_run_status(self, run_id: str, status: str) -> None:
        finished = _now() if status in ("done", "failed", "interrupted") else None
        with self.transaction() as db:
            db.execute("UPDATE run SET status=?, finished_at=? WHERE run_id=?", (status, finished, run_id))

    def runs(self) -> list[RunRow]:
        rows = self._db.execute("SELECT * FROM run ORDER BY created_at, run_id").fetchall()
        return [self._run_row(r) for r in rows]

    def run(self, run_id: str) -> RunRow:
        row = self._db.execute("SELECT * FROM run WHERE run_id=?", (run_id,)).fetchone()
        if row is None:
            known = [r.run_id for r in self.runs()][-5:]
            raise StoreError(
                f"run = {run_id!r}: not in store {str(self.path)!r} (latest: {', '.join(known) or 'none'}); "
                "fix: pick an id from `specfrontier runs`"
            )
        return self._run_row(row)

    @staticmethod
    def _run_row(r: sqlite3.Row) -> RunRow:
        return RunRow(
            r["run_id"],
            r["created_at"],
            r["finished_at"],
            r["engine"],
            r["status"],
            json.loads(r["config_json"]),
            json.loads(r["environment_json"]),
        )

    # -- settings ------------------------------------------------------------------------------
    def add_setting(
        self, run_id: str, *, setting_id: str, position: int, name: str, params: dict[str, Any], speculative: bool
    ) -> None:
        with self.transaction() as db:
            db.execute(
                "INSERT OR IGNORE INTO setting(run_id, setting_id, position, name, params_json, speculative, status) "
                "VALUES (?, ?, ?, ?, ?, ?, 'pending')",
                (run_id, setting_id, position, name, json.dumps(params, sort_keys=True), int(speculative)),
            )

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
        }
        unknown = set(fields) - allowed
        if unknown:
            raise ValueError(f"update_setting: unknown column(s) {sorted(unknown)}")
        if "command" in fields:
            fields["command_json"] = json.dumps(list(fields.pop("command")))
        assignments = ", ".join(f"{k}=?" for k in fields)  # keys come from the allow-list above
        with self.transaction() as db:
            db.execute(
                f"UPDATE setting SET {assignments} WHERE run_id=? AND setting_id=?",  # noqa: S608
                (*fields.values(), run_id, setting_id),
            )

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
    def record_cell(
        self,
        run_id: str,
        *,
        setting_id: str,
        workload: str,
        concurrency: int,
        repeat: int,
        requests: Sequence[RequestRecord],
        counters: SpecCounters | None,
        acceptance_source: str | None,
        request_rate: float | None = None,
        load: dict[str, Any] | None = None,
        client_health: dict[str, Any] | None = None,
    ) -> int:
        """Store one finished repeat of a cell and all its requests in a single transaction.

        A `request_rate` makes it an open-loop cell (`concurrency` then is the in-flight cap, 0: none)."""
        with self.transaction() as db:
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
                "INSERT INTO request VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [_request_row(cell_id, i, r) for i, r in enumerate(requests)],
            )
        return cell_id

    def done_cells(self, run_id: str) -> set[tuple[str, str, int, int]]:
        """(setting_id, workload, concurrency, repeat) of every stored cell: what --resume skips."""
        rows = self._db.execute(
            "SELECT setting_id, workload, concurrency, repeat FROM cell WHERE run_id=? AND load_mode='closed'",
            (run_id,),
        ).fetchall()
        return {(r[0], r[1], int(r[2]), int(r[3])) for r in rows}

    def done_open_cells(self, run_id: str) -> set[tuple[str, str, float, int]]:
        """(setting_id, workload, request_rate, repeat) of every stored open-loop cell."""
        rows = self._db.execute(
            "SELECT setting_id, workload, request_rate, repeat FROM cell WHERE run_id=? AND load_mode='open'",
            (run_id,),
        ).fetchall()
        return {(r[0], r[1], float(r[2]), int(r[3])) for r in rows}

    def cells(self, run_id: str, setting_id: str | None = None) -> list[CellRow]:
        """The run's cells with their requests; only one setting's when `setting_id` is given."""
        args = (run_id, setting_id, setting_id)
        cell_rows = self._db.execute(
            "SELECT * FROM cell WHERE run_id=? AND (? IS NULL OR setting_id=?) ORDER BY cell_id", args
        ).fetchall()
        by_cell: dict[int, list[RequestRecord]] = {int(r["cell_id"]): [] for r in cell_rows}
        req_rows = self._db.execute(
            "SELECT request.* FROM request JOIN cell USING (cell_id) "
            "WHERE cell.run_id=? AND (? IS NULL OR cell.setting_id=?) ORDER BY cell_id, idx",
            args,
        ).fetchall()
        for r in req_rows:
            by_cell[int(r["cell_id"])].append(_record_from_row(r))
        out = []
        for r in cell_rows:
            counters = None
            if r["draft_tokens"] is not None:
                counters = SpecCounters(
                    r["draft_tokens"],
                    r["accepted_tokens"],
                    r["verify_steps"],
                    tuple(json.loads(r["accepted_per_position_json"] or "[]")),
                )
            out.append(
                CellRow(
                    int(r["cell_id"]),
                    r["setting_id"],
                    r["workload"],
                    int(r["concurrency"]),
                    int(r["repeat"]),
                    counters,
                    r["acceptance_source"],
                    tuple(by_cell[int(r["cell_id"])]),
                    r["load_mode"],
                    r["request_rate"],
                    json.loads(r["load_json"]) if r["load_json"] else None,
                    json.loads(r["client_health_json"]) if r["client_health_json"] else None,
                )
            )
        return out

    # -- imported cells ------------------------------------------------------------------------
    def record_imported_cells(self, run_id: str, rows: Sequence[ImportedCellRow]) -> None:
        """Store every imported cell of a run in one transaction (all or nothing)."""
        with self.transaction() as db:
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


def _request_row(cell_id: int, idx: int, r: RequestRecord) -> tuple[Any, ...]:
    spec = r.spec
    return (
        cell_id,
        idx,
        r.prompt_id,
        r.send_ns,
        r.first_token_ns,
        r.end_ns,
        json.dumps(list(r.chunk_ns)),
        json.dumps(list(r.chunk_tokens)) if r.chunk_tokens is not None else None,
        r.prompt_tokens,
        r.completion_tokens,
        spec.draft_tokens if spec else None,
        spec.accepted_tokens if spec else None,
        spec.verify_steps if spec else None,
        r.finish_reason,
        r.output_text,
        r.error,
    )


def _record_from_row(r: sqlite3.Row) -> RequestRecord:
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


__all__ = ["CellRow", "RunRow", "SettingRow", "Store"]
