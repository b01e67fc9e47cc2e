"""Cell summaries over repeats, computed from the store alone.

Each figure of a cell is the median over its repeats, with the lowest and highest repeat, the MAD and a
seeded bootstrap interval of the median (`specfrontier.metrics.stats`; docs/metrics.md). A cell is noisy when its
aggregate tok/s has a relative MAD above 10%: MAD, unlike the range, is not moved by one disturbed
repeat. Acceptance is
pooled over repeats: counts are summed first, then divided, so a short repeat does not weigh as much
as a long one. Each repeat's window figures, time slices and latency spikes are the digest stored with it
(`specfrontier.metrics.digest`, computed from its requests when it was recorded); goodput under SLOs
given at report time reads the requests' times and counts only (a stored cell's head blob).
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from specfrontier.analysis.gate import DEFAULT_TOLERANCE, GateResult, correctness_gate, unsafe_settings
from specfrontier.analysis.sessions import TurnSummary, turn_summaries
from specfrontier.config.limits import DEFAULT_MAX_CLIENT_LAG_SHARE, DEFAULT_MAX_FAILED_SHARE
from specfrontier.load.health import CPU_LIMIT, LAG_P99_LIMIT_MS, saturated
from specfrontier.metrics.declare import MetricSpec
from specfrontier.metrics.digest import CellDigest
from specfrontier.metrics.slo import Slo, WindowGoodput, window_goodput
from specfrontier.metrics.specs import ADDED_METRICS, CELL_METRICS
from specfrontier.metrics.stats import NOISY_RELATIVE_MAD, Interval, bootstrap_ci, mad
from specfrontier.metrics.timeslices import Spike, TimeSlice
from specfrontier.metrics.window import CellMetrics
from specfrontier.records import SpecCounters
from specfrontier.store import CellRow, RunRow, SettingRow, Store
from specfrontier.store.cell_requests import request_heads

NOISY_SPREAD = NOISY_RELATIVE_MAD
"""A cell whose relative MAD (MAD / median over repeats) of aggregate tok/s exceeds this is flagged noisy."""
MIN_STEADY_S = 1.0
"""C > 1: a steady span shorter than this (seconds, server time) is too short to give a rate."""
MIN_STEADY_CONCURRENCY = 0.95
"""Inside the steady span at least this share of C must be in flight on average."""
MIN_STEADY_LIFETIMES = 4.0
"""C > 1: the steady span must cover this many request lifetimes (median E2E): its edges cut requests in
progress, and on the CPU llama.cpp server the steady rate was within 2% of a 60-second cell's from 4 on
(`metrics.steady`)."""


@dataclass(frozen=True, slots=True)
class OverRepeats:
    """A figure over repeats: median, the lowest/highest repeat, MAD and a bootstrap interval of the median."""

    median: float | None
    low: float | None
    high: float | None
    n: int
    mad: float | None = None
    """Median absolute deviation from the median (unscaled)."""
    ci_low: float | None = None
    ci_high: float | None = None
    """95% percentile-bootstrap interval of the median (seeded: the same data gives the same interval)."""

    @classmethod
    def of(cls, values: Sequence[float | None]) -> OverRepeats:
        present = [v for v in values if v is not None]
        if not present:
            return cls(None, None, None, 0)
        ci = bootstrap_ci(present)
        return cls(statistics.median(present), min(present), max(present), len(present), mad(present), ci.low, ci.high)

    @property
    def interval(self) -> Interval | None:
        """The bootstrap interval; falls back to [low, high] for an OverRepeats built by hand without one."""
        if self.ci_low is not None and self.ci_high is not None:
            return Interval(self.ci_low, self.ci_high)
        if self.low is not None and self.high is not None:
            return Interval(self.low, self.high)
        return None

    @property
    def relative_mad(self) -> float | None:
        """MAD / median: the noise rule's measure (None without a MAD or with a zero median)."""
        if self.mad is None or self.median is None or self.median == 0:
            return None
        return self.mad / abs(self.median)

    @property
    def relative_spread(self) -> float | None:
        """(high - low) / median: 0 for identical repeats."""
        if self.median is None or self.low is None or self.high is None or self.median == 0:
            return None
        return (self.high - self.low) / self.median


_NO_FIGURE = OverRepeats(None, None, None, 0)


@dataclass(frozen=True, slots=True)
class GoodputSummary:
    """Goodput of a cell under the report's SLOs, per repeat and over repeats (`specfrontier.metrics.slo`)."""

    windows: tuple[WindowGoodput, ...]

    @property
    def goodput_req_s(self) -> OverRepeats:
        return OverRepeats.of([w.goodput_req_s for w in self.windows])

    @property
    def goodput_tok_s(self) -> OverRepeats:
        return OverRepeats.of([w.goodput_tok_s for w in self.windows])

    @property
    def good_fraction(self) -> OverRepeats:
        return OverRepeats.of([w.good_fraction for w in self.windows])

    @property
    def slo_met(self) -> bool:
        """Every repeat met every SLO's percentile target."""
        return bool(self.windows) and all(w.slo_met for w in self.windows)

    def observed(self, key: str) -> OverRepeats:
        """The SLO's percentile per repeat (failed requests as infinitely slow; infinite -> left out)."""
        return OverRepeats.of([c.observed_ms for w in self.windows for c in w.checks if c.slo.key == key])


@dataclass(frozen=True, slots=True)
class CellSummary:
    """One cell over its repeats.

    Its metric fields (a `OverRepeats`, or an int summed over repeats) are those `metrics.specs` declares
    in its core list and are filled from that declaration; they stay spelled out here so that every use is
    type-checked (a test keeps the two lists equal). A metric declared in a file of its own
    (`metrics/added/`) is in `more`; `value(name)` and `figure(name)` read either. The other fields are
    facts of the cell.
    """

    setting: str
    concurrency: int
    workload: str
    repeats: int
    per_request_tok_s_p50: OverRepeats
    per_request_tok_s_p10: OverRepeats
    aggregate_tok_s: OverRepeats
    ttft_p50_ms: OverRepeats
    ttft_p90_ms: OverRepeats
    ttft_p99_ms: OverRepeats
    tpot_p50_ms: OverRepeats
    tpot_p90_ms: OverRepeats
    achieved_concurrency: OverRepeats
    requests: int
    errors: int
    counters: SpecCounters | None
    acceptance_source: str | None
    request_rate: float | None = None
    """Open loop: the target rate (req/s), the cell's level; None for a closed-loop cell (level = C)."""
    load: tuple[dict[str, Any], ...] = ()
    """Open loop: per repeat, how the arrival schedule was kept (stored facts)."""
    slices: tuple[tuple[TimeSlice, ...], ...] = ()
    """Per repeat, per-second figures of the window (see `specfrontier.metrics.timeslices`)."""
    spikes: tuple[tuple[int, Spike], ...] = ()
    """(repeat, spike) for every slice whose p99 exceeds SPIKE_FACTOR x that repeat's median."""
    client_health: tuple[dict[str, Any], ...] = ()
    """Per repeat with it recorded: the client's lag, CPU and saturation (`load.health.ClientHealth`)."""
    tpot_p99_ms: OverRepeats = _NO_FIGURE
    e2e_p50_ms: OverRepeats = _NO_FIGURE
    e2e_p99_ms: OverRepeats = _NO_FIGURE
    e2e_tok_s_p50: OverRepeats = _NO_FIGURE
    """Per user, secondary: completion tokens / E2E per request, p50 (docs/metrics.md)."""
    itl_p50_ms: OverRepeats = _NO_FIGURE
    """Per-token ITL: each chunk gap split over the chunk's tokens (docs/metrics.md)."""
    itl_p99_ms: OverRepeats = _NO_FIGURE
    chunk_gap_p50_ms: OverRepeats = _NO_FIGURE
    chunk_gap_p99_ms: OverRepeats = _NO_FIGURE
    tokens_per_chunk_mean: OverRepeats = _NO_FIGURE
    itl_estimated_requests: int = 0
    """Requests whose per-chunk token counts were not streamed (ITL split assumed even)."""
    acceptance_rate_request_weighted: OverRepeats = _NO_FIGURE
    """Mean over requests of accepted / drafted (per-request stats only), per repeat."""
    acceptance_length_request_weighted: OverRepeats = _NO_FIGURE
    goodput: GoodputSummary | None = None
    """Under the report's SLOs (`--slo`); None when none were given."""
    window_tok_s: OverRepeats = _NO_FIGURE
    """Output tok/s over the whole window, ramp and drain included (the aggregate before the steady span)."""
    steady_tok_s: OverRepeats = _NO_FIGURE
    """Closed loop: output tok/s over the steady span, ramp and drain excluded (`metrics.steady`)."""
    steady_concurrency: OverRepeats = _NO_FIGURE
    """Closed loop: mean requests in flight inside the steady span."""
    steady_s: OverRepeats = _NO_FIGURE
    """Closed loop: length of the steady span (s)."""
    repeat_tok_s: tuple[float | None, ...] = ()
    """Aggregate tok/s of each repeat, in repeat order (the drift and the sequential rule compare them)."""
    more: Mapping[str, OverRepeats | int] = field(default_factory=dict)
    """The metrics declared in files of their own (`metrics/added/`), by name, combined as declared."""

    def value(self, name: str) -> OverRepeats | int:
        """A declared metric over repeats (`metrics.specs`), by name: an OverRepeats, or a summed count."""
        if name in self.more:
            return self.more[name]
        value: OverRepeats | int = getattr(self, name)
        return value

    def figure(self, name: str) -> OverRepeats:
        """The figure over repeats of a declared metric (`metrics.specs`), by name."""
        value = self.value(name)
        if not isinstance(value, OverRepeats):
            raise KeyError(f"CellSummary.{name} is not a figure over repeats")
        return value

    @property
    def level(self) -> float:
        """What the cell is keyed by: C (closed loop) or the target rate in req/s (open loop)."""
        return self.concurrency if self.request_rate is None else self.request_rate

    @property
    def acceptance_rate(self) -> float | None:
        c = self.counters
        return c.acceptance_rate if c else None

    @property
    def acceptance_length(self) -> float | None:
        c = self.counters
        return c.acceptance_length if c else None

    @property
    def noisy(self) -> bool:
        """Aggregate tok/s relative MAD over repeats above 10% (docs/metrics.md)."""
        rel = self.aggregate_tok_s.relative_mad
        return rel is not None and rel > NOISY_RELATIVE_MAD

    @property
    def min_steady_s(self) -> float:
        """The shortest steady span this cell's rate is trusted from: C > 1, MIN_STEADY_S and
        MIN_STEADY_LIFETIMES request lifetimes (median E2E). C = 1: 0, the span is the whole window,
        with no ramp or drain for its edges to cut."""
        if self.concurrency <= 1:
            return 0.0
        e2e_ms = self.e2e_p50_ms.median
        return max(MIN_STEADY_S, MIN_STEADY_LIFETIMES * (e2e_ms or 0.0) / 1000.0)

    @property
    def steady_too_short(self) -> bool:
        """Closed loop: the cell had no steady state worth the name: no span with C in flight after the
        ramp, one shorter than `min_steady_s`, or fewer than MIN_STEADY_CONCURRENCY x C in flight inside it
        (the rates then describe a lower concurrency than the cell's label). Open-loop cells are never
        flagged here."""
        if self.request_rate is not None:
            return False
        span, inside = self.steady_s.median, self.steady_concurrency.median
        if span is None or inside is None:
            return True
        return span < self.min_steady_s or inside < MIN_STEADY_CONCURRENCY * self.concurrency

    @property
    def client_saturated(self) -> bool:
        """Some repeat's client was saturated (lag or CPU over `load.health`'s fidelity limits): its TTFT and
        ITL may carry the client's lag; flagged. Whether it still kept up is `keep_up_text`."""
        return any(saturated(h) for h in self.client_health)

    def keep_up_text(self, share: float = DEFAULT_MAX_CLIENT_LAG_SHARE, time_scale: float = 1.0) -> str | None:
        """Why the client could not keep up, in the words of its first such repeat ('repeat 2: event-loop lag
        p99 85.7 ms > 2% of the 0.71 s request lifetime'); None when it kept up: every worker's CPU within 90 %
        of a core and its lag p99 within `share` of the request lifetime (median E2E, in wall time: the
        stored figures are in the server's, `time_scale` times faster), or 5 ms where that is more
        (`config.limits.DEFAULT_MAX_CLIENT_LAG_SHARE`). Then the server saw the cell's C."""
        lifetime_ms = (self.e2e_p50_ms.median or 0.0) / time_scale
        bound = max(LAG_P99_LIMIT_MS, share * lifetime_ms)
        bound_text = (
            f"{LAG_P99_LIMIT_MS:g} ms"
            if bound == LAG_P99_LIMIT_MS
            else f"{share:.0%} of the {lifetime_ms / 1000:.2f} s request lifetime"
        )
        for repeat, health in enumerate(self.client_health):
            cpu = max((x for x in health.get("cpu_fraction") or [] if isinstance(x, int | float)), default=0.0)
            if cpu > CPU_LIMIT:
                return f"repeat {repeat + 1}: client CPU {cpu:.0%} of a core > {CPU_LIMIT:.0%}"
            lags = health.get("worker_lag_p99_ms") or [health.get("lag_p99_ms")]
            lag = max((x for x in lags if isinstance(x, int | float)), default=0.0)
            if lag > bound:
                return f"repeat {repeat + 1}: event-loop lag p99 {lag:.1f} ms > {bound_text}"
        return None

    @property
    def client_limited(self) -> bool:
        """Achieved concurrency well below the requested one: queueing, capacity or a slow client."""
        got = self.achieved_concurrency.median
        return self.request_rate is None and got is not None and got < 0.8 * self.concurrency


@dataclass(frozen=True, slots=True)
class RunData:
    """Everything a report needs about one run, read from the store.

    A run may measure several workloads (`workloads:` in the config; the cell key `<source>@<sampling>`).
    Rankings only make sense within one workload, so the decision functions (best per concurrency,
    crossovers, recommendation) are meant for a one-workload view: `for_workload(w)` or
    `workload_views()`. On a one-workload run the run itself is that view.
    """

    run: RunRow
    settings: tuple[SettingRow, ...]
    cells: tuple[CellSummary, ...]
    gate: tuple[GateResult, ...] = ()
    """Correctness gate: each speculative setting's greedy outputs vs the baseline's (`analysis.gate`)."""
    turns: tuple[TurnSummary, ...] = ()
    """Agentic session replay: per-turn latency and acceptance (`analysis.sessions`)."""
    slos: tuple[Slo, ...] = ()
    """The SLOs goodput was computed under (`report --slo`, `tune --slo`); empty: no goodput."""
    store_path: Path | None = None
    """The store the run was read from: the commands a report prints name it (`--store`)."""
    reference: tuple[CellSummary, ...] = ()
    """The end-of-run drift reference's cells (`drift_control: reference`; `store.REFERENCE_REPEAT`): the first
    setting measured once more after every setting. No cell of the run: `analysis.drift` alone reads them."""

    @property
    def allow_unsafe(self) -> bool:
        return bool(self.run.config.get("allow_unsafe", False))

    @property
    def unsafe(self) -> frozenset[str]:
        """Settings the correctness gate marked unsafe (excluded from recommendations unless allowed)."""
        return unsafe_settings(self.gate)

    @property
    def expected_repeats(self) -> int:
        """Repeats every cell should have: the config's (`tune` or `bench`), else the most any cell has."""
        config = self.run.config
        stated = config.get("repeats", config.get("bench", {}).get("repeats") if isinstance(config, dict) else None)
        if isinstance(stated, int) and not isinstance(stated, bool) and stated >= 1:
            return stated
        return max((c.repeats for c in self.cells), default=1)

    @property
    def max_failed_share(self) -> float:
        """The evidence rule's bound on failed requests: the run's `max_failed_share`, else the default (a run
        stored before the field existed, or a `bench` run)."""
        stated = self.run.config.get("max_failed_share")
        if isinstance(stated, int | float) and not isinstance(stated, bool) and 0 <= stated < 1:
            return float(stated)
        return DEFAULT_MAX_FAILED_SHARE

    @property
    def max_client_lag_share(self) -> float:
        """The evidence rule's bound on the client's lag: the run's `max_client_lag_share` (tune's config, or
        bench's `--max-client-lag-share`), else the default (a run stored before the field existed)."""
        bench = self.run.config.get("bench")
        stated = self.run.config.get("max_client_lag_share", bench.get("max_client_lag_share") if bench else None)
        if isinstance(stated, int | float) and not isinstance(stated, bool) and 0 < stated <= 10:
            return float(stated)
        return DEFAULT_MAX_CLIENT_LAG_SHARE

    def client_keep_up(self, cell: CellSummary) -> str | None:
        """Why `cell`'s client could not keep up under this run's bound and time scale (None: it did)."""
        scale = self.run.environment.get("time_scale")
        time_scale = float(scale) if isinstance(scale, int | float) and scale > 0 else 1.0
        return cell.keep_up_text(self.max_client_lag_share, time_scale)

    @property
    def failed_settings(self) -> frozenset[str]:
        """Settings whose server failed (crash, stall, start-up failure) in their last launch."""
        return frozenset(s.name for s in self.settings if s.status == "failed")

    def repeats_expected_of(self, cell: CellSummary) -> int:
        """Repeats `cell` should have: `expected_repeats`, or where the sequential rule may stop a level early
        (`min_repeats` in the config), the most any cell of its level and workload has, at least
        `min_repeats` (every setting of a level gets the same repeats: the rule stops a level, not a cell)."""
        floor = self.run.config.get("min_repeats")
        if not isinstance(floor, int) or isinstance(floor, bool):
            return self.expected_repeats
        peers = (c.repeats for c in self.cells if c.level == cell.level and c.workload == cell.workload)
        return max(floor, *peers)

    def incomplete_cells(self) -> list[CellSummary]:
        """Cells with fewer stored repeats than the config asked for (a crash or an interruption cut them)."""
        return [c for c in self.cells if c.repeats < self.repeats_expected_of(c)]

    def verdict(self, cell: CellSummary) -> tuple[str, ...]:
        """Why a cell is not evidence, one short reason each (empty: it is evidence). The rule
        (docs/reliability.md): all the repeats the run asked for are stored (`repeats_expected_of`: a level
        the sequential rule settled early asks for fewer), its setting's server did not
        fail (exit, stall, a window where every request failed), its failed requests stay within
        `max_failed_share` of its requests, (closed loop) it had a steady state to measure, and its client kept
        up (`client_keep_up`: a client that could not measures the client, not the server)."""
        reasons = []
        expected = self.repeats_expected_of(cell)
        if cell.repeats < expected:
            reasons.append(f"{cell.repeats} of {expected} repeats")
        if cell.setting in self.failed_settings:
            reasons.append("server failed")
        if failed_over_bound(cell.errors, cell.requests, self.max_failed_share):
            reasons.append(f"{cell.errors} of {cell.requests} requests failed (> {percent(self.max_failed_share)})")
        if cell.steady_too_short:
            reasons.append("no steady state")
        if (lagged := self.client_keep_up(cell)) is not None:
            reasons.append(f"client could not keep up ({lagged})")
        return tuple(reasons)

    def not_evidence_lines(self) -> list[str]:
        """'<setting>[ <workload>] <level>: <reasons>' for every cell the evidence rule leaves out (`verdict`):
        what `tune` and `bench` name when a run has no evidence."""
        return [
            f"{c.setting}{f' {c.workload}' if self.multi_workload else ''} {self.level_text(c.level)}: {'; '.join(why)}"
            for c in self.cells
            if (why := self.verdict(c))
        ]

    def is_evidence(self, cell: CellSummary) -> bool:
        """Whether a cell may decide anything: the evidence rule found no reason against it (`verdict`)."""
        return not self.verdict(cell)

    def complete_evidence(self) -> RunData:
        """The run without partial evidence: no cell missing repeats, no cell of a setting whose server failed
        (it crashed or stalled: whatever it measured before is not a setting to deploy), no cell with more
        failed requests than `max_failed_share` allows (its figures describe the failures as much as the
        setting), no closed-loop cell without a steady state (its rates describe a lower concurrency than
        its label), no cell whose client could not keep up (it measured the client). What the best setting per
        level, the crossovers and the recommendations are drawn from; the tables show all."""
        kept = tuple(c for c in self.cells if self.is_evidence(c))
        return self if len(kept) == len(self.cells) else replace(self, cells=kept)

    def recommendable(self) -> RunData:
        """Complete evidence without unsafe settings' cells (unless the config allows them): what
        recommendations use."""
        data = self.complete_evidence()
        return data if data.allow_unsafe or not data.unsafe else data.without_settings(data.unsafe)

    @property
    def workloads(self) -> tuple[str, ...]:
        """Workload keys of the measured cells, sorted."""
        return tuple(sorted({c.workload for c in self.cells}))

    @property
    def multi_workload(self) -> bool:
        return len(self.workloads) > 1

    def for_workload(self, workload: str) -> RunData:
        """The same run restricted to one workload's cells (settings unchanged)."""
        return replace(
            self,
            cells=tuple(c for c in self.cells if c.workload == workload),
            reference=tuple(c for c in self.reference if c.workload == workload),
        )

    def workload_views(self) -> list[tuple[str, RunData]]:
        """(workload, one-workload view) per measured workload; a run without cells gives one empty view."""
        if not self.cells:
            return [("", self)]
        return [(w, self.for_workload(w)) for w in self.workloads]

    def without_settings(self, names: set[str] | frozenset[str]) -> RunData:
        """The run with some settings' cells removed (e.g. settings the correctness gate marked unsafe)."""
        return replace(self, cells=tuple(c for c in self.cells if c.setting not in names))

    @property
    def concurrency_levels(self) -> tuple[float, ...]:
        """The levels cells are keyed by: C values, or request rates for an open-loop run."""
        return tuple(sorted({c.level for c in self.cells}))

    @property
    def open_loop(self) -> bool:
        return any(c.request_rate is not None for c in self.cells)

    @property
    def level_header(self) -> str:
        return "rate req/s" if self.open_loop else "C"

    def level_text(self, level: float) -> str:
        """'C=16' for a closed-loop level, '2.5 req/s' for an open-loop one."""
        return f"{level:g} req/s" if self.open_loop else f"C={level}"

    @property
    def baseline(self) -> str | None:
        return next((s.name for s in self.settings if not s.speculative), None)

    def cell(self, setting: str, concurrency: float, workload: str | None = None) -> CellSummary | None:
        """The cell of `setting` at a level (C, or the rate of an open-loop run), in `workload` if given
        (without it, the first match: use a one-workload view on a multi-workload run)."""
        return next(
            (
                c
                for c in self.cells
                if c.setting == setting and c.level == concurrency and (workload is None or c.workload == workload)
            ),
            None,
        )

    def setting(self, name: str) -> SettingRow:
        return next(s for s in self.settings if s.name == name)

    def measured_settings(self) -> list[str]:
        names = {c.setting for c in self.cells}
        return [s.name for s in self.settings if s.name in names]

    def pooled_counters(self, setting: str) -> SpecCounters | None:
        """The setting's counters summed over all its cells (windows only)."""
        parts = [c.counters for c in self.cells if c.setting == setting and c.counters is not None]
        if not parts:
            return None
        return _sum_counters(parts)


def failed_over_bound(failed: int, requests: int, max_share: float) -> bool:
    """Whether `failed` of `requests` exceeds the share the evidence rule allows (a cell without
    requests is never stored, so it has nothing to exceed)."""
    return requests > 0 and failed > max_share * requests


def percent(share: float) -> str:
    """0.01 -> '1%', 0.005 -> '0.5%': a bound as the config would state it, without rounding it away."""
    return f"{share * 100:g}%"


def verdict_text(reasons: Sequence[str]) -> str:
    """The evidence rule's verdict in words: 'evidence', or 'not evidence: <reasons>'."""
    return "evidence" if not reasons else "not evidence: " + "; ".join(reasons)


def _sum_counters(parts: Sequence[SpecCounters]) -> SpecCounters:
    width = max(len(p.accepted_per_position) for p in parts)
    per_pos = [0] * width
    for p in parts:
        for i, v in enumerate(p.accepted_per_position):
            per_pos[i] += v
    return SpecCounters(
        sum(p.draft_tokens for p in parts),
        sum(p.accepted_tokens for p in parts),
        sum(p.verify_steps for p in parts),
        tuple(per_pos),
    )


def _over_repeats(spec: MetricSpec, metrics: Sequence[CellMetrics]) -> OverRepeats | int:
    """One declared metric of a cell: an OverRepeats of the per-window values, or their sum (`metrics.specs`)."""
    values = [spec.window_value(m) for m in metrics]
    if spec.over_repeats == "sum":
        return int(sum(v or 0 for v in values))
    return OverRepeats.of(values)


def _summarise(group: list[tuple[CellRow, CellDigest, CellMetrics]], slos: Sequence[Slo] = ()) -> CellSummary:
    first = group[0][0]
    metrics = [m for _, _, m in group]
    # Every declared metric, by name: typed Any because each is an OverRepeats or an int field of CellSummary
    # (tests/unit/test_metric_specs.py checks the declaration against the fields).
    declared: dict[str, Any] = {spec.name: _over_repeats(spec, metrics) for spec in CELL_METRICS}
    more = {spec.name: declared.pop(spec.name) for spec in ADDED_METRICS if spec.over_repeats is not None}
    counters = [row.counters for row, _, _ in group if row.counters is not None]
    sources = {row.acceptance_source for row, _, _ in group if row.acceptance_source}
    slices = tuple(digest.slices for _, digest, _ in group)
    found = tuple((row.repeat, spike) for row, digest, _ in group for spike in digest.spikes)
    return CellSummary(
        setting=first.setting_id,
        concurrency=first.concurrency,
        workload=first.workload,
        repeats=len(group),
        counters=_sum_counters(counters) if counters else None,
        acceptance_source=" + ".join(sorted(sources)) or None,
        request_rate=first.request_rate,
        load=tuple(row.load for row, _, _ in group if row.load is not None),
        slices=slices,
        spikes=found,
        client_health=tuple(row.client_health for row, _, _ in group if row.client_health is not None),
        goodput=GoodputSummary(tuple(_goodput(row, slos) for row, _, _ in group)) if slos else None,
        repeat_tok_s=tuple(m.aggregate_tok_s for m in metrics),
        more=more,
        **declared,
    )


def _goodput(row: CellRow, slos: Sequence[Slo]) -> WindowGoodput:
    """Goodput of one repeat from its requests' times and counts only (`request_heads`): a stored cell's
    head blob, so a report with SLOs on a long run neither decodes nor holds every chunk time."""
    return window_goodput(request_heads(row.requests).timing_records(), slos)


def _row_metrics(row: CellRow, digest: CellDigest) -> CellMetrics:
    """One stored repeat's figures. Closed loop: with its steady span (`metrics.steady`). Open loop: the
    aggregate is the rate over the measured part of the schedule, every sent request's tokens counted
    (`load.open_loop.measured_span_rate`, stored in the cell's load facts), where the cell has one."""
    metrics = digest.metrics  # as computed when the cell was stored (`metrics.digest`)
    if row.request_rate is None:
        return metrics
    span_rate = (row.load or {}).get("measured_span_tok_s")
    if isinstance(span_rate, int | float) and not isinstance(span_rate, bool):
        return replace(metrics, aggregate_tok_s=float(span_rate))
    return metrics


def summarise_cells(rows: Sequence[CellRow], slos: Sequence[Slo] = ()) -> list[CellSummary]:
    """Group stored repeats by (setting, workload, concurrency, rate) and summarise each group (with
    goodput under `slos` when given)."""
    groups: dict[tuple[str, str, int, float], list[tuple[CellRow, CellDigest, CellMetrics]]] = defaultdict(list)
    for row in rows:
        if row.requests:
            key = (row.setting_id, row.workload, row.concurrency, row.request_rate or 0.0)
            digest = row.digest  # stored, or computed once here for a cell stored without one
            groups[key].append((row, digest, _row_metrics(row, digest)))
    return [_summarise(sorted(g, key=lambda x: x[0].repeat), slos) for _, g in sorted(groups.items())]


def load_run(store: Store, run_id: str, slos: Sequence[Slo] = ()) -> RunData:
    """Read a run and summarise its cells (the store is the only input); goodput under `slos` if given."""
    run = store.run(run_id)
    settings = tuple(store.settings(run_id))
    rows = store.cells(run_id)
    baseline = next((s.name for s in settings if not s.speculative), None)
    tolerance = float(run.config.get("divergence_tolerance", DEFAULT_TOLERANCE))
    gate = tuple(correctness_gate(rows, baseline, tolerance))
    cells = tuple(summarise_cells(rows, slos))
    reference = tuple(summarise_cells(store.cells(run_id, reference=True)))
    turns = tuple(turn_summaries(rows))
    return RunData(run, settings, cells, gate, turns, slos=tuple(slos), store_path=store.path, reference=reference)


def figure_json(fig: OverRepeats) -> dict[str, Any]:
    return {
        "median": fig.median,
        "min": fig.low,
        "max": fig.high,
        "repeats": fig.n,
        "mad": fig.mad,
        "relative_mad": fig.relative_mad,
        "ci95_low": fig.ci_low,
        "ci95_high": fig.ci_high,
    }


__all__ = [
    "NOISY_SPREAD",
    "CellSummary",
    "GoodputSummary",
    "OverRepeats",
    "RunData",
    "failed_over_bound",
    "figure_json",
    "load_run",
    "percent",
    "summarise_cells",
    "verdict_text",
]
