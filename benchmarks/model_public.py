"""The performance model on public tables nobody here made (issue 38): how wrong it is, whether its stated
error covers that, what its picks lose, and what guided search needs on each table.

Run: `.venv/bin/python benchmarks/model_public.py [--json | --json-out FILE] [--tables FILE ...] [--no-depth-cap]`
(default: every `.csv`/`.json` table in benchmarks/public; results of a run are kept in
benchmarks/public/RESULTS.md).

Each table goes through the project's own path: `specfrontier import` (`runs.imported.load_table`,
`store_table` into a temporary store), `perfmodel.plan.run_cells` (the cells and the MoE ratio the file
gives), `perfmodel.fit_model` and `FittedModel.predict`. A setting the table marks `adaptive` (an engine's
adaptive policy, e.g. vLLM's adaptive verification) is set aside: it is not a static setting the model
describes; the output names it.

Definitions (a figure is one published tok/s number: a cell's aggregate and, where given, its per-request
decode rate; relative error = (predicted - measured) / measured):

- training RMS: the model fitted to every cell of the table, RMS of the relative error over every figure;
- leave-one-setting-out (LOSO): per setting, the model fitted to all other settings' cells predicts that
  setting's figures; leave-one-level-out (LOLO): per concurrency level, fitted to all other levels'
  cells, it predicts that level's figures. Mean and max are of |relative error| over the held-out figures
  the model predicts; a figure it refuses (a drafter family no fitted cell uses, a fit that fails) is
  counted as "refused", not as an error;
- coverage: the share of held-out figures (LOSO and LOLO together) whose measured value lies inside the
  interval the model states with that prediction (`Prediction.aggregate_interval` /
  `per_request_interval`: what plan prints as +/-); a prediction without an interval is not covered;
- loss of the predicted best, at each level C: every setting measured at C is predicted at C by the model
  that did not see it (LOSO: fitted without that setting; LOLO: fitted without level C); the model's pick
  is the setting with the highest predicted aggregate tok/s; loss = (the table's best measured aggregate
  at C - the pick's measured aggregate at C) / the table's best, in %. The loss "exceeds the stated
  error" when it is larger than the pick's stated relative half-width at C ((high - predicted) / predicted
  of its aggregate interval; none stated counts as exceeding). Settings the model refuses cannot be
  picked, and where the model refuses a setting measured at C it claims no best there (the level is
  shown with the pick it would make among the rest, but a refusal is not counted as a loss); nor does it
  claim a best where the pick's predicted lead over the second is within the pick's stated error (the
  model's own rule, `perfmodel.decide`: "the model does not separate these settings here; measure"), nor,
  with the level held out, between two measured levels whose measured bests differ (`decide.crossover`); the
  best is over every (non-adaptive) setting measured at C;
- guided search, replayed: `search.guided.GuidedStrategy` (the strategy `tune --search guided` runs), with
  every level of the table as a target, chooses settings from the table's settings one at a time; a
  chosen setting is "measured" by reading its cells at the levels the proposal asks for from the table
  (one repeat: median = low = high; an acceptance length becomes the counters that give it). Launches =
  settings it chose, of the table's settings (the grid). Ladders are capped at the table's deepest depth
  (`search.max_depth`) so every proposal can be answered; `--no-depth-cap` replays today's default depth,
  where a proposal outside the table counts as a launch that failed to run. Regret at C = (the table's
  best - the table's value of guided's answer, its best measured setting at C) / the table's best.

Pooled line: coverage over every held-out figure of every table; LOSO mean/max over the held-out figures
of chain settings (speculative, topk 1) of every table.

Set aside: a table whose cells contradict the model's premises beyond the noise its source states
(`perfmodel.consistency`: within one drafter family at one level, a setting that drafts and verifies at
least as much as another yet completes its cycle faster, by more than the file's `noise_pct`, or the 1 % of
published rounding when the source states no spread as a number) is shown with those pairs and not fitted;
the pooled line leaves it out and names it. Guided search is still replayed on it.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from specfrontier.analysis.summary import OverRepeats
from specfrontier.config.search import SearchConfig
from specfrontier.engines.base import EngineSetting
from specfrontier.engines.registry import stored_setting
from specfrontier.errors import ConfigError, SpecFrontierError
from specfrontier.perfmodel import FittedModel, ModelCell, fit_model
from specfrontier.perfmodel.consistency import contradictions
from specfrontier.perfmodel.decide import crossover, measured_bests
from specfrontier.perfmodel.plan import run_cells
from specfrontier.records import SpecCounters
from specfrontier.runs.imported import ADAPTIVE_KEY, load_table, store_table
from specfrontier.search.base import Done
from specfrontier.search.guided import GuidedStrategy
from specfrontier.search.observe import Observations
from specfrontier.store import Store

PUBLIC = Path(__file__).resolve().parent / "public"
KINDS = ("aggregate_tok_s", "per_request_tok_s")
REGRET_TARGET = 0.01
SET_ASIDE_KEY = "set_aside"
"""A table file's map {setting: why} of settings its source says are not valid (quoted, never fitted)."""


@dataclass(frozen=True, slots=True)
class Table:
    """One public table as the model sees it: cells of its static settings, and what was set aside."""

    name: str
    engine: str
    cells: tuple[ModelCell, ...]
    rho: float | None
    params: dict[str, dict[str, Any]]
    """Setting name -> its stored parameters (engine spelling), static settings only."""
    set_aside: dict[str, str]
    """Setting name -> why it is not fitted."""
    noise: float = 0.0
    """The relative noise the source states (the file's `noise_pct` / 100; 0: none stated as a number)."""

    @property
    def settings(self) -> list[str]:
        return list(dict.fromkeys(c.setting for c in self.cells))

    @property
    def levels(self) -> list[int]:
        return sorted({c.concurrency for c in self.cells})


@dataclass(frozen=True, slots=True)
class HeldOut:
    """One figure predicted by a model that did not see it (or refused)."""

    setting: str
    concurrency: int
    kind: str
    measured: float
    predicted: float | None
    low: float | None
    high: float | None
    chain: bool

    @property
    def error(self) -> float | None:
        return None if self.predicted is None else (self.predicted - self.measured) / self.measured

    @property
    def covered(self) -> bool:
        return self.low is not None and self.high is not None and self.low <= self.measured <= self.high


@dataclass(frozen=True, slots=True)
class Pick:
    """At one level: the model's predicted best, what it loses, and whether that exceeds its stated error."""

    concurrency: int
    best: str
    best_tok_s: float
    pick: str | None
    pick_tok_s: float | None
    loss_pct: float | None
    stated_pct: float | None
    exceeds: bool
    refused: tuple[str, ...] = ()
    """Settings measured at this level that the model refuses to predict: it can claim no best here."""
    separated: bool = True
    """False: the pick's predicted lead over the second is within its stated error, so the model claims no
    best here ('the model does not separate these settings here; measure'), and no loss counts against it."""


@dataclass(frozen=True, slots=True)
class Guided:
    launches: int
    grid: int
    outside: int
    chosen: list[str]
    regret_pct: dict[int, float]
    stop: str

    @property
    def worst(self) -> tuple[float, int | None]:
        if not self.regret_pct:
            return 0.0, None
        level = max(self.regret_pct, key=lambda c: self.regret_pct[c])
        return self.regret_pct[level], level


@dataclass
class Score:
    table: str
    engine: str
    cells: int
    settings: int
    levels: list[int]
    set_aside: dict[str, str]
    form: str | None = None
    train_rms_pct: float | None = None
    train_note: str = ""
    loso: list[HeldOut] = field(default_factory=list)
    lolo: list[HeldOut] = field(default_factory=list)
    refused: dict[str, str] = field(default_factory=dict)
    """Held-out group (setting or level) -> why the model refused it."""
    picks_loso: list[Pick] = field(default_factory=list)
    picks_lolo: list[Pick] = field(default_factory=list)
    guided: Guided | None = None
    guided_note: str = ""
    seconds: float = 0.0
    contradictions: list[str] = field(default_factory=list)
    """Pairs of cells that contradict the model's premises beyond the stated noise: the table is set aside."""


# -- the table ---------------------------------------------------------------------------------------------


def read_table(path: Path, store: Store) -> Table:
    """Import `path` as `specfrontier import` does and read its cells back through `run_cells`."""
    imported = load_table(path)
    run_id = store_table(store, imported)
    run = run_cells(store, run_id)
    params = {s.name: dict(s.params) for s in imported.settings}
    aside = {
        name: f"adaptive policy ({p[ADAPTIVE_KEY]}): not a static setting the model describes"
        for name, p in params.items()
        if ADAPTIVE_KEY in p
    }
    aside.update(_source_set_aside(path, imported.metadata.get(SET_ASIDE_KEY), params))
    cells = tuple(c for c in run.cells if c.setting not in aside)
    static = {n: p for n, p in params.items() if n not in aside}
    noise = float(imported.metadata.get("noise_pct") or 0.0) / 100.0
    return Table(path.name, run.engine, cells, run.rho, static, aside, noise)


def _source_set_aside(path: Path, given: object, params: Mapping[str, object]) -> dict[str, str]:
    """The table file's own `set_aside` map {setting: why}: settings its source says are not valid settings
    (e.g. a configuration the engine refuses, measured with the check patched out): quoted, not fitted."""
    if given is None:
        return {}
    if not isinstance(given, dict) or not all(isinstance(v, str) and v for v in given.values()):
        raise ConfigError(f"{path.name}: {SET_ASIDE_KEY} must map setting names to reasons; fix: {{name: why}}")
    unknown = sorted(set(given) - set(params))
    if unknown:
        raise ConfigError(
            f"{path.name}: {SET_ASIDE_KEY} names {', '.join(unknown)}, not settings of the table; "
            f"fix: use one of {', '.join(sorted(params))}"
        )
    return {str(k): f"the source: {v}" for k, v in given.items()}


def _figures(cells: Sequence[ModelCell]) -> list[tuple[ModelCell, str, float]]:
    return [(c, k, v) for c in cells for k in KINDS if (v := getattr(c, k)) is not None]


def _fit(table: Table, cells: Sequence[ModelCell]) -> FittedModel:
    return fit_model(list(cells), rho=table.rho)


def _predict(
    model: FittedModel | None, cell: ModelCell, kind: str, measured: float, why: list[str] | None = None
) -> HeldOut:
    """The model's prediction of one figure; a refusal appends the model's own reason to `why`."""
    chain = cell.params.speculative and cell.params.topk == 1
    if model is None:
        return HeldOut(cell.setting, cell.concurrency, kind, measured, None, None, None, chain)
    try:
        p = model.predict(cell.params, cell.concurrency)
    except SpecFrontierError as exc:
        if why is not None:
            why.append(str(exc))
        return HeldOut(cell.setting, cell.concurrency, kind, measured, None, None, None, chain)
    value = p.aggregate_tok_s if kind == "aggregate_tok_s" else p.per_request_tok_s
    interval = p.aggregate_interval if kind == "aggregate_tok_s" else p.per_request_interval
    low, high = interval if interval is not None else (None, None)
    return HeldOut(cell.setting, cell.concurrency, kind, measured, value, low, high, chain)


def held_out(
    table: Table, group: Callable[[ModelCell], object], refused: dict[str, str], label: Callable[[object], str]
) -> list[HeldOut]:
    """Every figure predicted by the model fitted without its group (a setting, or a level)."""
    out: list[HeldOut] = []
    for key in dict.fromkeys(group(c) for c in table.cells):
        test = [c for c in table.cells if group(c) == key]
        train = [c for c in table.cells if group(c) != key]
        model: FittedModel | None
        try:
            model = _fit(table, train)
        except SpecFrontierError as exc:
            model = None
            refused[label(key)] = f"fit failed: {exc}"
        why: list[str] = []
        for cell, kind, value in _figures(test):
            h = _predict(model, cell, kind, value, why)
            if h.predicted is None and label(key) not in refused:
                refused[label(key)] = f"the model refuses it: {why[-1]}" if why else "the model refuses it"
            out.append(h)
    return out


def picks(table: Table, predictions: Sequence[HeldOut], *, levels_held_out: bool = False) -> list[Pick]:
    """Per level, the model's pick among the settings measured there (see the module docstring). With
    `levels_held_out` (each level predicted by a fit without it), a level between two whose measured bests
    differ gets no claim, as `decide` gives none there (`perfmodel.decide.crossover`)."""
    out = []
    agg = {(h.setting, h.concurrency): h for h in predictions if h.kind == "aggregate_tok_s"}
    bests = measured_bests({(c.setting, c.concurrency): c.aggregate_tok_s for c in table.cells})
    for level in table.levels:
        measured = {c.setting: c.aggregate_tok_s for c in table.cells if c.concurrency == level and c.aggregate_tok_s}
        if not measured:
            continue
        best = max(measured, key=lambda s: measured[s] or 0.0)
        best_v = measured[best] or 0.0
        predicted = {s: h for s in measured if (h := agg.get((s, level))) is not None and h.predicted is not None}
        refused = tuple(s for s in measured if s not in predicted)
        if not predicted:
            out.append(Pick(level, best, best_v, None, None, None, None, False, refused))
            continue
        ranked = sorted(predicted, key=lambda s: -(predicted[s].predicted or 0.0))
        pick = ranked[0]
        h = predicted[pick]
        pick_v = measured[pick] or 0.0
        loss = 100.0 * (best_v - pick_v) / best_v
        stated = None if h.high is None or not h.predicted else 100.0 * (h.high - h.predicted) / h.predicted
        second = predicted[ranked[1]].predicted if len(ranked) > 1 else None
        lead = None if not second else 100.0 * ((h.predicted or 0.0) / second - 1.0)
        crossing = levels_held_out and crossover(level, {k: v for k, v in bests.items() if k != level}) is not None
        separated = stated is not None and (lead is None or lead > stated) and not crossing
        # a refusal, or a lead within the stated error, is no claim, not a loss
        beyond = not refused and separated and (stated is None or loss > stated + 1e-9)
        out.append(Pick(level, best, best_v, pick, pick_v, loss, stated, beyond, refused, separated))
    return out


# -- guided search, replayed on the table -----------------------------------------------------------------


def _counters(cell: ModelCell) -> SpecCounters | None:
    """Counters that give the cell's published acceptance (the model reads acceptance from counters)."""
    if not cell.params.speculative or cell.acceptance_length is None:
        return None
    steps = 1_000_000
    positions = tuple(round(r * steps) for r in cell.acceptance_per_position)
    accepted = round((cell.acceptance_length - 1.0) * steps)
    return SpecCounters(cell.params.steps * steps, accepted, steps, positions)


def _observations(table: Table, measured: dict[str, tuple[int, ...]], failed: set[str]) -> Observations:
    figures: dict[tuple[str, str, int], dict[str, OverRepeats]] = {}
    counters: dict[tuple[str, str, int], SpecCounters] = {}
    for c in table.cells:
        if c.concurrency not in measured.get(c.setting, ()):
            continue
        key = (c.setting, "", c.concurrency)
        figures[key] = {
            "aggregate_tok_s": OverRepeats.of([c.aggregate_tok_s]),
            "per_request_tok_s_p50": OverRepeats.of([c.per_request_tok_s]),
            "per_request_tok_s_p10": OverRepeats.of([]),
            "tpot_p90_ms": OverRepeats.of([]),
        }
        if (counted := _counters(c)) is not None:
            counters[key] = counted
    status = {n: "done" for n in measured} | {n: "failed" for n in failed}
    capacity = {c.setting: c.capacity for c in table.cells}
    params = {n: table.params.get(n, {}) for n in status}
    return Observations(figures=figures, status=status, capacity=capacity, counters=counters, params=params)


def _depth_cap(settings: Sequence[EngineSetting]) -> int | None:
    depths = [d for s in settings if (d := s.depth) is not None]
    return max(depths) if depths else None


def replay_guided(table: Table, *, depth_cap: bool = True) -> Guided:
    """Guided search on the table (see the module docstring); raises SpecFrontierError when the table's
    settings are not settings of its engine."""
    settings = [stored_setting(table.engine, name, params) for name, params in table.params.items()]
    search = SearchConfig(
        strategy="guided", target_concurrency=tuple(table.levels), max_depth=_depth_cap(settings) if depth_cap else None
    )
    strategy = GuidedStrategy(settings, table.levels, search)
    measured: dict[str, tuple[int, ...]] = {}
    failed: set[str] = set()
    chosen: list[str] = []
    stop = "no proposal"
    for _ in range(10 * (len(settings) + 16)):
        obs = _observations(table, measured, failed)
        step = strategy.propose(obs, set(measured) | failed)
        if isinstance(step, Done):
            stop = step.reason
            break
        name = step.setting.name
        chosen.append(name)
        if name in table.params:
            measured[name] = tuple(step.concurrency or table.levels)
        else:
            failed.add(name)
    else:
        stop = "replay stopped: too many proposals"
    regret: dict[int, float] = {}
    for level in table.levels:
        truth = {c.setting: c.aggregate_tok_s or 0.0 for c in table.cells if c.concurrency == level}
        seen = {s: v for s, v in truth.items() if level in measured.get(s, ())}
        if truth and seen:
            best = max(truth.values())
            regret[level] = 100.0 * (best - max(seen.values())) / best
        elif truth:
            regret[level] = 100.0
    return Guided(len(chosen), len(settings), len(failed), chosen, regret, stop)


# -- one table, all tables ------------------------------------------------------------------------------


def _training_rms(table: Table) -> tuple[str, float] | None:
    """(the form chosen, the RMS % of its relative errors on every figure it was fitted to); None: no figure
    had an error (raises SpecFrontierError when the fit fails)."""
    full = _fit(table, table.cells)
    errors = [h.error for c, k, v in _figures(table.cells) if (h := _predict(full, c, k, v)).error is not None]
    return (full.form, 100.0 * math.sqrt(sum(e * e for e in errors) / len(errors))) if errors else None


def score(path: Path, *, depth_cap: bool = True, guided: bool = True, model: bool = True) -> Score:
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        table = read_table(path, Store(Path(tmp) / "public.db"))
    result = Score(path.name, table.engine, len(table.cells), len(table.settings), table.levels, table.set_aside)
    result.contradictions = [c.describe() for c in contradictions(table.cells, table.noise)]
    if model and result.contradictions:
        # shown, not hidden: what the fit would read had the table been kept (not counted in any bar)
        try:
            anyway = _training_rms(table)
        except SpecFrontierError:
            anyway = None
        shown = "" if anyway is None else f"; fitted anyway: training RMS {anyway[1]:.1f} % ({anyway[0]})"
        result.train_note = f"set aside: its cells contradict the model's premises (below); not fitted{shown}"
    elif model:
        try:
            fitted = _training_rms(table)
            if fitted is not None:
                result.form, result.train_rms_pct = fitted
        except SpecFrontierError as exc:
            result.train_note = f"fit failed: {exc}"
        result.loso = held_out(table, lambda c: c.setting, result.refused, lambda k: f"setting {k}")
        result.lolo = held_out(table, lambda c: c.concurrency, result.refused, lambda k: f"C={k}")
        result.picks_loso = picks(table, result.loso)
        result.picks_lolo = picks(table, result.lolo, levels_held_out=True)
    if guided:
        try:
            result.guided = replay_guided(table, depth_cap=depth_cap)
        except (SpecFrontierError, ValueError) as exc:
            result.guided_note = f"not replayed: {exc}"
    result.seconds = time.monotonic() - started
    return result


def _stats(items: Sequence[HeldOut]) -> tuple[float | None, float | None, int, int]:
    """(mean |error| %, max |error| %, predicted figures, refused figures)."""
    errors = [abs(e) for h in items if (e := h.error) is not None]
    refused = sum(1 for h in items if h.error is None)
    if not errors:
        return None, None, 0, refused
    return 100.0 * sum(errors) / len(errors), 100.0 * max(errors), len(errors), refused


def _coverage(items: Sequence[HeldOut]) -> tuple[int, int]:
    predicted = [h for h in items if h.predicted is not None]
    return sum(1 for h in predicted if h.covered), len(predicted)


def _pct(v: float | None, digits: int = 1) -> str:
    return "-" if v is None else f"{v:.{digits}f}"


def _worst_pick(items: Sequence[Pick]) -> str:
    scored = [p for p in items if p.loss_pct is not None and not p.refused and p.separated]
    unclaimed = sum(1 for p in items if p.refused)
    tail = f"; {unclaimed} levels no claim (refused)" if unclaimed else ""
    close = sum(1 for p in items if not p.refused and not p.separated)
    tail += f"; {close} levels not separated" if close else ""
    if not scored:
        return f"no claim at any level{tail}"
    worst = max(scored, key=lambda p: p.loss_pct or 0.0)
    over = sum(1 for p in items if p.exceeds)
    return f"{_pct(worst.loss_pct)} (C={worst.concurrency}); {over}/{len(items)} beyond error{tail}"


def summary_rows(scores: Sequence[Score]) -> list[str]:
    head = (
        "| table | cells (settings x levels) | form | train RMS % | LOSO mean/max % (n, refused) | "
        "LOLO mean/max % (n, refused) | coverage | pick loss, LOSO: worst % (C); levels beyond stated error | "
        "pick loss, LOLO | guided launches/grid | guided worst regret % (C); levels > 1 % |"
    )
    rows = [head, "|" + "---|" * 11]
    for s in scores:
        lm, lx, ln, lr = _stats(s.loso)
        om, ox, on, orf = _stats(s.lolo)
        cov, n = _coverage(s.loso + s.lolo)
        g = s.guided
        if g is not None:
            worst, at = g.worst
            over = sum(1 for v in g.regret_pct.values() if v > 100 * REGRET_TARGET)
            outside = f", {g.outside} outside the table" if g.outside else ""
            guided = f"{g.launches}/{g.grid}{outside}"
            regret = f"{_pct(worst, 2)} (C={at}); {over}"
        else:
            guided, regret = s.guided_note or "-", "-"
        rows.append(
            f"| {s.table} | {s.cells} ({s.settings} x {len(s.levels)}) | {s.form or s.train_note} | "
            f"{_pct(s.train_rms_pct)} | {_pct(lm)}/{_pct(lx)} ({ln}, {lr}) | {_pct(om)}/{_pct(ox)} ({on}, {orf}) | "
            f"{cov}/{n} ({_pct(100.0 * cov / n if n else None, 0)} %) | {_worst_pick(s.picks_loso)} | "
            f"{_worst_pick(s.picks_lolo)} | {guided} | {regret} |"
        )
    return rows


def pooled_line(scores: Sequence[Score]) -> str:
    aside = [s.table for s in scores if s.contradictions]
    scores = [s for s in scores if not s.contradictions]
    held = [h for s in scores for h in s.loso + s.lolo]
    cov, n = _coverage(held)
    chains = [h for s in scores for h in s.loso if h.chain]
    mean, worst, count, refused = _stats(chains)
    picks_over = sum(1 for s in scores for p in s.picks_loso + s.picks_lolo if p.exceeds)
    picks_all = sum(len(s.picks_loso) + len(s.picks_lolo) for s in scores)
    return (
        f"pooled over {len(scores)} tables: coverage {cov}/{n} held-out figures "
        f"({_pct(100.0 * cov / n if n else None)} %, target >= 90 %); chains LOSO mean {_pct(mean)} %, "
        f"max {_pct(worst)} % over {count} figures ({refused} refused; target mean <= 3 %, max <= 8 %); "
        f"predicted bests losing more than their stated error: {picks_over} of {picks_all} (level, held-out kind)"
        + (f"; set aside (cells that contradict the model's premises): {', '.join(aside)}" if aside else "")
    )


def detail_lines(s: Score) -> list[str]:
    lines = [f"### {s.table} ({s.engine}; {s.seconds:.0f} s)"]
    for why in s.contradictions:
        lines.append(f"- set aside, contradicts the model's premises beyond the stated noise: {why}")
    for name, why in s.set_aside.items():
        lines.append(f"- set aside: {name}: {why}")
    for group, why in s.refused.items():
        lines.append(f"- refused: {group}: {why}")
    for label, items in (("LOSO", s.picks_loso), ("LOLO", s.picks_lolo)):
        shown = "; ".join(
            f"C={p.concurrency}: best {p.best} ({p.best_tok_s:.0f}), pick {p.pick or '-'}"
            + (f" loses {p.loss_pct:.1f} % (stated {_pct(p.stated_pct)} %)" if p.loss_pct is not None else "")
            + (" BEYOND" if p.exceeds else "")
            + (f" (no claim: refuses {', '.join(p.refused)})" if p.refused else "")
            + (" (no claim: not separated within its stated error)" if not p.refused and not p.separated else "")
            for p in items
        )
        lines.append(f"- picks ({label}): {shown}")
    if s.guided is not None:
        g = s.guided
        regrets = ", ".join(f"C={c} {v:.2f} %" for c, v in g.regret_pct.items())
        lines.append(f"- guided: chose {', '.join(g.chosen)}; regret {regrets}; stop: {g.stop}")
    elif s.guided_note:
        lines.append(f"- guided: {s.guided_note}")
    return lines


def to_json(scores: Sequence[Score]) -> dict[str, Any]:
    def one(s: Score) -> dict[str, Any]:
        d = asdict(s)
        d["guided"] = None if s.guided is None else {**asdict(s.guided), "worst": list(s.guided.worst)}
        d["loso_stats"] = dict(zip(("mean_pct", "max_pct", "n", "refused"), _stats(s.loso), strict=True))
        d["lolo_stats"] = dict(zip(("mean_pct", "max_pct", "n", "refused"), _stats(s.lolo), strict=True))
        d["coverage"] = dict(zip(("covered", "n"), _coverage(s.loso + s.lolo), strict=True))
        return d

    return {"tables": [one(s) for s in scores], "pooled": pooled_line(scores)}


def tables(paths: Sequence[str]) -> list[Path]:
    if paths:
        return [Path(p) for p in paths]
    return sorted(p for p in PUBLIC.iterdir() if p.suffix in (".csv", ".json"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tables", nargs="*", default=[], help="table files (default: all of benchmarks/public)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of the tables")
    parser.add_argument("--json-out", type=Path, help="also write the JSON to this file")
    parser.add_argument("--no-depth-cap", action="store_true", help="guided: today's default depth, not the table's")
    parser.add_argument("--no-guided", action="store_true", help="skip the guided-search replay")
    parser.add_argument("--guided-only", action="store_true", help="only the guided-search replay (no held-out fits)")
    args = parser.parse_args()
    scores = []
    for path in tables(args.tables):
        scores.append(
            score(path, depth_cap=not args.no_depth_cap, guided=not args.no_guided, model=not args.guided_only)
        )
        if not args.json:
            print(f"scored {path.name} in {scores[-1].seconds:.0f} s", file=sys.stderr, flush=True)
    if args.json_out is not None:
        args.json_out.write_text(json.dumps(to_json(scores), indent=1) + "\n", encoding="utf-8")
    if args.json:
        print(json.dumps(to_json(scores), indent=1))
        return 0
    print("\n".join(summary_rows(scores)))
    print()
    print(pooled_line(scores))
    for s in scores:
        print()
        print("\n".join(detail_lines(s)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
