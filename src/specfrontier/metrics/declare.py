"""What a metric declaration says: the `MetricSpec` type and the parts it is made of.

Why apart from `metrics.specs` (the declarations themselves): a metric declared in a file of its own
(`metrics/added/`) imports these types while `metrics.specs` imports it, so the types must not sit in the
module that collects the declarations.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, Protocol

from specfrontier.records import RequestRecord

if TYPE_CHECKING:
    from specfrontier.metrics.prepared import Window

OverRepeats = Literal["median", "sum"]
"""How repeats combine: "median" makes an `analysis.summary.OverRepeats` (median, range, MAD, bootstrap
interval) of the per-window values; "sum" adds integer counts over the repeats."""

Section = Literal["headline", "counts", "detail"]
"""Where a metric stands in a JSON cell (and the CSV row made from it). The cell's other facts sit
between the sections: setting ... complete, *headline*, acceptance ... capacity, *counts*, noisy ...
client_health, *detail*, goodput, spread."""

SECTIONS: tuple[Section, ...] = ("headline", "counts", "detail")

WindowValue = float | int | None
"""A metric's value in one window: None when the window has no data for it (never 0 or NaN)."""


class WindowValues(Protocol):
    """One window's computed metrics, read by name (`metrics.window.CellMetrics`): named by its one method
    here, so that a declaration does not import the module that computes the declarations."""

    def value(self, name: str) -> WindowValue: ...


@dataclass(frozen=True, slots=True)
class Grid:
    """A seed-style table of the metric: one row per level, one column per setting (`report.tables`)."""

    title: str
    note: str
    """The definition printed under the table."""


@dataclass(frozen=True, slots=True)
class LatencyColumn:
    """A column of the "Latency and burstiness per cell" table (`report.metric_tables`)."""

    position: int
    """Columns are laid out by this number (after the level and setting columns)."""
    header: str
    digits: int
    then: str | None = None
    """A second metric shown after " / " in the same cell (the p99 beside a p50)."""
    note: str = ""
    """Its definition, joined into the table's note ("" when the shared note covers it)."""


@dataclass(frozen=True, slots=True)
class SloUse:
    """The metric's per-request value may be an SLO target: `--slo <key>_p<percentile>_ms=<ms>`."""

    key: str
    value_ms: Callable[[RequestRecord], float | None]
    """One ok request's own value in ms (None: it has none, e.g. TPOT of a 1-token answer)."""
    missing_passes: bool = False
    """An ok request without a value meets the target (nothing was slow); otherwise it is a miss."""


@dataclass(frozen=True, slots=True)
class MetricSpec:
    """One metric. `name` is its `CellMetrics` value of one window, and, when it is combined over repeats,
    its `CellSummary` figure, its JSON field and its CSV column."""

    name: str
    unit: str
    definition: str
    """One line, as the JSON schema's field description."""
    compute: Callable[[Window], WindowValue] | None = None
    """Its value in one window, from that window's prepared records (`metrics.prepared.Window`); None: it reads
    another declared metric's window value (`source`)."""
    source: str = ""
    """The declared metric whose window value it combines over repeats ("": its own `compute`)."""
    over_repeats: OverRepeats | None = "median"
    """None: a figure of one window only (kept in `CellMetrics` and the stored digest, not summarised)."""
    section: Section | None = None
    """Where the JSON cell and the CSV row carry it (None: in `CellSummary` only)."""
    csv_range: bool = False
    """The CSV adds `<name>_min` and `<name>_max` (lowest and highest repeat)."""
    spread: int | None = None
    """Position in the JSON cell's `spread` object (median, range, MAD, interval); None: not there."""
    grid: Grid | None = None
    latency: LatencyColumn | None = None
    html_latency: str | None = None
    """Column header in the HTML report's "Latency percentiles" table, in declaration order."""
    slo: SloUse | None = None
    """Whether `--slo` may target its per-request value (`metrics.slo`)."""
    compare: str | None = None
    """The name `compare` shows it under when two runs are compared (`analysis.compare`); None: not compared."""
    revision: int = 1
    """Raise when its definition changes: stored digests computed with the old one are then recomputed."""

    @property
    def field(self) -> str:
        """The declared metric read per window."""
        return self.source or self.name

    def window_value(self, window: WindowValues) -> WindowValue:
        """This metric's value in one window (one repeat)."""
        return window.value(self.field)


__all__ = [
    "SECTIONS",
    "Grid",
    "LatencyColumn",
    "MetricSpec",
    "OverRepeats",
    "Section",
    "SloUse",
    "WindowValue",
    "WindowValues",
]
