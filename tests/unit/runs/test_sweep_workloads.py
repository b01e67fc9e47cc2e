"""A sweep over several workloads against the simulator's HTTP face: one cell per workload key, per-workload
report sections, and resume that skips only the finished (setting, workload, C, repeat) cells."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from builders import SimFace
from specfrontier.analysis import load_run
from specfrontier.report import print_report, report_json, report_markdown

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("no_orphans")]


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


async def test_every_workload_gets_its_own_cells_and_report_section(tmp_path: Path, sim_face: SimFace) -> None:
    store, run_id = await sim_face.sweep(_config(tmp_path / "s.db"))
    data = load_run(store, run_id)
    assert data.workloads == ("gsm8k@t0.6", "synthetic-greedy@greedy")
    for w, view in data.workload_views():
        assert {(c.setting, c.concurrency) for c in view.cells} == {
            (s, c) for s in ("no-spec", "steps2") for c in (1, 2)
        }, w
    for row in store.cells(run_id):  # each cell sent its own workload's prompts, nothing else
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


async def test_agentic_sessions_replay_turns_in_order_with_growing_context(tmp_path: Path, sim_face: SimFace) -> None:
    data_in = _config(tmp_path / "s.db")
    data_in["workloads"] = [
        {"source": "agentic", "sessions": True, "max_input_tokens": 3000, "max_turns": 3, "prompts": 2, "max_tokens": 8}
    ]
    data_in["concurrency"] = [2]
    sweep, run_id = sim_face.open(data_in)
    (wl,) = sweep.workloads
    assert len(wl.sessions) == 2 and len(wl.sessions[0]) == 3
    await sweep.run(run_id)
    rows = sweep.store.cells(run_id)
    for row in rows:  # each session's turns were sent in order, each after the previous one ended
        by_session: dict[str, list[tuple[int, int, int]]] = {}
        for r in row.requests:
            session, _, turn = r.prompt_id.rpartition("#t")
            by_session.setdefault(session, []).append((int(turn), r.send_ns, r.end_ns))
        for turns in by_session.values():
            assert [t for t, _, _ in turns] == sorted(t for t, _, _ in turns)
            assert all(later[1] >= earlier[2] for earlier, later in itertools.pairwise(turns))
    data = load_run(sweep.store, run_id)
    first = [t for t in data.turns if t.setting == "no-spec" and t.turn == 1]
    third = [t for t in data.turns if t.setting == "no-spec" and t.turn == 3]
    assert first and third
    assert (third[0].context_tokens_p50 or 0) > (first[0].context_tokens_p50 or 0)  # the context grew
    assert any(t.acceptance_rate is not None for t in data.turns if t.setting == "steps2")
    assert "Agentic sessions: per turn" in report_markdown(data)
    assert json.loads(json.dumps(report_json(data)))["session_turns"]
