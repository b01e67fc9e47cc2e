"""Record tests/data/vllm_running_query_range.json: the real vLLM on the CPU, driven by `specfrontier bench`
at a few concurrencies while `scripts/record_running.py` scrapes `vllm:num_requests_running` every 0.5 s.

Why a script: there is no Prometheus server here, so the recording is made the way one would be (a gauge
scraped at a fixed interval, written in `query_range`'s JSON) and can be made again the same way:

    PYTHONPATH=src .venv/bin/python scripts/record_vllm_traffic.py --output tests/data/vllm_running_query_range.json

vLLM runs small (SmolLM2-135M, VLLM_CPU_KVCACHE_SPACE=1, eager, --max-num-seqs 8) in its own process
group, which is stopped by its group id when the script ends, whatever happened.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from specfrontier.engines.vllm import VllmEngine, resolve_model, resolve_python

HERE = Path(__file__).resolve().parent


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _stop(proc: subprocess.Popen[bytes], sig: int = signal.SIGTERM) -> None:
    """Stop the process group the script started (TERM, then KILL after 20 s)."""
    for each in (sig, signal.SIGKILL):
        try:
            os.killpg(proc.pid, each)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=20)
            return
        except subprocess.TimeoutExpired:
            continue


def _wait_ready(url: str, proc: subprocess.Popen[bytes], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"vLLM exited with status {proc.returncode}")
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=2) as resp:  # noqa: S310 (http only)  # noqa: S310 (http only)
                if resp.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.5)
    raise SystemExit(f"vLLM was not ready within {timeout_s} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, required=True)
    parser.add_argument("--concurrency", default="1,2,4")
    parser.add_argument("--cell-duration", default="6")
    args = parser.parse_args()
    engine = VllmEngine()
    python = resolve_python(engine)
    model = resolve_model(engine, python)
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    argv = [str(python), "-m", "vllm.entrypoints.openai.api_server", "--model", model, "--host", "127.0.0.1"]
    argv += ["--port", str(port), "--max-model-len", "2048", "--no-enable-prefix-caching", "--max-num-seqs", "8"]
    argv += ["--enforce-eager"]
    log = Path(tempfile.mkdtemp()) / "vllm.log"
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1"}
    with log.open("wb") as out:
        server = subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    recorder: subprocess.Popen[bytes] | None = None
    try:
        _wait_ready(url, server, 900)
        recorder = subprocess.Popen(
            [
                sys.executable,
                str(HERE / "record_running.py"),
                "--url",
                url,
                "--every",
                "0.5",
                "--output",
                str(args.output),
            ],
            start_new_session=True,
        )
        time.sleep(3)  # idle samples before the load
        store = Path(tempfile.mkdtemp()) / "bench.db"
        bench = [sys.executable, "-c", "from specfrontier.cli import main; main()", "bench", "--url", url]
        bench += ["--concurrency", args.concurrency, "--repeats", "1", "--cell-duration", args.cell_duration]
        bench += ["--store", str(store), "--quiet"]
        subprocess.run(bench, check=False, timeout=1800)
        time.sleep(3)  # idle samples after it
    finally:
        if recorder is not None:
            _stop(recorder, signal.SIGINT)
        _stop(server)
    print(f"wrote {args.output} (vLLM log: {log})")


if __name__ == "__main__":
    main()
