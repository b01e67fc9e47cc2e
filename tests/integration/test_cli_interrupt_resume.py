"""Ctrl-C during a real sweep keeps finished cells, leaves no server, and `--resume` completes the run."""

from __future__ import annotations

import json
import signal
import sqlite3
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from builders import CLI
from specfrontier.testing.synthetic_models import SyntheticPair

pytestmark = pytest.mark.engine


def _cells(store: Path) -> int:
    if not store.exists():
        return 0
    try:
        with sqlite3.connect(store) as db:
            return int(db.execute("SELECT COUNT(*) FROM cell").fetchone()[0])
    except sqlite3.OperationalError:  # schema not created yet
        return 0


def test_interrupt_then_resume(llama_server: Path, pair_full_acceptance: SyntheticPair, tmp_path: Path) -> None:
    store = tmp_path / "runs.db"
    config = tmp_path / "tune.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "engine": {"model": str(pair_full_acceptance.target), "draft_model": str(pair_full_acceptance.draft)},
                "settings": [
                    {"name": "baseline"},
                    {"name": "draft-4", "spec_type": "draft-simple", "draft_n_max": 4},
                    {"name": "draft-8", "spec_type": "draft-simple", "draft_n_max": 8},
                ],
                "concurrency": [1, 2],
                "repeats": 2,
                "rounds_per_cell": 4,
                "workload": {"api": "completion", "max_tokens": 128, "ignore_eos": True},
                "store": str(store),
            }
        )
    )
    proc = subprocess.Popen([*CLI, "tune", "--config", str(config)], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    while _cells(store) < 2:
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "no cell finished in time"
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, (out, err)
    assert b"--resume" in err
    kept = _cells(store)
    assert kept >= 2

    listed = json.loads(
        subprocess.run([*CLI, "runs", "--store", str(store), "--json"], capture_output=True, check=True).stdout
    )
    assert len(listed) == 1 and listed[0]["status"] == "interrupted"
    run_id = listed[0]["id"]

    done = subprocess.run([*CLI, "tune", "--resume", run_id, "--store", str(store), "--quiet"], capture_output=True)
    assert done.returncode == 0, done.stderr
    assert _cells(store) == 3 * 2 * 2  # settings x concurrency levels x repeats, none measured twice
    report = json.loads(
        subprocess.run(
            [*CLI, "report", run_id, "--store", str(store), "--format", "json"], capture_output=True, check=True
        ).stdout
    )
    assert report["run"]["status"] == "done"
    assert len(report["cells"]) == 3 * 2
    assert {c["repeats"] for c in report["cells"]} == {2}
