"""SQLite schema of the result store, with its version.

One row per run, per setting (with its launch command, read-back capacity and startup time, or the
failure and log tail), per measured repeat of a cell (window counters), and per part of a cell's
requests (raw times and counts, losslessly encoded). Every reported figure can be recomputed from
these rows alone; each repeat's figures are also kept, computed once, in `cell_digest`.

Cells: `load_mode` 'closed' (the default) has `concurrency` = C users and `request_rate` NULL;
'open' has `request_rate` = the target req/s and `concurrency` = its in-flight cap (0: none), with
`load_json` holding how the schedule was kept (sent/measured counts, achieved rate, cap waits, send
lag). `first_ttft_ms`/`first_e2e_ms` of a setting: its very first request after launch (cold start).
`client_health_json` (NULL: not measured): the client's event-loop lag, CPU per worker process and the
`saturated` flag for the window (see `specfrontier.load.health`).
`imported_cell`: figures of a run made by `specfrontier import` from a table measured elsewhere (one row
per setting x concurrency, medians as published; no requests behind them), with the file and row they
came from; the setting's capacity is stored on its `setting` row.
Requests (schema 5): a cell's requests are three compressed columnar blobs in `request_blob`, one row
per (cell, part): `head` (per-request columns), `chunks` (chunk times and tokens), `text` (outputs);
`specfrontier.store.codec` says how. `cell_digest` keeps each repeat's figures (zlib-compressed
JSON), computed once when the cell is recorded (`specfrontier.metrics.digest`). A schema-4 store keeps
its requests in `request` rows (one per request, chunk times as JSON): it is read as it is, and opening
it to write adds the new tables and marks it version 5 (`MIGRATIONS`); its old cells stay in `request`,
new ones go to blobs.
`run_owner` (RUN_OWNER_DDL): the process writing a run (pid, start time, boot id; see
`specfrontier.store.owner`). It is additive, not a schema version: every writable open creates it if
missing, an older tool ignores it, and a store without it simply has no owners.
"""

SCHEMA_VERSION = 5  # 2: open-loop cells (load_mode, request_rate, load_json), cold-start columns
# 3: cell.client_health_json (client lag, CPU, saturated flag)
# 4: imported_cell (figures imported from a table measured elsewhere)
# 5: request_blob (compact request encoding), cell_digest (per-repeat figures stored once)
READABLE_VERSIONS = (4, 5)
"""Versions this tool reads; a read-only open of a version-4 store reads it without changing it."""

BLOB_DDL = """
CREATE TABLE IF NOT EXISTS request_blob (
    cell_id  INTEGER NOT NULL REFERENCES cell(cell_id),
    part     TEXT NOT NULL,
    requests INTEGER NOT NULL,
    data     BLOB NOT NULL,
    PRIMARY KEY (cell_id, part)
);
CREATE TABLE IF NOT EXISTS cell_digest (
    cell_id     INTEGER PRIMARY KEY REFERENCES cell(cell_id),
    digest      BLOB NOT NULL
);
"""
"""Schema 5's request blobs and digests (also the migration from 4)."""

DDL = """
CREATE TABLE IF NOT EXISTS meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS run (
    run_id       TEXT PRIMARY KEY,
    created_at   TEXT NOT NULL,
    finished_at  TEXT,
    engine       TEXT NOT NULL,
    status       TEXT NOT NULL,
    config_json  TEXT NOT NULL,
    environment_json TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS setting (
    run_id          TEXT NOT NULL REFERENCES run(run_id),
    setting_id      TEXT NOT NULL,
    position        INTEGER NOT NULL,
    name            TEXT NOT NULL,
    params_json     TEXT NOT NULL,
    speculative     INTEGER NOT NULL,
    status          TEXT NOT NULL,
    command_json    TEXT,
    capacity        INTEGER,
    capacity_source TEXT,
    context_tokens  INTEGER,
    startup_s       REAL,
    error           TEXT,
    log_path        TEXT,
    log_tail        TEXT,
    first_ttft_ms   REAL,
    first_e2e_ms    REAL,
    PRIMARY KEY (run_id, setting_id)
);
CREATE TABLE IF NOT EXISTS cell (
    cell_id        INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id         TEXT NOT NULL,
    setting_id     TEXT NOT NULL,
    workload       TEXT NOT NULL,
    concurrency    INTEGER NOT NULL,
    repeat         INTEGER NOT NULL,
    finished_at    TEXT NOT NULL,
    draft_tokens   INTEGER,
    accepted_tokens INTEGER,
    verify_steps   INTEGER,
    accepted_per_position_json TEXT,
    acceptance_source TEXT,
    load_mode      TEXT NOT NULL DEFAULT 'closed',
    request_rate   REAL,
    load_json      TEXT,
    client_health_json TEXT,
    FOREIGN KEY (run_id, setting_id) REFERENCES setting(run_id, setting_id)
);
CREATE UNIQUE INDEX IF NOT EXISTS cell_key
    ON cell(run_id, setting_id, workload, load_mode, concurrency, IFNULL(request_rate, 0), repeat);
CREATE TABLE IF NOT EXISTS request (
    cell_id          INTEGER NOT NULL REFERENCES cell(cell_id),
    idx              INTEGER NOT NULL,
    prompt_id        TEXT NOT NULL,
    send_ns          INTEGER NOT NULL,
    first_token_ns   INTEGER,
    end_ns           INTEGER NOT NULL,
    chunk_ns_json    TEXT NOT NULL,
    chunk_tokens_json TEXT,
    prompt_tokens    INTEGER,
    completion_tokens INTEGER,
    draft_tokens     INTEGER,
    accepted_tokens  INTEGER,
    verify_steps     INTEGER,
    finish_reason    TEXT,
    output_text      TEXT NOT NULL,
    error            TEXT,
    PRIMARY KEY (cell_id, idx)
);
CREATE TABLE IF NOT EXISTS imported_cell (
    run_id            TEXT NOT NULL,
    setting_id        TEXT NOT NULL,
    concurrency       INTEGER NOT NULL,
    per_request_tok_s REAL,
    aggregate_tok_s   REAL,
    acceptance_length REAL,
    acceptance_per_position_json TEXT,
    source            TEXT NOT NULL,
    PRIMARY KEY (run_id, setting_id, concurrency),
    FOREIGN KEY (run_id, setting_id) REFERENCES setting(run_id, setting_id)
);
"""

RUN_OWNER_DDL = """
CREATE TABLE IF NOT EXISTS run_owner (
    run_id      TEXT PRIMARY KEY,
    pid         INTEGER NOT NULL,
    start_ticks INTEGER,
    boot_id     TEXT,
    claimed_at  TEXT NOT NULL
)
"""

DDL += BLOB_DDL

MIGRATIONS = {4: BLOB_DDL}
"""Statements that bring a store of version N to N + 1 (run in one transaction on a writable open)."""
