"""The commands specfrontier prints for the user to run next (resume, report, bench again).

Why one module: a printed command is only useful if it can be pasted as it is. Each is built here from
its arguments with `shlex.join`, so a store path with a space or a quote stays one argument, and names
`--store` whenever the store is not the default one (`specfrontier.db` in the current folder), so the
command finds the run it names. Kept free of specfrontier imports: every layer that prints a command
(stores, runs, reports, the CLI) may use it.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from pathlib import Path
from typing import Any

DEFAULT_STORE = Path("specfrontier.db")
"""The store every command uses without `--store`."""


def command(*args: object) -> str:
    """`specfrontier ARGS`, each argument quoted for a POSIX shell where it needs it."""
    return shlex.join(["specfrontier", *(str(a) for a in args)])


def store_args(store: Path | str | None) -> tuple[str, ...]:
    """`--store PATH`, or nothing for the default store (or when the store is not known)."""
    if store is None or Path(store) == DEFAULT_STORE:
        return ()
    return ("--store", str(store))


def resume_command(run_id: str, store: Path | str | None) -> str:
    """How to resume `run_id` of `store` (a tune run)."""
    return command("tune", "--resume", run_id, *store_args(store))


def report_command(run_id: str, store: Path | str | None) -> str:
    """How to print the report of `run_id` of `store` again."""
    return command("report", run_id, *store_args(store))


_BENCH_FLAGS = (
    ("model", "--model"),
    ("duration_s", "--duration"),
    ("requests", "--requests"),
    ("repeats", "--repeats"),
    ("rounds_per_cell", "--rounds"),
    ("cell_duration_s", "--cell-duration"),
    ("cell_lifetimes", "--cell-lifetimes"),
    ("max_client_lag_share", "--max-client-lag-share"),
    ("request_timeout_s", "--request-timeout"),
)
"""Stored `bench` config keys -> the option that sets them (the levels and the workload apart)."""


def bench_again_command(bench: Mapping[str, Any], store: Path | str | None) -> str:
    """`specfrontier bench ...` measuring what the stored bench config `bench` measured, into `store`:
    a bench run is never resumed (the server is the user's and may have changed), it is run again."""
    args: list[object] = ["bench", "--url", bench.get("url", "URL")]
    levels = bench.get("rates") or bench.get("concurrency") or ()
    if levels:
        args += ["--rate" if bench.get("rates") else "--concurrency", ",".join(f"{v:g}" for v in levels)]
    for key, flag in _BENCH_FLAGS:
        if bench.get(key) is not None:
            args += [flag, bench[key]]
    workload = bench.get("workload")
    if isinstance(workload, Mapping):
        for key, flag in (("prompts", "--prompts"), ("api", "--api"), ("max_tokens", "--max-tokens")):
            if workload.get(key) is not None:
                args += [flag, workload[key]]
    return command(*args, *store_args(store))


__all__ = [
    "DEFAULT_STORE",
    "bench_again_command",
    "command",
    "report_command",
    "resume_command",
    "store_args",
]
