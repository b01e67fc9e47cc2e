"""A sweep over several workloads against the simulator's HTTP face: one cell per workload key, per-workload
report sections, and resume that skips only the finished (setting, workload, C, repeat) cells."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from specfrontier.analysis import load_run
from specfrontier.config import parse_config
from specfrontier.report import print_report, report_json, report_markdown
from specfrontier.sweep import open_sweep

pytestmark = pytest.mark.slow

TAG = f"SPECFRONTIER_WL_TEST={uuid.uuid4().hex}"


def _ours() -> list[int]:
    pids = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                if TAG.encode() in (proc / "environ").read_bytes().split(b"\0"):
                    pids.append(int(proc.name))
            except OSError:
                continue
    return pids


@pytest.fixture(autouse=True)
def _no_orphans(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    key, value = TAG.split("=")
    monkeypatch.setenv(key, value)
    yield
    assert not _ours(), "simulator processes left running"


def _config(store: Path) -> dict[str, Any]:
    return {
        "engine": {"name": "sim", "face": "http", "time_scale": 4.0, "startup_timeout_s": 20},
        "workloads": [
            {"source": "synthetic-greedy", "prompts": 2, "input_tokens": 32, "max_tokens": 24},
            {"source": "gsm8k", "sampling": "t0.6", "prompts": 2, "max_tokens": 24},
        ],
        "concurrency": [1, 2],
        "repeats": 1,
        "rounds_per_cell": 1,
        "warmup_rounds": 0,
        "settings": [{"name": "no-spec"}, {"name": "steps2", "algorithm": "EAGLE3", "num_steps": 2}],
        "store": str(store),
    }


async def test_every_workload_gets_its_own_cells_and_report_section(tmp_path: Path) -> None:
    sweep, run_id = open_sweep(parse_config(_config(tmp_path / "s.db")), None, resume=None)
    await sweep.run(run_id)
    data = load_run(sweep.store, run_id)
    assert data.workloads == ("gsm8k@t0.6", "synthetic-greedy@greedy")
    for w, view in data.workload_views():
        assert {(c.setting, c.concurrency) for c in view.cells} == {
            (s, c) for s in ("no-spec", "steps2") for c in (1, 2)
        }, w
    for row in sweep.store.cells(run_id):  # each cell sent its own workload's prompts, nothing else
        ids = {r.prompt_id for r in row.requests}
        expected = "synthetic-" if row.workload.startswith("synthetic") else "gsm8k-"
        assert ids and all(i.startswith(expected) for i in ids), (row.workload, ids)
    text = report_markdown(data)
    assert "## Workload `gsm8k@t0.6`" in text and "## Workload `synthetic-greedy@greedy`" in text
    doc = json.loads(json.dumps(report_json(data)))
    assert [w["workload"] for w in doc["workloads"]] == ["gsm8k@t0.6", "synthetic-greedy@greedy"]
    console = Console(record=True, width=200)
    print_report(data, console)
    assert "workload synthetic-greedy@greedy" in console.export_text()
