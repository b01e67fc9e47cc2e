"""Decisions drawn from a run: the best setting per concurrency, crossovers, and the recommendation.

The objective at a fixed client concurrency is aggregate output tok/s (median over repeats): in a
closed loop with C requests in flight it is the rate at which the server serves those C users, and at
C=1 it equals per-request speed. A win counts as real only when the best setting's worst repeat beats
the runner-up's best repeat (their ranges over repeats do not overlap); otherwise it is a tie within
the noise and is reported as such.
"""

from __future__ import annotations

from dataclasses import dataclass

from specfrontier.analysis.summary import RunData


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
    """True when the best's lowest repeat is above the runner-up's highest repeat."""
    speedup_vs_baseline: float | None


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
        if second is not None and second.aggregate_tok_s.median:
            margin = top_value / second.aggregate_tok_s.median - 1.0
            beyond = (top.aggregate_tok_s.low or 0.0) > (second.aggregate_tok_s.high or 0.0)
        base = data.cell(data.baseline, c) if data.baseline else None
        speedup = top_value / base.aggregate_tok_s.median if base is not None and base.aggregate_tok_s.median else None
        out.append(Best(c, top.setting, top_value, second.setting if second else None, margin, bool(beyond), speedup))
    return out


def speedup(data: RunData, setting: str, concurrency: float) -> float | None:
    """Aggregate tok/s of `setting` over the baseline's at the same concurrency (medians)."""
    cell = data.cell(setting, concurrency)
    base = data.cell(data.baseline, concurrency) if data.baseline else None
    if cell is None or base is None or not cell.aggregate_tok_s.median or not base.aggregate_tok_s.median:
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


def _separated(data: RunData, winner: str, loser: str, concurrency: float) -> bool:
    w, lo = data.cell(winner, concurrency), data.cell(loser, concurrency)
    if w is None or lo is None or w.aggregate_tok_s.low is None or lo.aggregate_tok_s.high is None:
        return False
    return w.aggregate_tok_s.low > lo.aggregate_tok_s.high


def recommended_per_concurrency(data: RunData) -> list[Best]:
    """The best setting per concurrency after the tie rule (a win within the noise over the baseline
    goes to the baseline): what the recommendation uses."""
    return [_prefer_cheaper_on_tie(data, b) for b in best_per_concurrency(data)]


def _prefer_cheaper_on_tie(data: RunData, best: Best) -> Best:
    """A speculative win inside the noise over the no-speculation baseline is not worth its cost.

    The best is compared with the baseline itself, wherever the baseline ranks: a win within the spread
    of repeats over it falls back to it even when another speculative setting is the runner-up.
    """
    baseline = data.baseline
    if baseline is None or best.setting == baseline or _separated(data, best.setting, baseline, best.concurrency):
        return best
    base = data.cell(baseline, best.concurrency)
    if base is None or not base.aggregate_tok_s.median:
        return best
    return Best(best.concurrency, baseline, base.aggregate_tok_s.median, best.setting, None, False, 1.0)


@dataclass(frozen=True, slots=True)
class Recommendation:
    """One recommended setting for a range of concurrency, with its exact launch command."""

    setting: str
    concurrency: tuple[float, ...]
    command: tuple[str, ...] | None
    beyond_spread: bool
    note: str


def recommend(data: RunData) -> list[Recommendation]:
    """Group consecutive concurrency levels that share a best setting into one recommendation each.

    Settings the correctness gate marked unsafe are left out unless the config allows them."""
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
        if name == data.baseline:
            note = "no speculative setting beat the no-speculation baseline beyond the spread of repeats"
            solid = True
        elif speedups:
            note = f"{min(speedups):.2f}x-{max(speedups):.2f}x the baseline's aggregate tok/s"
        else:
            note = "no baseline measured at these levels"
        if not solid:
            tied = sorted(
                {
                    f"{b.runner_up} at {data.level_text(b.concurrency)}"
                    for b in group
                    if not b.beyond_spread and b.runner_up
                }
            )
            note += f"; within the spread of repeats of {', '.join(tied)} (treat as a tie)"
        distorted = _client_saturated_evidence(data, group)
        if distorted:
            note += f"; WARNING: client saturated at {', '.join(distorted)}: this evidence may be distorted"
        out.append(Recommendation(name, levels, data.setting(name).command, solid, note))
    return out


def _client_saturated_evidence(data: RunData, group: list[Best]) -> list[str]:
    """'<setting> at <level>' for every cell a recommendation rests on (the chosen setting and its
    runner-up at each level) whose client was saturated in some repeat."""
    found = []
    for b in group:
        for name in (b.setting, b.runner_up):
            cell = data.cell(name, b.concurrency) if name else None
            if cell is not None and cell.client_saturated:
                found.append(f"{name} {data.level_text(b.concurrency)}")
    return found


__all__ = [
    "Best",
    "Crossover",
    "Recommendation",
    "best_per_concurrency",
    "crossovers",
    "recommend",
    "recommended_per_concurrency",
    "speedup",
]
