"""A short real tune over several workloads: SmolLM2 on llama-server, no speculation vs n-gram speculation.

Checks what only a real engine shows: acceptance differs by workload, the correctness gate compares real
greedy outputs (n-gram speculation at C=1 must reproduce the baseline's text), and the optimism-bias
table is built from measured cells.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from specfrontier.analysis import load_run
from specfrontier.analysis.bias import optimism_bias
from specfrontier.config.load import parse_config
from specfrontier.report import report_markdown
from specfrontier.runs.sweep import open_sweep

pytestmark = pytest.mark.engine


async def test_workloads_measure_acceptance_per_workload_and_gate_outputs(llama_server: Path, tmp_path: Path) -> None:
    config = {
        "engine": {"model": "smollm2", "threads": 1, "ctx_size": 2048},
        "workloads": [
            {"source": "synthetic-greedy", "prompts": 2, "input_tokens": 32, "max_tokens": 24},
            {"source": "humaneval", "prompts": 2, "max_tokens": 24},
            {"source": "ifbench", "prompts": 2, "max_input_tokens": 60, "max_tokens": 24},
        ],
        "settings": [
            {"name": "baseline"},
            {"name": "ngram", "spec_type": "ngram-simple", "ngram_size_n": 3, "ngram_size_m": 8},
        ],
        "concurrency": [1],
        "repeats": 1,
        "rounds_per_cell": 1,
        "warmup_rounds": 0,
        "store": str(tmp_path / "s.db"),
    }
    sweep, run_id = open_sweep(parse_config(config), None, resume=None)
    await sweep.run(run_id)
    data = load_run(sweep.store, run_id)
    assert data.run.status == "done"
    assert data.workloads == ("humaneval@greedy", "ifbench@greedy", "synthetic-greedy@greedy")
    drafted = {w: (view.pooled_counters("ngram") or None) for w, view in data.workload_views()}
    assert any(c is not None and c.draft_tokens > 0 for c in drafted.values()), drafted
    gate = {g.workload: g for g in data.gate}
    assert set(gate) == set(data.workloads)
    assert all(g.compared == 2 and not g.unsafe for g in gate.values()), gate
    bias = optimism_bias(data)
    assert bias is not None and bias.best_case == "synthetic-greedy@greedy"
    assert {r.workload for r in bias.settings} == {"humaneval@greedy", "ifbench@greedy"}
    assert "Correctness gate" in report_markdown(data)
