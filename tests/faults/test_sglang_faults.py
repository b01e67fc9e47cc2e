"""Fault matrix, SGLang's own server code (`.venv-sglang`, `scripts/install.sh --sglang`): a scheduler that
dies mid-run, behind SGLang 0.5.23's real launcher, TokenizerManager and HTTP app. The simulated scheduler
exits after N answered requests (`--sim-crash-after`, once: `--sim-crash-once-file`); SGLang's own
watchdog (srt/utils/watchdog.py `SubprocessWatchdog`) sees it and takes the server down, as it does when a
GPU scheduler crashes. The real CLI must record the setting as failed, the run incomplete (exit 3) with the
resume named, and `tune --resume` must complete it with every cell stored once. Markers `sglang`, `slow`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from tests.faults.conftest import MatrixEntry, cli, count_rows, latest_run, run_status, sim_config, write_config

from sglang_frontend import frontend_engine, require_sglang
from specfrontier.store import Store

pytestmark = [pytest.mark.sglang, pytest.mark.slow]


def _config(store: Path, crash_knobs: list[str]) -> dict[str, Any]:
    """The fault matrix's small sweep (`sim_config`), served by SGLang's front end, one repeat."""
    settings = [
        {"name": "no-spec"},
        {"name": "standalone-s2", "algorithm": "STANDALONE", "num_steps": 2, "extra_args": crash_knobs},
    ]
    return sim_config(
        store, settings, engine=frontend_engine(), repeats=1, rounds_per_cell=1, warmup_rounds=0, request_timeout_s=60
    )


def test_sglang_scheduler_crash_mid_run_is_incomplete_and_resume_completes_it(
    tmp_path: Path, matrix: MatrixEntry
) -> None:
    require_sglang()
    store = tmp_path / "s.db"
    once = tmp_path / "crashed-once"
    knobs = ["--sim-crash-after", "3", "--sim-crash-once-file", str(once)]
    config = write_config(tmp_path / "tune.yaml", _config(store, knobs))
    done = cli("tune", "--config", str(config), "--quiet", cwd=tmp_path, timeout=1200)
    assert done.returncode == 3, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    line = next(ln for ln in done.stderr.splitlines() if ln.startswith("INCOMPLETE:"))
    assert "standalone-s2: server" in line and "--resume" in line, line
    run_id = latest_run(store)
    assert run_status(store, run_id) == "incomplete" and once.exists()
    settings = {s.name: s for s in Store(store).settings(run_id)}
    assert settings["standalone-s2"].status == "failed" and settings["no-spec"].status == "done"
    log = Path(settings["standalone-s2"].log_path or "").read_text(errors="replace")
    assert "simulated scheduler crash after 3 requests" in log
    partial = count_rows(store)

    resumed = cli("tune", "--resume", run_id, "--store", str(store), "--quiet", cwd=tmp_path, timeout=1200)
    assert resumed.returncode == 0, resumed.stderr
    assert run_status(store, run_id) == "done"
    rows = count_rows(store)
    workloads = {k[1] for k in rows.cell_keys}
    measured = [k for k in rows.cell_keys if k[3] >= 0]
    assert sorted(measured) == sorted(
        (s, w, c, 0) for s in ("no-spec", "standalone-s2") for w in workloads for c in (1, 2)
    )
    # SGLang relaunches slowly, so `drift_control: auto` adds the end-of-run drift reference: the first
    # setting once more at every level, stored as repeat -1 (never counted as a repeat).
    reference = [k for k in rows.cell_keys if k[3] < 0]
    assert sorted(reference) == sorted(("no-spec", w, c, -1) for w in workloads for c in (1, 2))
    assert len(set(rows.cell_keys)) == len(rows.cell_keys)  # every cell stored once
    matrix.rows(kept=partial, after=rows)
