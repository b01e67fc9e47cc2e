"""Printed commands paste whole (specfrontier.commands)."""

from __future__ import annotations

import shlex
from pathlib import Path

from specfrontier.commands import bench_again_command, report_command, resume_command


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
