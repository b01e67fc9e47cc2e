"""How long and in what order the server sweep measures: drift control, cell sizing, stopping early.

- **Order** (`drift_mode`): `interleave` measures repeat 1 of every setting, then repeat 2, ... with one
  server launch per setting and repeat, so a change in the machine's speed during the run reaches every
  setting alike and shows as drift (`analysis.drift`) instead of as a difference between settings. It
  costs one launch, first request and warmup per setting and repeat beyond the first (llama.cpp with the
  embedded model: about 2-4 s each). `auto` interleaves where the engine's relaunch is cheap
  (`EngineAdapter.cheap_relaunch`) and the config allows it (`config.common.interleave_refused`); where
  it is not (a GPU engine: minutes per launch), `reference` measures every setting on its one launch and
  then the first setting once more at the end, at every level, on one more launch: its change from its
  own start is the run's drift, at the cost of one launch (`config.common.reference_refused`).
- **Size** (`CellSizer`): with `cell_lifetimes`, a closed-loop cell sends for that many request
  lifetimes instead of a fixed time (C = 1: half as many, it has no ramp to cover: its steady span is
  the whole window): the median E2E of the last cell of the same setting and level, else
  of any setting's at that level, else one drawn from the launch itself: its cold first request (C = 1,
  slower than a warm one) and its warmup at the top level (the longest lifetime of the run's levels),
  interpolated linearly in C between them (the warmup's alone when the first request failed): upper
  bounds, so the first cells of a run are the longest. `cell_duration_s`, when set, caps it.
- **Stopping** (`open_levels_after`): with `min_repeats`, after that many rounds only the levels whose
  ranking is not settled get another round (`analysis.sequential`).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from specfrontier.analysis.decisions import recommend
from specfrontier.analysis.sequential import open_levels
from specfrontier.analysis.summary import load_run
from specfrontier.config import TuneConfig
from specfrontier.config.common import interleave_refused, reference_refused
from specfrontier.engines import EngineAdapter
from specfrontier.errors import ConfigError
from specfrontier.records import RequestRecord
from specfrontier.runs.cell import CellDone, CellLoad
from specfrontier.store import Store


def drift_mode(config: TuneConfig, adapter: EngineAdapter[Any]) -> str:
    """'interleave', 'reference' or 'off': what `drift_control` means for this config and engine (module
    docstring)."""
    if config.drift_control == "auto":
        if adapter.cheap_relaunch and interleave_refused(config) is None:
            return "interleave"
        return "reference" if reference_refused(config) is None else "off"
    return config.drift_control


def check_min_repeats(config: TuneConfig, mode: str) -> None:
    """Refuse `min_repeats` where the run will not be interleaved (`drift_control: auto` on an engine whose
    relaunch is not cheap, or a config that cannot interleave): the rule compares settings round by round."""
    if config.min_repeats is None or mode == "interleave":
        return
    why = interleave_refused(config) or (
        "this engine's relaunch is not cheap, so drift_control: auto does not interleave (it measures an "
        "end-of-run reference instead)"
    )
    raise ConfigError(
        f"min_repeats = {config.min_repeats}: the sequential rule needs settings measured repeat by repeat, but "
        f"{why}; fix: remove min_repeats, or set drift_control: interleave"
    )


def _median_e2e_s(records: Sequence[RequestRecord]) -> float | None:
    ends = [(r.end_ns - r.send_ns) / 1e9 for r in records if r.ok]
    return statistics.median(ends) if ends else None


@dataclass(frozen=True, slots=True)
class CellSize:
    """How long a closed-loop cell sends (server seconds; None: its request count alone) and why, in words:
    stored with the cell (`facts`), so the report can say how long each cell ran and why."""

    duration_s: float | None
    why: str

    def facts(self) -> dict[str, Any]:
        """The cell's stored load facts (`cell.load_json`): `send_s` and `sized_by`."""
        return {"send_s": self.duration_s, "sized_by": self.why}


class CellSizer:
    """Each closed-loop cell's sending time from measured request lifetimes (`cell_lifetimes`); shared by
    `tune` (`runs.sweep`) and `bench --url` (`runs.bench`)."""

    def __init__(self, lifetimes: float | None, cap_s: float | None, *, cap_name: str = "cell_duration_s") -> None:
        self.lifetimes, self.cap_s, self.cap_name = lifetimes, cap_s, cap_name
        self._launch_s: float | None = None
        self._first_s: float | None = None
        self._top: float = 1.0
        self._by_cell: dict[tuple[str, str, float], float] = {}
        self._by_level: dict[tuple[str, float], float] = {}

    def first_request(self, record: RequestRecord) -> None:
        """A launch's cold first request (server time): the fallback lifetime at C = 1."""
        self._first_s = _median_e2e_s([record]) or self._first_s

    def warmed_up(self, records: Sequence[RequestRecord], top: float) -> None:
        """A launch's warmup records at level `top` (server time): the fallback lifetime at that level."""
        self._launch_s, self._top = _median_e2e_s(records) or self._launch_s, top

    def _launch_lifetime(self, level: float) -> float | None:
        """The launch's own estimate at `level`: first request (C = 1) to warmup (top C), linear in C."""
        if self._launch_s is None or self._first_s is None or self._top <= 1:
            return self._launch_s
        share = min(max((level - 1.0) / (self._top - 1.0), 0.0), 1.0)
        return self._first_s + (self._launch_s - self._first_s) * share

    def cell_done(self, done: CellDone) -> None:
        """A measured cell's median E2E: the lifetime for the next cell of its setting and level."""
        e2e_ms = done.metrics.e2e_p50_ms
        if e2e_ms:
            self._by_cell[(done.setting, done.workload, done.concurrency)] = e2e_ms / 1000.0
            self._by_level[(done.workload, done.concurrency)] = e2e_ms / 1000.0

    def duration_s(self, setting: str, workload: str, level: float) -> float | None:
        """Seconds (server time) the cell sends for; None: the config's cell_duration_s alone."""
        return self.size(setting, workload, level).duration_s

    def _lifetime(self, setting: str, workload: str, level: float) -> tuple[float, str] | None:
        """The lifetime a cell is sized from, and where it was read (module docstring)."""
        if (found := self._by_cell.get((setting, workload, level))) is not None:
            return found, "the median E2E of this setting's last cell at this level"
        if (found := self._by_level.get((workload, level))) is not None:
            return found, "the median E2E of the last cell at this level"
        found = self._launch_lifetime(level)
        if found is None:
            return None
        if self._first_s is None or self._top <= 1:
            return found, f"the median E2E of the warmup at C={self._top:g}"
        return found, f"interpolated from the first request (C=1) to the warmup at C={self._top:g}"

    def sized(self, load: CellLoad, setting: str, workload: str, level: float) -> CellLoad:
        """`load` for the cell of `setting` at `level`: a closed loop sends for its `size` and says why; an
        open loop is left as it is (its schedule sets its length)."""
        if load.mode != "closed":
            return load
        size = self.size(setting, workload, level)
        return replace(load, cell_duration_s=size.duration_s, sized_by=size.why)

    def size(self, setting: str, workload: str, level: float) -> CellSize:
        """How long the cell of `setting` at `level` sends, and why (module docstring)."""
        fixed = f"{self.cap_name} = {self.cap_s:g} s" if self.cap_s is not None else "the request count alone"
        if self.lifetimes is None:
            return CellSize(self.cap_s, fixed)
        found = self._lifetime(setting, workload, level)
        if found is None:
            return CellSize(self.cap_s, f"{fixed} (no request lifetime measured yet)")
        lifetime, source = found
        count = self.lifetimes if level > 1 else self.lifetimes / 2
        sized, why = count * lifetime, f"{count:g} request lifetimes of {lifetime:.2f} s ({source})"
        if self.cap_s is not None and sized > self.cap_s:
            return CellSize(self.cap_s, f"{why}, capped by {self.cap_name} = {self.cap_s:g} s")
        return CellSize(sized, why)


def open_levels_after(store: Store, run_id: str, config: TuneConfig, rounds: int) -> list[float] | None:
    """The levels the next round measures after `rounds` complete rounds: None (all) before `min_repeats`
    rounds or without it; else the levels not yet settled (`analysis.sequential`)."""
    if config.min_repeats is None or rounds < config.min_repeats:
        return None
    return open_levels(load_run(store, run_id))


def provisional_answer(store: Store, run_id: str) -> list[str]:
    """The recommendation the stored cells give now, one line per group of levels (the live view shows it
    as soon as every setting has two repeats at a level; the final report may still change it)."""
    data = load_run(store, run_id)
    lines = []
    for view_name, view in data.workload_views():
        prefix = f"{view_name}: " if data.multi_workload else ""
        for rec in recommend(view):
            levels = ", ".join(view.level_text(level) for level in rec.concurrency)
            lines.append(f"{prefix}{levels}: {rec.setting} ({rec.note})")
    return lines


__all__ = ["CellSize", "CellSizer", "check_min_repeats", "drift_mode", "open_levels_after", "provisional_answer"]
