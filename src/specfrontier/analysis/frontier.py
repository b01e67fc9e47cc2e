"""The trade-off views of a run: the Pareto frontier of per-user vs aggregate speed, and the best setting
per level per workload (the crossover map).

Why a frontier: a setting that is faster per user at one concurrency is often slower in aggregate; the
operator picks a point on the curve of cells that no other cell beats on both axes. Peers (vLLM's
`plot_pareto`, AIConfigurator) plot tokens/s/user vs tokens/s/GPU; we use the measured per-request p50
(1/TPOT), not output throughput / C, so idle slots do not inflate it.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from specfrontier.analysis.summary import CellSummary, RunData
from specfrontier.records import SpecCounters

_GPU_PARAMS = ("tp_size", "tensor_parallel_size", "tp", "gpus", "gpu_count")


@dataclass(frozen=True, slots=True)
class FrontierPoint:
    """One cell as a point of the per-user / aggregate trade-off."""

    setting: str
    workload: str
    level: float
    per_user_tok_s: float
    """Median over repeats of the p50 per-request tok/s."""
    aggregate_tok_s: float
    """Median over repeats of aggregate tok/s, divided by the GPU count when it is known."""
    on_frontier: bool


@dataclass(frozen=True, slots=True)
class MapEntry:
    """The best setting of one workload at one level (highest median aggregate tok/s)."""

    workload: str
    level: float
    setting: str
    runner_up: str | None
    beyond_spread: bool
    """The best's lowest repeat is above the runner-up's highest: not a tie within the noise."""


@dataclass(frozen=True, slots=True)
class AcceptanceRow:
    """Acceptance of one setting on one workload at one temperature, pooled over its cells."""

    setting: str
    workload: str
    temperature: str
    length: float | None
    rate: float | None


def gpu_count(data: RunData) -> int | None:
    """GPUs per server when the run says so (environment `gpu_count`, or a tensor-parallel setting
    parameter); None when unknown, so aggregate figures are then per server, never guessed per GPU."""
    env: dict[str, Any] = data.run.environment
    for key in ("gpu_count", "gpus"):
        value = env.get(key)
        if isinstance(value, int) and value > 0:
            return value
    counts = set()
    for s in data.settings:
        for key in _GPU_PARAMS:
            value = s.params.get(key)
            if isinstance(value, int) and value > 0:
                counts.add(value)
    return counts.pop() if len(counts) == 1 else None


def workload_name(label: str) -> str:
    """The prompt-set part of a stored workload label (`builtin:cpu-mix|t=0.0|...` -> `builtin:cpu-mix`)."""
    return label.split("|", 1)[0]


def workload_temperature(label: str) -> str:
    """The `t=` part of a stored workload label, '?' when the label does not carry one."""
    for part in label.split("|")[1:]:
        if part.startswith("t="):
            return part[2:]
    return "?"


def frontier_points(data: RunData) -> list[FrontierPoint]:
    """Every cell with both speeds, flagged when no other cell of the same workload beats it on both axes."""
    gpus = gpu_count(data) or 1
    by_workload: dict[str, list[CellSummary]] = defaultdict(list)
    for c in data.cells:
        if c.per_request_tok_s_p50.median is not None and c.aggregate_tok_s.median is not None:
            by_workload[c.workload].append(c)
    out: list[FrontierPoint] = []
    for workload, cells in sorted(by_workload.items()):
        pts = [(c, c.per_request_tok_s_p50.median or 0.0, (c.aggregate_tok_s.median or 0.0) / gpus) for c in cells]
        for c, x, y in pts:
            dominated = any(ox >= x and oy >= y and (ox > x or oy > y) for _, ox, oy in pts)
            out.append(FrontierPoint(c.setting, workload, c.level, x, y, not dominated))
    return out


def crossover_map(data: RunData) -> list[MapEntry]:
    """Best setting per (workload, level) by median aggregate tok/s, with whether the win beats the spread."""
    groups: dict[tuple[str, float], list[CellSummary]] = defaultdict(list)
    for c in data.cells:
        if c.aggregate_tok_s.median is not None:
            groups[(c.workload, c.level)].append(c)
    out = []
    for (workload, level), cells in sorted(groups.items()):
        ranked = sorted(cells, key=lambda c: -(c.aggregate_tok_s.median or 0.0))
        top, second = ranked[0], (ranked[1] if len(ranked) > 1 else None)
        beyond = second is None or (top.aggregate_tok_s.low or 0.0) > (second.aggregate_tok_s.high or 0.0)
        out.append(MapEntry(workload, level, top.setting, second.setting if second else None, beyond))
    return out


def acceptance_by_workload(data: RunData) -> list[AcceptanceRow]:
    """Counts summed over every measured window of (setting, workload) before dividing, so a short
    window weighs less; acceptance depends on the text and the temperature, not on the level."""
    pooled: dict[tuple[str, str], SpecCounters] = {}
    for c in data.cells:
        k = c.counters
        if k is None:
            continue
        key = (c.setting, c.workload)
        prev = pooled.get(key)
        pooled[key] = (
            k
            if prev is None
            else SpecCounters(
                prev.draft_tokens + k.draft_tokens,
                prev.accepted_tokens + k.accepted_tokens,
                prev.verify_steps + k.verify_steps,
            )
        )
    order = {name: i for i, name in enumerate(data.measured_settings())}
    return [
        AcceptanceRow(s, workload_name(w), workload_temperature(w), k.acceptance_length, k.acceptance_rate)
        for (s, w), k in sorted(pooled.items(), key=lambda kv: (order.get(kv[0][0], 0), kv[0][1]))
        if k.draft_tokens > 0
    ]


__all__ = [
    "AcceptanceRow",
    "FrontierPoint",
    "MapEntry",
    "acceptance_by_workload",
    "crossover_map",
    "frontier_points",
    "gpu_count",
    "workload_name",
    "workload_temperature",
]
