"""Two vLLM launch variants measured interleaved (A B A B ...) with `bench --url` (issue 31 items 5 and 8).

Each round launches the real vLLM for the CPU (SmolLM2 from scripts/install.sh --vllm) once per variant,
waits for /health, measures it with `specfrontier bench --url` (closed loop at the given levels, one
repeat per launch), and stops it by its process group. Variants:

- `iomp`: n-gram k = 4 without (A) and with (B) Intel OpenMP preloaded (LD_PRELOAD=.venv-vllm/lib/libiomp5.so);
- `schedule`: static n-gram k = 4 (A) against the one-entry schedule [[1, 65536, 4]] (B), both k = 4 at the top.

    python benchmarks/vllm_ab.py --variants iomp --rounds 2 --concurrency 1,4
    python benchmarks/vllm_ab.py --variants schedule --rounds 2 --concurrency 1,4

Prints one line per launch (ready seconds, output tok/s, acceptance, tokens per step per level, the
engine's warnings about performance) and the medians and ranges per variant and level. Timings on a shared
host move with its load: compare only interleaved launches, and read the spread.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from specfrontier.engines.vllm import performance_warnings, project_venv_python
from specfrontier.process.launch import ServerProcess, free_port
from specfrontier.store import Store

NGRAM = {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4, "prompt_lookup_min": 2}


def variants(kind: str, venv: Path) -> dict[str, tuple[dict[str, object], dict[str, str]]]:
    """Name -> (speculative config, extra environment)."""
    if kind == "iomp":
        preload = {"LD_PRELOAD": str(venv / "lib" / "libiomp5.so")}
        return {"plain": (NGRAM, {}), "iomp": (NGRAM, preload)}
    one_entry = {**NGRAM, "num_speculative_tokens_per_batch_size": [[1, 65536, 4]]}
    return {"static-k4": (NGRAM, {}), "schedule-1x4": (one_entry, {})}


def measure(python: Path, spec: dict[str, object], env: dict[str, str], levels: str, cell_s: float, tmp: Path) -> dict:
    port = free_port()
    model = str(python.parents[1] / "models" / "smollm2-135m-instruct")
    argv = [str(python), "-m", "vllm.entrypoints.openai.api_server", "--model", model, "--host", "127.0.0.1"]
    argv += ["--port", str(port), "--max-model-len", "2048", "--no-enable-prefix-caching", "--max-num-seqs", "4"]
    argv += ["--speculative-config", json.dumps(spec)]
    log = tmp / f"vllm-{port}.log"
    server = ServerProcess(argv, log, extra_env={"VLLM_CPU_KVCACHE_SPACE": "1", **env})
    server.start()
    try:
        ready = asyncio.run(server.wait_ready(f"http://127.0.0.1:{port}/health", timeout_s=900))
        store = tmp / f"{port}.db"
        cli = [sys.executable, "-c", "from specfrontier.cli import main; main()"]
        bench = ["bench", "--url", f"http://127.0.0.1:{port}", "--concurrency", levels, "--repeats", "1"]
        subprocess.run(
            [*cli, *bench, "--cell-duration", str(cell_s), "--store", str(store), "-q"],
            check=True,
            stdout=subprocess.DEVNULL,
        )
        (run,) = Store(store, read_only=True).runs()
        out = subprocess.run(
            [*cli, "report", run.run_id, "--store", str(store), "-f", "json"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
    finally:
        server.stop()
    report = json.loads(out)
    cells = {}
    for cell in report["cells"]:
        cells[str(cell["concurrency"])] = {
            "tok_s": cell["aggregate_tok_s"],
            "acceptance": cell["acceptance_rate"],
            "tokens_per_step": cell["acceptance_length"],
        }
    return {"ready_s": ready, "cells": cells, "warnings": performance_warnings(log.read_text(errors="replace"))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variants", choices=("iomp", "schedule"), required=True)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--concurrency", default="1,4")
    parser.add_argument("--cell-duration", type=float, default=8.0)
    args = parser.parse_args()
    python = project_venv_python() or Path("/work/main/.venv-vllm/bin/python")
    venv = python.parents[1]
    runs: dict[str, list[dict]] = {}
    with tempfile.TemporaryDirectory(prefix="vllm-ab-") as tmp:
        print(f"server logs and stores in {tmp} (removed at the end)", flush=True)
        for r in range(args.rounds):
            for name, (spec, env) in variants(args.variants, venv).items():
                got = measure(python, spec, env, args.concurrency, args.cell_duration, Path(tmp))
                runs.setdefault(name, []).append(got)
                print(json.dumps({"round": r, "variant": name, **got}), flush=True)
    for name, got in runs.items():
        for level in got[0]["cells"]:
            values = [g["cells"][level]["tok_s"] for g in got if level in g["cells"]]
            print(
                f"{name} C={level}: median {statistics.median(values):.1f} tok/s, range "
                f"{min(values):.1f}-{max(values):.1f} over {len(values)} launches"
            )


if __name__ == "__main__":
    main()
