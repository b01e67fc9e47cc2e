"""`specfrontier bench --url` against a real llama-server we start (and stop) ourselves, and cold start in `tune`.

The server is the generated target/draft pair with full acceptance, so the stream's per-request timings
and the server's /metrics both carry draft counts: the stored cells must show them, with the capacity
read from /props. The bench runs as a real process, as a user would run it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from specfrontier.analysis import load_run
from specfrontier.config.load import parse_config
from specfrontier.engines.llamacpp import LlamaCppAdapter
from specfrontier.process.launch import ServerProcess, free_port
from specfrontier.runs.bench import METRICS_SOURCE
from specfrontier.runs.sweep import open_sweep
from specfrontier.store import Store
from specfrontier.testing.synthetic_models import SyntheticPair

pytestmark = pytest.mark.engine


def _config(pair: SyntheticPair, store: Path) -> dict[str, object]:
    return {
        "engine": {"model": str(pair.target), "draft_model": str(pair.draft), "threads": 1, "ctx_size": 4096},
        "settings": [{"name": "baseline"}, {"name": "draft-8", "spec_type": "draft-simple", "draft_n_max": 8}],
        "concurrency": [1],
        "repeats": 1,
        "rounds_per_cell": 2,
        "warmup_rounds": 1,
        "workload": {"prompts": "builtin:cpu-mix", "api": "completion", "max_tokens": 32, "ignore_eos": True},
        "store": str(store),
    }


async def test_bench_measures_a_running_llama_server(
    llama_server: Path, pair_full_acceptance: SyntheticPair, tmp_path: Path
) -> None:
    cfg = parse_config(_config(pair_full_acceptance, tmp_path / "unused.db"))
    adapter = LlamaCppAdapter(cfg.engine)  # type: ignore[arg-type]
    adapter.prepare(cfg.settings)  # type: ignore[arg-type]
    port = free_port()
    argv = adapter.command(cfg.settings[1], port=port, max_concurrency=2)  # type: ignore[arg-type]
    store = tmp_path / "bench.db"
    with ServerProcess(argv, tmp_path / "server.log") as server:
        await server.wait_ready(f"http://127.0.0.1:{port}/health", timeout_s=120)
        args = ["--url", f"http://127.0.0.1:{port}/v1", "--concurrency", "1,2", "--repeats", "2"]
        args += ["--api", "completion", "--max-tokens", "24", "--store", str(store)]
        # ~0.1 s requests on 2 cores shared with the server: the client's lag is not this test's subject
        args += ["--max-client-lag-share", "1"]
        done = subprocess.run(
            [sys.executable, "-c", "from specfrontier.cli import main; main()", "bench", *args],
            capture_output=True,
            text=True,
            timeout=600,
            env={**os.environ, "COLUMNS": "200"},
            check=False,
        )
        assert server.exited() is None, "bench must not stop a server it did not start"
    assert done.returncode == 0, done.stderr + done.stdout
    assert "Aggregate tok/s" in done.stdout and "stored as run" in done.stdout

    opened = Store(store)
    (run,) = opened.runs()
    data = load_run(opened, run.run_id)
    assert run.status == "done" and run.engine == "llama.cpp"
    (setting,) = data.settings
    assert setting.command is None and setting.capacity == 2
    assert setting.params["keep_alive"] is False  # llama-server closes connections after a stream
    assert setting.capacity_source == "llama.cpp /props total_slots"
    assert setting.speculative
    assert [(c.concurrency, c.repeats) for c in data.cells] == [(1, 2), (2, 2)]
    for cell in data.cells:
        assert cell.errors == 0 and cell.acceptance_source == METRICS_SOURCE
        assert cell.acceptance_rate == 1.0  # alpha 0: every draft token accepted
    stored = opened.cells(run.run_id)
    assert all(r.completion_tokens == 24 and r.spec is not None for c in stored for r in c.requests)


async def test_tune_stores_the_first_request_of_each_fresh_server(
    llama_server: Path, pair_full_acceptance: SyntheticPair, tmp_path: Path
) -> None:
    sweep, run_id = open_sweep(parse_config(_config(pair_full_acceptance, tmp_path / "s.db")), None, resume=None)
    await sweep.run(run_id)
    for s in sweep.store.settings(run_id):
        assert s.status == "done" and s.startup_s is not None
        assert s.first_ttft_ms is not None and s.first_e2e_ms is not None
        assert 0 < s.first_ttft_ms <= s.first_e2e_ms
