"""Printed commands paste whole (specfrontier.commands) and a start failure's cause is read from its log
(process.launch.log_cause)."""

from __future__ import annotations

import shlex
from pathlib import Path

from specfrontier.commands import bench_again_command, report_command, resume_command
from specfrontier.process.launch import log_cause


def test_a_store_path_with_spaces_and_quotes_stays_one_argument() -> None:
    store = Path("/tmp/my runs/it's.db")
    assert shlex.split(resume_command("R1", store)) == ["specfrontier", "tune", "--resume", "R1", "--store", str(store)]
    assert shlex.split(report_command("R1", store)) == ["specfrontier", "report", "R1", "--store", str(store)]


def test_the_default_store_is_not_named() -> None:
    assert resume_command("R1", Path("specfrontier.db")) == "specfrontier tune --resume R1"


def test_bench_again_repeats_what_the_stored_bench_measured() -> None:
    bench = {
        "url": "http://127.0.0.1:8080", "concurrency": [1, 4], "rates": [], "repeats": 3, "rounds_per_cell": 2,
        "request_timeout_s": 30.0, "model": None, "workload": {"prompts": "builtin:cpu-mix", "max_tokens": 48},
    }  # fmt: skip
    assert shlex.split(bench_again_command(bench, Path("b b.db"))) == [
        "specfrontier", "bench", "--url", "http://127.0.0.1:8080", "--concurrency", "1,4", "--repeats", "3",
        "--rounds", "2", "--request-timeout", "30.0", "--prompts", "builtin:cpu-mix", "--max-tokens", "48",
        "--store", "b b.db",
    ]  # fmt: skip


def test_the_cause_is_the_last_line_naming_an_error_not_a_traceback_frame() -> None:
    tail = "\n".join([
        "INFO loading weights",
        "Traceback (most recent call last):",
        '  File "/x/model_runner.py", line 10, in load',
        "    self.kv = torch.empty(size)",
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.",
        "",
        "[rank0]: shutting down",
    ])  # fmt: skip
    assert log_cause(tail) == "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB."
    assert log_cause("starting\nlistening on 8080\n") == "listening on 8080"
    assert log_cause("\n\n") is None


def test_the_cause_is_the_exception_not_the_supervisors_shutdown_line_after_it() -> None:
    """A real SGLang (main of 2026-07-19 on the CPU, issue 37): the scheduler's traceback ends in the
    exception, then SGLang's supervisor logs its own shutdown, which names no cause, and kills its tree."""
    tail = "\n".join([
        "[2026-12-05 09:38:11] Scheduler hit an exception: Traceback (most recent call last):",
        '  File "/x/sglang/srt/layers/attention/intel_amx_backend.py", line 274, in forward_decode',
        "    self.decode_attention_fwd(",
        "RuntimeError: CHECK_EQ(attn_logits.size(0), num_seqs) failed. 2 vs 1",
        "",
        '[2026-12-05 09:38:11] INFO:     127.0.0.1:50092 - "GET /health_generate HTTP/1.1" 503 Service Unavailable',
        "[2026-12-05 09:38:11] SIGQUIT received. signum=None, frame=None. It usually means one child failed.",
        "[2026-12-05 09:38:16] kill_process_tree called: parent_pid=25814, include_parent=True, pid=25814",
    ])  # fmt: skip
    assert log_cause(tail) == "RuntimeError: CHECK_EQ(attn_logits.size(0), num_seqs) failed. 2 vs 1"


def test_the_cause_is_found_behind_a_compilers_output(tmp_path: Path) -> None:
    """SGLang's JIT build failure: the exception comes 28 lines before the end of the log (ninja's output
    and the supervisor's lines follow it), more than the 25 lines a log tail shows."""
    log = tmp_path / "server.log"
    lines = ["[t] loading", "RuntimeError: ninja exited with status 1", "stdout:"]
    lines += [f"[{i}/6] c++ -std=c++17 -fPIC -O2 -c cpp_{i}.cpp" for i in range(24)]
    lines += ["ninja: build stopped: subcommand failed.", ""]
    lines += ["[t] Received sigquit from a child process. It usually means the child failed."]
    log.write_text("\n".join(lines) + "\n")
    from specfrontier.process.launch import CAUSE_LINES, tail_of

    assert "RuntimeError" not in tail_of(log)
    assert log_cause(tail_of(log, CAUSE_LINES)) == "RuntimeError: ninja exited with status 1"
