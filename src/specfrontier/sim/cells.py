"""Simulated cells computed side by side: each in a worker process, sent back encoded.

Why: a virtual-time cell is a pure function of the profile, the setting, the level, the repeat and the
protocol (its random seed comes from those: `CellProtocol.cell_seed`), so cells can be simulated in any
order and on any core and still give exactly the same records. On this project's 2-core machines the
seed grid's 90 cells then take about half the time. A worker also computes what the store keeps (the
encoded requests and the digest of their figures), so a few compressed kilobytes come back per cell
instead of every record, and the parent only writes them, in the cells' listed order.

Workers are forked from the running process (nothing to import again; started in milliseconds), ignore
Ctrl-C (the parent stops them when it stops) and end with the run. With one core, or where `fork` is not
available, cells are simulated in the process itself, one after the other.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
from collections.abc import Iterator
from concurrent.futures import Executor, ProcessPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass

from specfrontier.metrics.counters import per_request_counters
from specfrontier.metrics.digest import CellDigest, digest_requests
from specfrontier.records import SpecCounters
from specfrontier.sim.profile import SimProfile
from specfrontier.sim.protocol import CellProtocol, simulate_repeat
from specfrontier.sim.setting import SimSetting
from specfrontier.store.codec import EncodedCell, encode_requests

MAX_WORKERS = 4
"""More workers than this buy little: the parent writes every cell, and short cells are already cheap."""


@dataclass(frozen=True, slots=True)
class CellTask:
    """One repeat of one cell to simulate (what `simulate_repeat` takes)."""

    profile: SimProfile
    setting_name: str
    setting: SimSetting
    concurrency: int
    repeat: int
    protocol: CellProtocol


@dataclass(frozen=True, slots=True)
class SimulatedCell:
    """A simulated repeat as the store keeps it."""

    concurrency: int
    repeat: int
    encoded: EncodedCell
    digest: CellDigest
    counters: SpecCounters | None


def simulated_cell(task: CellTask) -> SimulatedCell:
    """Simulate one repeat and prepare it for the store (runs in a worker, or in the process itself)."""
    records = simulate_repeat(
        task.profile, task.setting_name, task.setting, task.concurrency, task.repeat, task.protocol
    )
    return SimulatedCell(
        task.concurrency,
        task.repeat,
        encode_requests(records),
        digest_requests(records, task.concurrency),
        per_request_counters(records),
    )


def _ignore_interrupts() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)


@contextmanager
def cell_workers() -> Iterator[Executor | None]:
    """A pool of forked workers, one per core (at most MAX_WORKERS), shut down on exit; None where there
    is one core or no `fork`."""
    workers = min(len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1,
                  MAX_WORKERS)  # fmt: skip
    if workers < 2 or "fork" not in multiprocessing.get_all_start_methods():
        yield None
        return
    pool = ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork"), initializer=_ignore_interrupts)
    try:
        yield pool
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


__all__ = ["MAX_WORKERS", "CellTask", "SimulatedCell", "cell_workers", "simulated_cell"]
