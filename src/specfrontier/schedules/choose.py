"""Which speculation depth to run at each batch size, and the static best for a declared workload.

From a stored run (closed loop), per measured concurrency C, the best of the no-speculation baseline
(depth 0) and the chain settings of one depth ladder (`search.ladder`: settings that differ only in
their depth, because an engine's schedule switches the depth and nothing else). Per level the
objective is aggregate tok/s, the median over repeats (at C = 1 it is the one user's speed). A win
inside the spread of repeats goes to the cheapest setting tied with it (the baseline, else the shallower
chain), by the report's own tie rule and cost order (`analysis.decisions`), so both name the same setting.

Batch size vs concurrency: in a closed loop with C <= the server's capacity, the running batch is C;
the schedule is keyed by it. A batch size between two measured levels gets the lower level's choice
(SGLang's adaptive router rounds a batch size down to its nearest key; the vLLM table is written the
same way, and vLLM carries the last K past the table). Both engines size their buffers for the
deepest depth in the schedule, so the capacity under a schedule is that of the deepest setting.

Static workloads (`static_choices`):
- interactive: C <= 4: the highest geometric mean of per-request tok/s p50 over those levels;
- throughput: the highest aggregate tok/s at the highest measured level;
- slo: the highest aggregate tok/s over the cells whose TPOT p90 (median over repeats) meets the SLO.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass

from pydantic import ValidationError

from specfrontier.analysis.decisions import figures_separated, setting_cost
from specfrontier.analysis.summary import CellSummary, RunData, aggregate_tok_s_median
from specfrontier.engines.base import EngineSetting
from specfrontier.engines.registry import stored_setting
from specfrontier.errors import ConfigError
from specfrontier.search.ladder import depth_of, family_key

INTERACTIVE_MAX_C = 4


@dataclass(frozen=True, slots=True)
class LevelChoice:
    concurrency: int
    setting: str
    depth: int
    aggregate_tok_s: float
    beyond_spread: bool
    """The winner is separated from every other candidate (`analysis.decisions.figures_separated`)."""


@dataclass(frozen=True, slots=True)
class ScheduleEntry:
    batch_lo: int
    batch_hi: int
    depth: int
    setting: str


@dataclass(frozen=True, slots=True)
class DepthSchedule:
    """Best depth per batch size for one ladder; `template` is the ladder's deepest measured setting."""

    levels: tuple[LevelChoice, ...]
    entries: tuple[ScheduleEntry, ...]
    template: EngineSetting
    left_out: tuple[str, ...]
    """Measured settings a schedule cannot express (trees, another ladder), with the reason."""

    @property
    def max_depth(self) -> int:
        return max(e.depth for e in self.entries)

    @property
    def deepest_setting(self) -> str:
        return max(self.levels, key=lambda lv: lv.depth).setting


def run_setting(data: RunData, name: str) -> EngineSetting:
    """Setting `name` of a stored run as its engine's setting (`engines.registry.stored_setting`), with an
    error naming the run and the fix when the stored parameters no longer fit the engine."""
    row = data.setting(name)
    try:
        return stored_setting(data.run.engine, name, row.params)
    except ValidationError as exc:
        raise ConfigError(
            f"run = {data.run.run_id!r}: engine = {data.run.engine!r}: setting {name!r} = {row.params} is not a "
            f"setting of that engine ({exc.errors()[0]['msg']}); fix: schedule a run measured with its engine"
        ) from None


def _schedulable_run(data: RunData) -> None:
    if data.open_loop:
        raise ConfigError(
            f"run = {data.run.run_id!r}: an open-loop run (cells keyed by request rate, not batch size); "
            "fix: pick a closed-loop run"
        )


def depth_schedule(data: RunData) -> DepthSchedule:
    """The best depth per measured concurrency, merged into batch-size ranges starting at 1."""
    _schedulable_run(data)
    baseline = data.baseline
    settings = {name: run_setting(data, name) for name in data.measured_settings()}
    chains = {n: s for n, s in settings.items() if depth_of(s) is not None}
    left_out = [
        f"{n}: not a chain (a tree, or no depth: not on a depth ladder)"
        for n, s in settings.items()
        if s.speculative and n not in chains
    ]
    if not chains:
        raise ConfigError(
            f"run = {data.run.run_id!r}: no measured setting on a depth ladder (a chain: one draft per step, "
            "e.g. EAGLE3 num_steps with eagle_topk 1); fix: run a sweep over the depth first, e.g. "
            "`specfrontier tune --engine sim`"
        )
    family = _winning_family(data, chains)
    for n in list(chains):
        if family_key(chains[n]) != family:
            left_out.append(f"{n}: differs from the scheduled ladder in more than its depth")
            del chains[n]
    candidates = dict(chains)
    if baseline is not None:
        candidates[baseline] = settings[baseline]
    levels = [_choose(data, int(c), candidates) for c in data.concurrency_levels]
    choices = [lv for lv in levels if lv is not None]
    template = max(chains.values(), key=lambda s: depth_of(s) or 0)
    return DepthSchedule(tuple(choices), _merge(choices), template, tuple(left_out))


def _winning_family(data: RunData, chains: dict[str, EngineSetting]) -> str:
    wins: Counter[str] = Counter()
    for c in data.concurrency_levels:
        best = max(chains, key=lambda n: aggregate_tok_s_median(data.cell(n, c)) or -1.0)
        wins[family_key(chains[best])] += 1
    first = {family_key(s): i for i, s in reversed(list(enumerate(chains.values())))}
    return max(wins, key=lambda k: (wins[k], -first[k]))


def _choose(data: RunData, c: int, candidates: dict[str, EngineSetting]) -> LevelChoice | None:
    """The best candidate at C after the report's tie rule (`analysis.decisions`): every candidate whose
    figures are not separated from the top one's is tied with it, and a tie goes to the cheapest tied
    setting (no speculation < a shallower chain < a deeper one), so the schedule and the report agree."""
    ranked = sorted(
        (n for n in candidates if aggregate_tok_s_median(data.cell(n, c)) is not None),
        key=lambda n: -(aggregate_tok_s_median(data.cell(n, c)) or 0),
    )
    if not ranked:
        return None
    top_cell = data.cell(ranked[0], c)
    assert top_cell is not None
    tied = [n for n in ranked[1:] if not _separated_from(top_cell, data.cell(n, c))]
    pick = min([ranked[0], *tied], key=lambda n: (setting_cost(data, n), ranked.index(n)))
    cell = data.cell(pick, c)
    assert cell is not None
    return LevelChoice(c, pick, depth_of(candidates[pick]) or 0, cell.aggregate_tok_s.median or 0.0, not tied)


def _separated_from(top: CellSummary, other: CellSummary | None) -> bool:
    return other is not None and figures_separated(top.aggregate_tok_s, other.aggregate_tok_s)


def _merge(levels: list[LevelChoice]) -> tuple[ScheduleEntry, ...]:
    entries: list[ScheduleEntry] = []
    for i, lv in enumerate(levels):
        lo = 1 if i == 0 else lv.concurrency
        hi = levels[i + 1].concurrency - 1 if i + 1 < len(levels) else lv.concurrency
        if entries and entries[-1].depth == lv.depth:
            entries[-1] = ScheduleEntry(entries[-1].batch_lo, hi, lv.depth, entries[-1].setting)
        else:
            entries.append(ScheduleEntry(lo, hi, lv.depth, lv.setting))
    return tuple(entries)


@dataclass(frozen=True, slots=True)
class StaticChoice:
    workload: str
    setting: str | None
    figure: str
    """What was compared, with its value, or why nothing qualified."""


def static_choices(data: RunData, slo_tpot_ms: float | None = None) -> list[StaticChoice]:
    """The one setting to launch for each declared workload (see the module docstring)."""
    names = data.measured_settings()
    levels = [int(c) for c in data.concurrency_levels]
    out = [_interactive(data, names, [c for c in levels if c <= INTERACTIVE_MAX_C])]
    top = levels[-1]
    best = max(names, key=lambda n: aggregate_tok_s_median(data.cell(n, top)) or -1.0)
    tok_s = aggregate_tok_s_median(data.cell(best, top)) or 0
    out.append(StaticChoice("throughput", best, f"{tok_s:.1f} aggregate tok/s at C={top}"))
    if slo_tpot_ms is not None:
        out.append(_slo(data, names, slo_tpot_ms))
    return out


def _interactive(data: RunData, names: list[str], levels: list[int]) -> StaticChoice:
    if not levels:
        return StaticChoice("interactive", None, f"no measured level at C <= {INTERACTIVE_MAX_C}")
    scores: dict[str, float] = {}
    for n in names:
        values = [data.cell(n, c) for c in levels]
        speeds = [v.per_request_tok_s_p50.median for v in values if v is not None]
        if len(speeds) == len(levels) and all(s is not None and s > 0 for s in speeds):
            scores[n] = math.exp(sum(math.log(s or 1.0) for s in speeds) / len(speeds))
    if not scores:
        return StaticChoice("interactive", None, "no setting measured at every level C <= 4")
    best = max(scores, key=lambda n: scores[n])
    where = ",".join(map(str, levels))
    return StaticChoice(
        "interactive", best, f"{scores[best]:.1f} per-request tok/s (geometric mean of p50 at C={where})"
    )


def _slo(data: RunData, names: list[str], slo_tpot_ms: float) -> StaticChoice:
    best: tuple[float, str, int] | None = None
    for n in names:
        for c in data.concurrency_levels:
            cell = data.cell(n, c)
            tpot, agg = (cell.tpot_p90_ms.median, cell.aggregate_tok_s.median) if cell else (None, None)
            if tpot is not None and agg is not None and tpot <= slo_tpot_ms and (best is None or agg > best[0]):
                best = (agg, n, int(c))
    if best is None:
        return StaticChoice("slo", None, f"no cell meets TPOT p90 <= {slo_tpot_ms:g} ms")
    return StaticChoice(
        "slo", best[1], f"{best[0]:.1f} aggregate tok/s at C={best[2]} with TPOT p90 <= {slo_tpot_ms:g} ms"
    )


__all__ = [
    "INTERACTIVE_MAX_C",
    "DepthSchedule",
    "LevelChoice",
    "ScheduleEntry",
    "StaticChoice",
    "depth_schedule",
    "run_setting",
    "static_choices",
]
