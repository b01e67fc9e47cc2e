"""Schedule verification: a per-batch-size schedule measured against the best static setting at each level.

Why: a schedule built from static cells is a prediction. The server runs it differently: its buffers (and
so its capacity) are sized for the deepest depth, the running batch crosses slot boundaries as requests end
and start (switching depth between iterations), a controller may need warm-up, and a depth switch may fall
off a captured CUDA graph. Users have reported a schedule crossing its threshold dropping 8-way throughput
from about 232 to 24-157 tok/s. So a schedule is run as one more setting of the sweep (one its engine calls
`scheduled`, listed by hand or added by `tune`'s `verify_schedule`), measured at every level, and
compared here, per level, with the best static setting measured in the same run and with no speculation.

Verdicts per level, on aggregate tok/s (median over repeats, the decision figure of the run):
- `holds`: the schedule is not below the best static setting beyond the noise (the same rule as every
  decision: intervals apart and medians more than 1 % apart, `decisions.figures_separated`);
- `loses`: the best static setting beats the schedule beyond the noise (the report names it and by how much);
- `no evidence`: the schedule's or every static setting's cell is not evidence (missing repeats, no steady
  state, a failed server). Static settings the correctness gate marked unsafe are no rivals (unless the
  config allows them), as in every recommendation.
A schedule is recommended for deployment only when it holds at every measured level; otherwise the report
says where it lost, and the per-level recommendation stays with the static settings there.
"""

from __future__ import annotations

from dataclasses import dataclass

from specfrontier.analysis.decisions import figures_separated, is_scheduled, stored_engine_setting
from specfrontier.analysis.summary import RunData, aggregate_tok_s_median

HOLDS = "holds"
LOSES = "loses"
NO_EVIDENCE = "no evidence"


@dataclass(frozen=True, slots=True)
class ScheduleLevel:
    """One level of a schedule's verification: its figure, the best static one's, no speculation's."""

    schedule: str
    level: float
    schedule_tok_s: float | None
    best_static: str | None
    best_static_tok_s: float | None
    baseline_tok_s: float | None
    verdict: str

    @property
    def vs_best_pct(self) -> float | None:
        """(schedule / best static - 1) in %, negative when the schedule is slower."""
        if not self.schedule_tok_s or not self.best_static_tok_s:
            return None
        return 100 * (self.schedule_tok_s / self.best_static_tok_s - 1)


def scheduled_settings(data: RunData) -> list[str]:
    """Measured settings that run a per-batch-size schedule, as their engine says (`EngineSetting.scheduled`)."""
    return [name for name in data.measured_settings() if is_scheduled(data, name)]


def unreachable_ranges(data: RunData, name: str) -> list[int]:
    """Batch sizes where the schedule switches that its server's capacity never reaches: the engine sizes
    the capacity for the deepest depth, so a range starting above it never runs."""
    setting = stored_engine_setting(data, name)
    capacity = data.setting(name).capacity
    if setting is None or capacity is None:
        return []
    return [lo for lo in setting.schedule_batch_sizes if lo > capacity]


def verify_schedules(data: RunData) -> list[ScheduleLevel]:
    """Per schedule and level of a one-workload view: the schedule against the best static setting."""
    schedules = scheduled_settings(data)
    if not schedules or data.open_loop:
        return []
    evidence = data.complete_evidence()
    allowed = data.recommendable()  # a static rival the correctness gate marked unsafe is no alternative
    statics = [n for n in allowed.measured_settings() if n not in schedules]
    out = []
    for name in schedules:
        for level in data.concurrency_levels:
            mine = evidence.cell(name, level)
            rivals = [c for n in statics if (c := allowed.cell(n, level)) is not None and c.aggregate_tok_s.median]
            best = max(rivals, key=lambda c: c.aggregate_tok_s.median or 0.0, default=None)
            base = evidence.cell(evidence.baseline, level) if evidence.baseline else None
            if mine is None or best is None or not mine.aggregate_tok_s.median:
                verdict = NO_EVIDENCE
            elif figures_separated(best.aggregate_tok_s, mine.aggregate_tok_s):
                verdict = LOSES
            else:
                verdict = HOLDS
            out.append(
                ScheduleLevel(
                    name,
                    level,
                    aggregate_tok_s_median(mine),
                    best.setting if best else None,
                    aggregate_tok_s_median(best),
                    aggregate_tok_s_median(base),
                    verdict,
                )
            )
    return out


def schedule_summary_lines(data: RunData) -> list[str]:
    """One line per schedule: deploy it (holds everywhere) or where it loses and to what."""
    levels = verify_schedules(data)
    lines = []
    for name in dict.fromkeys(lv.schedule for lv in levels):
        mine = [lv for lv in levels if lv.schedule == name]
        lost = [lv for lv in mine if lv.verdict == LOSES]
        unknown = [lv for lv in mine if lv.verdict == NO_EVIDENCE]
        label = f"{name} (per-batch-size schedule)"
        if lost:
            worst = min(lost, key=lambda lv: lv.vs_best_pct or 0.0)
            where = ", ".join(data.level_text(lv.level) for lv in lost)
            lines.append(
                f"{label} LOSES beyond the noise at {where} (worst {worst.vs_best_pct:+.1f} % vs "
                f"{worst.best_static} at {data.level_text(worst.level)}): not recommended as measured; use the "
                "static recommendation at those levels, or fix the schedule there and measure it again"
            )
        elif unknown:
            where = ", ".join(data.level_text(lv.level) for lv in unknown)
            lines.append(f"{label}: no evidence at {where}; not recommended until measured there")
        else:
            lines.append(
                f"{label} holds at every measured level (never below the best static setting beyond the "
                "noise): one launch serves every measured load"
            )
        unreachable = unreachable_ranges(data, name)
        if unreachable:
            lines.append(
                f"{label}: its server runs at most {data.setting(name).capacity} requests (capacity sized for its "
                f"deepest depth), so the ranges from batch size {', '.join(map(str, unreachable))} never run; "
                "fix: cap the deepest depth, or raise the capacity (max_running_requests, memory)"
            )
    return lines


__all__ = [
    "HOLDS",
    "LOSES",
    "NO_EVIDENCE",
    "ScheduleLevel",
    "schedule_summary_lines",
    "scheduled_settings",
    "verify_schedules",
]
