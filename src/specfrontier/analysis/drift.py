"""Drift: how much the machine's speed changed during a run, per level, and what that leaves of a win.

Settings measured one after another cannot tell a faster setting from a machine that got faster while it
ran. With `drift_control: interleave` the sweep measures repeat 1 of every setting, then repeat 2, ...
(`runs.sweep`), so every setting sees every period of the run, and the change of a setting's aggregate
tok/s from the start of the run to its end (its first repeat(s) against its last, `_change`) is the
machine's drift over the run plus that setting's noise.
The drift of a level is the median of those changes over the settings, its spread their lowest and
highest; it is beyond the noise when every setting moved the same way by more than DRIFT_FLOOR.

Where a relaunch costs minutes (vLLM, SGLang, TensorRT-LLM: `drift_control: reference`, what `auto` picks
there), each setting keeps its one launch and the first setting is measured once more at the end, at
every level, on one more launch (its end-of-run reference, `RunData.reference`). The drift of a level is
then that reference's aggregate tok/s against the mean of the setting's own repeats at the start
(`_reference_drift`), its spread the reference against the start's highest and lowest repeat; it is
beyond the noise when the reference lies more than DRIFT_FLOOR beyond every repeat of the start, on one
side. As with interleaving, the drift compares what was measured (evidence or not: a machine so busy that
the client lagged at the end is a machine that changed speed); the decisions read it where the cells
they compare are evidence.

A difference between two settings smaller than the drift of its level is no win (`within_drift`): a
machine that changed speed by that much during the run could have made it. The decisions
(`analysis.decisions`) treat such a pair as a tie, so the cheaper setting is recommended, and say so.
Runs measured setting after setting without a reference (`drift_control: off`, or a run stored before
drift control existed) have no drift to report: None everywhere, and no difference is withdrawn for it.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any

from specfrontier.analysis.summary import CellSummary, RunData
from specfrontier.store import DRIFT_REFERENCE_KEY

DRIFT_FLOOR = 0.02
"""A drift whose settings all moved the same way by more than 2% is reported as beyond the noise."""


@dataclass(frozen=True, slots=True)
class LevelDrift:
    """The change of aggregate tok/s from the first repeat to the last at one level, over the settings."""

    level: float
    change: float
    """Median over settings of (end / start - 1), `_change`: -0.2 = the machine got 20% slower."""
    low: float
    high: float
    """The lowest and highest setting's change (its spread)."""
    settings: int
    """Settings with a first and a last repeat at this level."""
    repeats: int
    """Repeats compared (the first against the last of this many; with a reference, the start's repeats)."""
    reference: str | None = None
    """The setting whose end-of-run reference measured it (`drift_control: reference`); None: interleaved."""

    @property
    def size(self) -> float:
        """|change|: a difference between settings must exceed it to be a win."""
        return abs(self.change)

    @property
    def beyond_noise(self) -> bool:
        """Every setting moved the same way (with a reference: against every repeat of its start), each by
        more than DRIFT_FLOOR: the machine changed speed."""
        compared = self.settings >= 2 or self.reference is not None
        return compared and (self.low > DRIFT_FLOOR or self.high < -DRIFT_FLOOR)


def drift_control(data: RunData) -> str:
    """How the run controlled drift, as stored with its environment: 'interleave', 'reference' or 'off' (a
    run stored before drift control existed: 'off')."""
    mode = data.run.environment.get("drift_control")
    return mode if mode in ("interleave", "reference") else "off"


def interleaved(data: RunData) -> bool:
    """Whether the run measured its settings repeat by repeat (stored with the run's environment)."""
    return drift_control(data) == "interleave"


def reference_facts(data: RunData) -> dict[str, Any] | None:
    """What the run stored of its end-of-run reference (setting, startup_s, seconds, cells, error); None:
    none was launched."""
    facts = data.run.environment.get(DRIFT_REFERENCE_KEY)
    return facts if isinstance(facts, dict) else None


def _change(cell: CellSummary) -> float | None:
    """The setting's end of the run against its start: the mean of its last n//2 repeats over the mean of
    its first n//2 (2-3 repeats: the last over the first; 4: the last two over the first two), so one
    disturbed repeat weighs less where there are more of them."""
    values = [v for v in cell.repeat_tok_s if v is not None]
    half = len(values) // 2
    if half == 0:
        return None
    start, end = statistics.fmean(values[:half]), statistics.fmean(values[-half:])
    return end / start - 1.0 if start > 0 else None


def _reference_cell(data: RunData, level: float) -> CellSummary | None:
    return next((c for c in data.reference if c.level == level), None)


def _reference_drift(data: RunData, level: float) -> LevelDrift | None:
    """The drift at `level` from the end-of-run reference: its aggregate tok/s against its setting's own
    repeats at the start (module docstring); None where either is missing."""
    ref = _reference_cell(data, level)
    start = data.cell(ref.setting, level, ref.workload) if ref is not None else None
    if ref is None or start is None:
        return None
    end = ref.aggregate_tok_s.median
    values = [v for v in start.repeat_tok_s if v is not None and v > 0]
    if end is None or not values:
        return None
    change = end / statistics.fmean(values) - 1.0
    return LevelDrift(level, change, end / max(values) - 1.0, end / min(values) - 1.0, 1, len(values), ref.setting)


def level_drifts(data: RunData) -> list[LevelDrift]:
    """The drift at every level with two or more settings of two or more repeats (an interleaved run), or
    with an end-of-run reference and its start both evidence (`drift_control: reference`); one workload
    view: call it on `data.for_workload(w)` for a run of several."""
    if drift_control(data) == "reference":
        return [d for level in data.concurrency_levels if (d := _reference_drift(data, level)) is not None]
    if not interleaved(data):
        return []
    out = []
    for level in data.concurrency_levels:
        cells = [c for c in data.cells if c.level == level]
        changes = [x for x in (_change(c) for c in cells) if x is not None]
        if len(changes) < 2:
            continue
        repeats = min(c.repeats for c in cells)
        out.append(LevelDrift(level, statistics.median(changes), min(changes), max(changes), len(changes), repeats))
    return out


def drift_at(data: RunData, level: float) -> LevelDrift | None:
    """The drift at `level` (None: not measured, see `level_drifts`)."""
    return next((d for d in level_drifts(data) if d.level == level), None)


def within_drift(winner: float, loser: float, drift: LevelDrift | None) -> bool:
    """A relative difference winner/loser - 1 no larger than the level's drift: not a win."""
    if drift is None or loser <= 0:
        return False
    return abs(winner / loser - 1.0) <= drift.size


def _halves(repeats: int) -> str:
    half = repeats // 2
    if half <= 1:
        return f"repeat 1 vs {repeats}"
    return f"repeats 1-{half} vs {repeats - half + 1}-{repeats}"


def drift_line(data: RunData, d: LevelDrift) -> str:
    """One line of the report: the drift at a level, its spread and whether it is beyond the noise."""
    verdict = (
        "BEYOND THE NOISE: the machine changed speed; differences below it are not wins"
        if d.beyond_noise
        else "within the noise"
    )
    if d.reference is not None:
        how = (
            f"{d.reference}'s end-of-run reference vs its {d.repeats} repeat(s) at the start) "
            f"(vs each of them {d.low:+.1%} .. {d.high:+.1%}"
        )
    else:
        how = f"{_halves(d.repeats)}) (settings {d.low:+.1%} .. {d.high:+.1%}, {d.settings} settings"
    return f"drift at {data.level_text(d.level)}: {d.change:+.1%} from the start to the end ({how}): {verdict}"


def _uncontrolled(data: RunData) -> list[str]:
    """One line for a real run stored with `drift_control: off` (asked for, or `auto` on an engine whose
    relaunch is not cheap) that compares settings: nothing there tells a faster setting from a machine that
    got faster. Silent for the simulator (its speed does not drift), one setting, and runs stored before
    drift control existed (they recorded no mode)."""
    env = data.run.environment
    if env.get("drift_control") != "off" or env.get("simulated") or len(data.measured_settings()) < 2:
        return []
    return [
        "drift: not controlled: each setting was measured on its own launch, one after another, so a machine "
        "that changed speed between settings would show as a difference between them; to measure it, set "
        "drift_control: interleave (one launch per setting and repeat)"
    ]


def _reference_lines(data: RunData) -> list[str]:
    """The drift section of a run with an end-of-run reference: what it was, what it cost, the drift per
    level, and why a level has none."""
    facts = reference_facts(data)
    if facts is None:
        if len(data.measured_settings()) < 2:
            return []
        return ["drift: not measured: no end-of-run reference was stored (the run was cut short before it)"]
    name = facts.get("setting", "?")
    startup, seconds = facts.get("startup_s"), facts.get("seconds")
    ready = f"ready in {startup:.1f} s; " if isinstance(startup, int | float) else ""
    spent = (
        f"{seconds:.0f} s in all with its first request, warmup and cells" if isinstance(seconds, int | float) else ""
    )
    lines = [
        f"drift control: an end-of-run reference: {name} measured once more, at every level, on one more launch "
        f"after every setting; cost: 1 more launch ({ready}{spent}); the drift per level is its change from "
        "its own start; drift_control: interleave measures it from every setting instead (one launch per "
        "setting and repeat)"
    ]
    if facts.get("error"):
        lines.append(f"drift: not measured: the end-of-run reference failed: {facts['error']}")
    for level in data.concurrency_levels:
        found = _reference_drift(data, level)
        if found is not None:
            lines.append(drift_line(data, found))
            continue
        why = "no reference cell" if _reference_cell(data, level) is None else f"no figure of {name} there"
        lines.append(f"drift at {data.level_text(level)}: not measured ({why})")
    return lines


def drift_lines(data: RunData) -> list[str]:
    """The report's drift section: what the control is, what it cost, and the drift per level; for a run
    measured setting after setting, that its differences rest on a machine that kept its speed."""
    if drift_control(data) == "reference":
        return _reference_lines(data)
    if not interleaved(data):
        return _uncontrolled(data)
    rounds = max((c.repeats for c in data.cells), default=0)
    settings = len(data.measured_settings())
    starts = [s.startup_s for s in data.settings if s.startup_s is not None]
    start = f", server start ~{statistics.median(starts):.1f} s each plus first request and warmup" if starts else ""
    lines = [
        f"drift control: settings interleaved repeat by repeat; cost: {settings * max(rounds - 1, 0)} more server "
        f"launch(es) than one per setting{start}; turn off with drift_control: off"
    ]
    drifts = level_drifts(data)
    lines += [drift_line(data, d) for d in drifts] or ["drift: not measured (fewer than two repeats of two settings)"]
    return lines


__all__ = [
    "DRIFT_FLOOR",
    "LevelDrift",
    "drift_at",
    "drift_control",
    "drift_line",
    "drift_lines",
    "interleaved",
    "level_drifts",
    "reference_facts",
    "within_drift",
]
