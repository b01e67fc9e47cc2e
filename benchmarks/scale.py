"""The tool's own cost as a run grows (issue 18): bytes per request, `report` time and memory, start-up.

Run: `.venv/bin/python benchmarks/scale.py [--sizes 10000,100000[,1000000]] [--real]` (1M writes a
~630 MB store in about 9 minutes on 2 cores; `--real` adds a short real llama.cpp tune, ~4 minutes).

For each size a synthetic run is written straight into a fresh store through `Store.record_cell` (the
path every sweep takes): the simulator's seed settings (no speculation, steps 1-5) x C = 1, 4, 16, 32, 64
x repeats, cells of 500 requests, each request streaming 512 tokens in chunks of 1-4 tokens (one per
verification step, as a speculative engine sends them), with jittered nanosecond arrival times. Then,
each in a fresh process (what a user waits for):
`specfrontier report RUN --format json` (wall seconds and peak resident memory of that process),
`specfrontier runs` and `specfrontier --help`. Printed per size, and as ratios to the smallest size of
the same process (how the cost grows; machines differ in speed, the ratios less). Also `tune` on the
simulator's seed grid (3 runs) and, with `--real`, the bytes per request of a real llama.cpp run. Targets
(issue 18): <= 1,000 bytes per request; report of 1M requests <= 10 s and <= 2 GB; `runs` and `--help`
<= 0.3 s; the seed grid's `tune` <= 5 s.
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from specfrontier.engines.sim import seed_sim_config
from specfrontier.records import RequestRecord, RequestSpecStats, SpecCounters
from specfrontier.runs.sweep import register_settings
from specfrontier.store import Store

REQUESTS_PER_CELL = 500
TOKENS = 512
LEVELS = (1, 4, 16, 32, 64)
CLI = [str(Path(sys.executable).parent / "specfrontier")]


def _request(rng: np.random.Generator, i: int, start_ns: int) -> RequestRecord:
    """One request as a speculative engine streams it: a chunk per verification step carrying 1-4 tokens
    (512 in all), steps ~7 ms apart with 0.3 ms of jitter, every time a real nanosecond count."""
    tokens = rng.integers(1, 5, size=TOKENS)
    steps = int(np.searchsorted(np.cumsum(tokens), TOKENS)) + 1
    tokens = tokens[:steps]
    tokens[-1] -= int(tokens.sum()) - TOKENS
    first = start_ns + int(rng.normal(40e6, 2e6))
    gaps = rng.normal(7e6, 3e5, size=steps).astype(np.int64)
    gaps[0] = 0
    chunks = first + np.cumsum(gaps)
    return RequestRecord(
        prompt_id=f"p{i % 64}",
        send_ns=start_ns,
        end_ns=int(chunks[-1]) + 1_000_000,
        first_token_ns=first,
        chunk_ns=tuple(chunks.tolist()),
        chunk_tokens=tuple(tokens.tolist()),
        prompt_tokens=40,
        completion_tokens=TOKENS,
        spec=RequestSpecStats(draft_tokens=3 * steps, accepted_tokens=TOKENS - steps, verify_steps=steps),
        finish_reason="length",
    )


def build(path: Path, requests: int) -> tuple[str, float]:
    """A run of `requests` requests in `path`; (run id, seconds it took to write)."""
    config = seed_sim_config()
    settings = config.all_settings()
    cells = max(1, requests // REQUESTS_PER_CELL)
    per_setting_level = max(1, round(cells / (len(settings) * len(LEVELS))))
    start = time.perf_counter()
    store = Store(path)
    run_id = store.create_run(engine="sim", config=config.model_dump(mode="json"), environment={"simulated": True})
    register_settings(store, run_id, settings)
    written = 0
    rng = np.random.default_rng(18)
    for setting in settings:
        for level in LEVELS:
            for repeat in range(per_setting_level):
                batch = [_request(rng, written + i, i * 10_000_000) for i in range(REQUESTS_PER_CELL)]
                store.record_cell(
                    run_id,
                    setting_id=setting.name,
                    workload="synthetic",
                    concurrency=level,
                    repeat=repeat,
                    requests=batch,
                    counters=SpecCounters(200_000, 165_000, 65_000),
                    acceptance_source="benchmark",
                )
                written += REQUESTS_PER_CELL
        store.update_setting(run_id, setting.name, status="done", capacity=26)
    store.set_run_status(run_id, "done")
    store.close()
    return run_id, time.perf_counter() - start


def timed(argv: list[str]) -> tuple[float, float]:
    """(wall seconds, peak resident MiB) of one command in a fresh process; its output is discarded."""
    start = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    elapsed = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{' '.join(argv)} failed: {proc.stderr.read().decode() if proc.stderr else ''}")
    return elapsed, usage.ru_maxrss / 1024  # Linux: KiB


def stored_bytes_per_request(db: Path) -> tuple[int, float]:
    """(requests, bytes of the store and its side files per request) of every run in `db`."""
    store = Store(db, read_only=True)
    requests = sum(len(cell.requests) for run in store.runs() for cell in store.cells(run.run_id))
    store.close()
    size = sum(p.stat().st_size for p in db.parent.glob(f"{db.name}*"))
    return requests, size / max(requests, 1)


def request_data_per_request(db: Path) -> float:
    """Bytes of the requests' blobs and the cells' digests per request: what each further request adds,
    without the fixed pages of a store (schema, run, settings), which dominate a run of a few dozen."""
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        blobs, requests = conn.execute(
            "SELECT SUM(LENGTH(data)), SUM(CASE WHEN part='head' THEN requests ELSE 0 END) FROM request_blob"
        ).fetchone()
        (digests,) = conn.execute("SELECT SUM(LENGTH(digest)) FROM cell_digest").fetchone()
    return (blobs + (digests or 0)) / max(requests, 1)


def real_llamacpp_run(folder: Path) -> None:
    """A short real llama.cpp tune (the embedded default's model, workload, 48-token outputs and 25-second
    cells; two of its settings, C = 1, 2, 4, one repeat each): bytes per request as a real run stores them."""
    from specfrontier.engines.llamacpp import default_config

    config = default_config()
    short = config.model_copy(update={"settings": config.settings[:2], "concurrency": (1, 2, 4), "repeats": 1})
    path = folder / "llamacpp.yaml"
    path.write_text(json.dumps(short.model_dump(mode="json", exclude={"store"})))  # JSON is YAML
    db = folder / "llamacpp.db"
    start = time.perf_counter()
    subprocess.run([*CLI, "tune", "--config", str(path), "--store", str(db)], check=True, capture_output=True)
    requests, per = stored_bytes_per_request(db)
    print(
        f"real llama.cpp run ({time.perf_counter() - start:.0f} s): {requests} requests, {per:.0f} bytes/request "
        f"(store file and side files / requests), {request_data_per_request(db):.0f} bytes/request of request "
        "blobs and digests"
    )


def seed_grid_tune(folder: Path, runs: int = 3) -> None:
    """`specfrontier tune` on the simulator's seed grid in virtual time (its config as a file: the
    production-sampling companion run is added only to the command without one), timed `runs` times in a
    fresh process each, with the bytes per request of the store it writes."""
    config = seed_sim_config().model_dump(mode="json")
    path = folder / "seed.yaml"
    timings = []
    for i in range(runs):
        db = folder / f"seed{i}.db"
        config["store"] = str(db)
        path.write_text(json.dumps(config))  # JSON is YAML
        seconds, _ = timed([*CLI, "tune", "--config", str(path)])
        timings.append(seconds)
    requests, per = stored_bytes_per_request(folder / "seed0.db")
    shown = ", ".join(f"{t:.2f}" for t in timings)
    print(
        f"seed grid tune (simulator, virtual time, 90 cells, report and HTML included): {shown} s wall; "
        f"{requests} requests, {per:.0f} bytes/request ({request_data_per_request(folder / 'seed0.db'):.0f} "
        "of request blobs and digests)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10000,100000", help="requests per run, comma-separated")
    parser.add_argument("--real", action="store_true", help="also a short real llama.cpp tune (~4 minutes)")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    with tempfile.TemporaryDirectory() as folder:
        seed_grid_tune(Path(folder))
    if args.real:
        with tempfile.TemporaryDirectory() as folder:
            real_llamacpp_run(Path(folder))
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        for size in sizes:
            db = Path(folder) / f"run{size}.db"
            run_id, write_s = build(db, size)
            requests, per_request = stored_bytes_per_request(db)
            report_s, report_mib = timed([*CLI, "report", run_id, "--store", str(db), "--format", "json"])
            runs_s, _ = timed([*CLI, "runs", "--store", str(db)])
            help_s, _ = timed([*CLI, "--help"])
            rows.append((size, requests, per_request, write_s, report_s, report_mib, runs_s, help_s))
    base = rows[0]
    print(f"synthetic runs: {TOKENS} tokens per request in 1-4-token chunks, cells of {REQUESTS_PER_CELL} requests")
    print(
        f"{'requests':>9} {'bytes/req':>10} {'write s':>8} {'report s':>9} {'report MiB':>11} {'runs s':>7} "
        f"{'--help s':>9} | ratios to {base[1]}: {'bytes/req':>9} {'report s':>9} {'MiB':>6}"
    )
    for _size, requests, per, write_s, report_s, mib, runs_s, help_s in rows:
        print(
            f"{requests:>9} {per:>10.0f} {write_s:>8.1f} {report_s:>9.2f} {mib:>11.0f} {runs_s:>7.2f} {help_s:>9.2f} "
            f"| {'':>13}{per / base[2]:>9.2f} {report_s / base[4]:>9.2f} {mib / base[5]:>6.2f}"
        )
    print(
        "targets (issue 18): <= 1000 bytes/request; 1M-request report <= 10 s and <= 2048 MiB; runs, --help <= 0.3 s; "
        "seed grid tune <= 5 s"
    )


if __name__ == "__main__":
    main()
