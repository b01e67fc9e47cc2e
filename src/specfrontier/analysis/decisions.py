"""Decisions drawn from a run: the best setting per concurrency, crossovers, and the recommendation.

The objective at a fixed client concurrency is aggregate output tok/s (median over repeats): in a
closed loop with C requests in flight it is the rate at which the server serves those C users, and at
C=1 it equals per-request speed. A win counts as real only when the two settings' bootstrap intervals of
the median do not overlap AND the medians differ by more than 1% (`specfrontier.metrics.stats.separated`; with 3
repeats the interval is the min-max range) AND by more than the machine's measured drift at that level
(`analysis.drift`, interleaved runs); otherwise it is a tie within the noise, reported as such,
and the recommendation takes the cheapest setting among those tied with the best: no speculation < fewer
draft tokens < more (docs/metrics.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from specfrontier.analysis.deploy import deploy_command
from specfrontier.analysis.drift import drift_at, within_drift
from specfrontier.analysis.summary import CellSummary, OverRepeats, RunData
from specfrontier.engines.base import Deployable, EngineSetting
from specfrontier.engines.registry import stored_setting, vocabulary
from specfrontier.errors import ConfigError
from specfrontier.metrics.stats import separated


@dataclass(frozen=True, slots=True)
class Best:
    concurrency: float
    """The level: C, or the request rate of an open-loop run."""
    setting: str
    aggregate_tok_s: float
    runner_up: str | None
    margin: float | None
    """(best - runner-up) / runner-up, on medians."""
    beyond_spread: bool
    """True when the best is separated from the runner-up: intervals apart and more than 1% apart."""
    speedup_vs_baseline: float | None
    drift_withdrawn: bool = False
    """The medians are apart beyond the spread, but by no more than the level's measured drift
    (`analysis.drift`): not a win, treated as a tie."""


@dataclass(frozen=True, slots=True)
class Crossover:
    """`winner_low` beats `winner_high` up to `up_to`, and loses from `from_c` on."""

    winner_low: str
    winner_high: str
    up_to: float
    from_c: float
    beyond_spread: bool


def best_per_concurrency(data: RunData) -> list[Best]:
    out: list[Best] = []
    for c in data.concurrency_levels:
        ranked = sorted(
            (cell for cell in data.cells if cell.level == c and cell.aggregate_tok_s.median is not None),
            key=lambda cell: -(cell.aggregate_tok_s.median or 0.0),
        )
        if not ranked:
            continue
        top = ranked[0]
        top_value = top.aggregate_tok_s.median or 0.0
        second = ranked[1] if len(ranked) > 1 else None
        margin = beyond = None
        drifted = False
        if second is not None and second.aggregate_tok_s.median:
            margin = top_value / second.aggregate_tok_s.median - 1.0
            beyond = figures_separated(top.aggregate_tok_s, second.aggregate_tok_s)
            drifted = bool(beyond) and within_drift(top_value, second.aggregate_tok_s.median, drift_at(data, c))
            beyond = beyond and not drifted
        base = data.cell(data.baseline, c) if data.baseline else None
        speedup = top_value / base.aggregate_tok_s.median if base is not None and base.aggregate_tok_s.median else None
        runner_up = second.setting if second else None
        out.append(Best(c, top.setting, top_value, runner_up, margin, bool(beyond), speedup, drifted))
    return out


def speedup(data: RunData, setting: str, concurrency: float) -> float | None:
    """Aggregate tok/s of `setting` over the baseline's at the same concurrency (medians); None unless both
    cells are evidence (`RunData.is_evidence`): a ratio against a cell the evidence rule leaves out (a
    baseline without a steady state, say) is no result, however large."""
    cell = data.cell(setting, concurrency)
    base = data.cell(data.baseline, concurrency) if data.baseline else None
    if cell is None or base is None or not cell.aggregate_tok_s.median or not base.aggregate_tok_s.median:
        return None
    if not (data.is_evidence(cell) and data.is_evidence(base)):
        return None
    return cell.aggregate_tok_s.median / base.aggregate_tok_s.median


def crossovers(data: RunData) -> list[Crossover]:
    """Pairs whose order flips as concurrency grows (first flip only, from low to high C)."""
    names = data.measured_settings()
    levels = data.concurrency_levels
    found: list[Crossover] = []
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            prev: tuple[float, bool] | None = None
            for c in levels:
                ca, cb = data.cell(a, c), data.cell(b, c)
                if ca is None or cb is None or ca.aggregate_tok_s.median is None or cb.aggregate_tok_s.median is None:
                    continue
                a_wins = ca.aggregate_tok_s.median > cb.aggregate_tok_s.median
                if prev is not None and prev[1] != a_wins:
                    low, high = (a, b) if prev[1] else (b, a)
                    beyond = _separated(data, low, high, prev[0]) and _separated(data, high, low, c)
                    found.append(Crossover(low, high, prev[0], c, beyond))
                    break
                prev = (c, a_wins)
    return found


def figures_separated(winner: OverRepeats, loser: OverRepeats) -> bool:
    """`winner` is above `loser` beyond the noise (intervals apart, medians > 1% apart)."""
    wi, li = winner.interval, loser.interval
    if winner.median is None or loser.median is None or wi is None or li is None:
        return False
    return winner.median > loser.median and separated(winner.median, wi, loser.median, li)


def _separated(data: RunData, winner: str, loser: str, concurrency: float) -> bool:
    """`winner` above `loser` beyond the spread of repeats and by more than the level's drift."""
    w, lo = data.cell(winner, concurrency), data.cell(loser, concurrency)
    if w is None or lo is None:
        return False
    if not figures_separated(w.aggregate_tok_s, lo.aggregate_tok_s):
        return False
    return not within_drift(
        w.aggregate_tok_s.median or 0.0, lo.aggregate_tok_s.median or 0.0, drift_at(data, concurrency)
    )


def draft_length(params: dict[str, Any]) -> float:
    """Draft tokens per step a setting's parameters ask for, in any engine's spelling (inf when they do
    not say: assume the most); see `engines.registry.Vocabulary.draft_length_of`."""
    return vocabulary().draft_length_of(params)


def setting_cost(data: RunData, setting: str) -> tuple[int, float]:
    """Cost order for ties: no speculation (0, 0) < fewer draft tokens < more (1, draft length) < a
    per-batch-size schedule (2, its deepest draft length): on a tie the static setting is simpler to run."""
    row = data.setting(setting)
    if not row.speculative:
        return (0, 0.0)
    return (2 if is_scheduled(data, setting) else 1, draft_length(row.params))


def stored_engine_setting(data: RunData, name: str) -> EngineSetting | None:
    """A stored setting as its engine's setting; None when the stored parameters no longer fit the engine."""
    try:
        return stored_setting(data.run.engine, name, data.setting(name).params)
    except (ConfigError, ValidationError):
        return None


def is_scheduled(data: RunData, name: str) -> bool:
    """Whether a stored setting runs a per-batch-size schedule, as its engine says (`EngineSetting.scheduled`)."""
    setting = stored_engine_setting(data, name)
    return setting is not None and setting.scheduled


def beats_baseline(data: RunData, setting: str, concurrency: float) -> bool:
    """True when the setting's lowest repeat is above the baseline's highest at this level (a real win)."""
    return data.baseline is not None and _separated(data, setting, data.baseline, concurrency)


def recommended_per_concurrency(data: RunData) -> list[Best]:
    """The best setting per concurrency after the tie rule (a win within the noise over a cheaper
    setting goes to the cheaper one): what the recommendation uses."""
    return [_prefer_cheaper_on_tie(data, b) for b in best_per_concurrency(data)]


def _prefer_cheaper_on_tie(data: RunData, best: Best) -> Best:
    """A win inside the noise over a cheaper setting is not worth its cost: the cheapest tied one is taken.

    Every setting at this level is compared with the best itself, wherever it ranks (the baseline may
    tie with the best even when another speculative setting is the runner-up). Cost order: no
    speculation < fewer draft tokens < more; equal cost keeps the higher median.
    """
    tied: list[CellSummary] = [
        cell
        for cell in data.cells
        if cell.level == best.concurrency
        and cell.aggregate_tok_s.median
        and cell.setting != best.setting
        and not _separated(data, best.setting, cell.setting, best.concurrency)
    ]
    if not tied:
        return best
    best_cost = setting_cost(data, best.setting)
    cheaper = [c for c in tied if setting_cost(data, c.setting) < best_cost]
    if not cheaper:
        return best
    pick = min(cheaper, key=lambda c: (setting_cost(data, c.setting), -(c.aggregate_tok_s.median or 0.0)))
    value = pick.aggregate_tok_s.median or 0.0
    base = data.cell(data.baseline, best.concurrency) if data.baseline else None
    vs_base = value / base.aggregate_tok_s.median if base is not None and base.aggregate_tok_s.median else None
    top = data.cell(best.setting, best.concurrency)
    drifted = top is not None and figures_separated(top.aggregate_tok_s, pick.aggregate_tok_s)
    return Best(best.concurrency, pick.setting, value, best.setting, None, False, vs_base, drifted)


@dataclass(frozen=True, slots=True)
class Recommendation:
    """One recommended setting for a range of concurrency, with the command to deploy it."""

    setting: str
    concurrency: tuple[float, ...]
    command: tuple[str, ...] | None
    """The launch command as the run stored it (the run's own port and measurement flags)."""
    beyond_spread: bool
    note: str
    deploy: Deployable | None = None
    """What a user runs to serve the setting as measured (`analysis.deploy`); None: the run launched none."""


def recommend(data: RunData) -> list[Recommendation]:
    """Group consecutive concurrency levels that share a best setting into one recommendation each.

    Settings the correctness gate marked unsafe are left out unless the config allows them."""
    alone = len(data.settings) == 1  # `bench --url`: one server, nothing to compare it with
    data = data.recommendable()
    bests = recommended_per_concurrency(data)
    groups: list[list[Best]] = []
    for b in bests:
        if groups and groups[-1][-1].setting == b.setting:
            groups[-1].append(b)
        else:
            groups.append([b])
    out = []
    for group in groups:
        name = group[0].setting
        levels = tuple(b.concurrency for b in group)
        solid = all(b.beyond_spread for b in group)
        speedups = [b.speedup_vs_baseline for b in group if b.speedup_vs_baseline is not None]
        if alone:
            note = "the only setting measured: nothing to compare it with (no speed-up is claimed)"
            solid = True
        elif name == data.baseline:
            note = "no speculative setting beat the no-speculation baseline beyond the spread of repeats"
            solid = True
        elif speedups:
            low, high = f"{min(speedups):.2f}x", f"{max(speedups):.2f}x"
            note = f"{low if low == high else f'{low}-{high}'} the baseline's aggregate tok/s"
            unmatched = [b.concurrency for b in group if b.speedup_vs_baseline is None]
            if unmatched:  # the ratio holds where it was measured, not across the whole group
                quoted = [b.concurrency for b in group if b.speedup_vs_baseline is not None]
                note += f" at {_levels(data, quoted)}; no ratio at {_levels(data, unmatched)} ({NO_BASELINE_EVIDENCE})"
        else:
            note = f"no speed-up is claimed ({NO_BASELINE_EVIDENCE})"
        if not solid:
            note += _not_solid_note(data, group)
        drifted = [b for b in group if b.drift_withdrawn]
        if drifted:
            where = ", ".join(
                f"{data.level_text(b.concurrency)} ({b.runner_up} vs {b.setting}, drift {d.change:+.1%})"
                for b in drifted
                if (d := drift_at(data, b.concurrency)) is not None
            )
            note += f"; DRIFT: the difference at {where} is smaller than the machine's measured drift: not a win"
            solid = False
        flagged = flagged_evidence(data, group)
        if flagged:
            note += f"; WARNING: {flagged}: this evidence may be distorted"
        out.append(Recommendation(name, levels, data.setting(name).command, solid, note, deploy_command(data, name)))
    return out


NO_BASELINE_EVIDENCE = "no baseline cell there is evidence: missing, or left out by the evidence rule"
"""Why a recommendation quotes no speed-up at some levels: only a baseline cell that is evidence gives one."""


def _levels(data: RunData, levels: list[float]) -> str:
    return ", ".join(data.level_text(level) for level in levels)


def _not_solid_note(data: RunData, group: list[Best]) -> str:
    """Why a recommendation is not a win beyond the spread at some of its levels: a tie with a runner-up
    (named), or no other setting with evidence at that level to compare it with."""
    open_levels = [b for b in group if not b.beyond_spread]
    note = ""
    tied = sorted({f"{b.runner_up} at {data.level_text(b.concurrency)}" for b in open_levels if b.runner_up})
    if tied:
        cheaper = any(b.margin is None and b.runner_up for b in group)
        note += f"; within the spread of repeats of {', '.join(tied)} (treat as a tie" + (
            "; the cheaper setting is recommended)" if cheaper else ")"
        )
    unopposed = [b.concurrency for b in open_levels if not b.runner_up]
    if unopposed:
        note += (
            f"; the only setting whose cell is evidence at {_levels(data, unopposed)}: nothing to compare it "
            "with there (no win is claimed)"
        )
    return note


def cell_flags(cell: CellSummary) -> list[str]:
    """Why a cell's figures are not trusted as they stand, in the words of the Flags section (client
    saturated, noisy, no steady state); empty: none."""
    found = []
    if cell.client_saturated:
        found.append("client saturated")
    if cell.noisy:
        found.append("noisy")
    if cell.steady_too_short:
        found.append("no steady state")
    return found


def flagged_evidence(data: RunData, group: list[Best]) -> str:
    """'client saturated at baseline C=1, noisy at ngram C=2' for every flagged cell a recommendation rests
    on: at each of its levels the chosen setting, its runner-up, and the baseline its speed-up is quoted
    against. One rule at every level ('' when none is flagged)."""
    by_flag: dict[str, list[str]] = {}
    for b in group:
        names = [b.setting, b.runner_up]
        if b.speedup_vs_baseline is not None:
            names.append(data.baseline)
        for name in dict.fromkeys(n for n in names if n):
            cell = data.cell(name, b.concurrency)
            for flag in cell_flags(cell) if cell is not None else []:
                by_flag.setdefault(flag, []).append(f"{name} {data.level_text(b.concurrency)}")
    return "; ".join(f"{flag} at {', '.join(cells)}" for flag, cells in by_flag.items())


__all__ = [
    "Best",
    "Crossover",
    "Recommendation",
    "beats_baseline",
    "best_per_concurrency",
    "cell_flags",
    "crossovers",
    "draft_length",
    "figures_separated",
    "flagged_evidence",
    "is_scheduled",
    "recommend",
    "recommended_per_concurrency",
    "setting_cost",
    "speedup",
    "stored_engine_setting",
]
