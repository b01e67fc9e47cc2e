"""The client side of a simulated cell: one computation behind `tune --engine sim` and `calibrate`.

A virtual-face cell is run the way `tune` runs it (`tune`'s config: requests per cell, warm-up rounds,
the cell duration, repeats, prompt and output lengths, sampling) with a per-cell seed derived from the
setting's name, the concurrency and the repeat. `calibrate` predicts a published figure by running the
very same cells and summarising them as the report does: the median over repeats of the steady-state
aggregate tok/s and of the per-request p50 (`metrics.window.cell_metrics` with the concurrency). So the table
`calibrate` prints is the run `tune --engine sim` then stores, cell for cell. Model predictions, not
measurements.
"""

from __future__ import annotations

import functools
import statistics
import zlib
from dataclasses import dataclass

from specfrontier.engines.sglang import SGLangSetting
from specfrontier.engines.sim import SimTuneConfig, seed_sim_config
from specfrontier.load.closed_loop import requests_per_cell
from specfrontier.metrics.window import CellMetrics, cell_metrics
from specfrontier.records import RequestRecord
from specfrontier.sim.profile import SimProfile
from specfrontier.sim.setting import SimSetting
from specfrontier.sim.virtual import simulate_cell


def sim_setting(setting: SGLangSetting) -> SimSetting:
    """The simulator's view of an SGLang setting (the flags it models)."""
    return SimSetting(
        algorithm=setting.algorithm,
        num_steps=setting.num_steps,
        eagle_topk=setting.eagle_topk,
        num_draft_tokens=setting.num_draft_tokens,
        max_running_requests=setting.max_running_requests,
        adaptive=tuple((lo, tuple(steps)) for lo, steps in sorted((setting.adaptive_config or {}).items())),
    )


@dataclass(frozen=True, slots=True)
class CellProtocol:
    """How every cell of a simulated run is driven: what `tune`'s config says, nothing more."""

    workload: str
    temperature: float
    ignore_eos: bool
    input_tokens: int
    max_tokens: int
    rounds_per_cell: int
    min_requests: int
    warmup_rounds: int
    cell_duration_s: float | None
    repeats: int
    seed: int

    @classmethod
    def of(cls, config: SimTuneConfig) -> CellProtocol:
        """The protocol a `tune --engine sim` run of `config` follows."""
        engine, workload = config.engine, config.workload
        return cls(
            workload=engine.workload_class,
            temperature=workload.temperature,
            ignore_eos=workload.ignore_eos,
            input_tokens=engine.input_tokens,
            max_tokens=workload.max_tokens,
            rounds_per_cell=config.rounds_per_cell,
            min_requests=engine.min_requests,
            warmup_rounds=config.warmup_rounds,
            cell_duration_s=config.cell_duration_s,
            repeats=config.repeats,
            seed=engine.seed,
        )

    def num_requests(self, concurrency: int) -> int:
        """Measured requests of a cell at `concurrency` (before the duration bound adds any)."""
        return max(self.min_requests, requests_per_cell(self.rounds_per_cell, concurrency, 1))

    def cell_seed(self, setting_name: str, concurrency: int, repeat: int) -> int:
        """The cell's random seed: stable across runs, distinct per setting, level and repeat."""
        return self.seed + zlib.crc32(f"{setting_name}/{concurrency}/{repeat}".encode())


def seed_protocol() -> CellProtocol:
    """The protocol of the seed's experiment as `tune --engine sim` runs it (`seed_sim_config`)."""
    return CellProtocol.of(seed_sim_config())


def simulate_repeat(
    profile: SimProfile,
    setting_name: str,
    setting: SimSetting,
    concurrency: int,
    repeat: int,
    protocol: CellProtocol,
) -> list[RequestRecord]:
    """One repeat of one cell, as `tune` stores it (records in virtual time; a model prediction)."""
    return simulate_cell(
        profile,
        setting,
        concurrency=concurrency,
        num_requests=protocol.num_requests(concurrency),
        workload=protocol.workload,
        temperature=protocol.temperature,
        ignore_eos=protocol.ignore_eos,
        input_tokens=protocol.input_tokens,
        max_tokens=protocol.max_tokens,
        warmup_requests=protocol.warmup_rounds * concurrency,
        seed=protocol.cell_seed(setting_name, concurrency, repeat),
        min_duration_s=protocol.cell_duration_s,
    )


@dataclass(frozen=True, slots=True)
class CellFigures:
    """A cell's headline figures as the report gives them: medians over repeats."""

    per_request_tok_s_p50: float
    aggregate_tok_s: float
    repeats: tuple[CellMetrics, ...]


def predict_figures(
    profile: SimProfile,
    setting_name: str,
    setting: SimSetting,
    concurrency: int,
    protocol: CellProtocol,
    *,
    repeats: int | None = None,
) -> CellFigures:
    """The figures `tune --engine sim` reports for this cell; `repeats` below the protocol's uses only the
    first ones (the same seeds: a fit's fast inner loop)."""
    metrics = tuple(
        cell_metrics(simulate_repeat(profile, setting_name, setting, concurrency, r, protocol), concurrency)
        for r in range(protocol.repeats if repeats is None else min(repeats, protocol.repeats))
    )
    return CellFigures(
        per_request_tok_s_p50=statistics.median(m.per_request_tok_s_p50 or 0.0 for m in metrics),
        aggregate_tok_s=statistics.median(m.aggregate_tok_s or 0.0 for m in metrics),
        repeats=metrics,
    )


@functools.cache
def seed_named_setting(steps: int) -> tuple[str, SimSetting]:
    """The seed grid's setting at `steps` with the name `tune` gives it (names seed the cells); a depth
    outside the grid is built as the grid's are (EAGLE3, topk 1; SGLang's rules resolve its draft tokens) and
    named steps<N>."""
    for s in seed_sim_config().settings:
        if s.algorithm is not None and s.num_steps == steps:
            return s.name, sim_setting(s)
    name = f"steps{steps}"
    return name, sim_setting(SGLangSetting(name=name, algorithm="EAGLE3", num_steps=steps, eagle_topk=1))


__all__ = [
    "CellFigures",
    "CellProtocol",
    "predict_figures",
    "seed_named_setting",
    "seed_protocol",
    "sim_setting",
    "simulate_repeat",
]
