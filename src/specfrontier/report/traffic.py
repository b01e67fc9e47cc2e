"""The traffic answer as text lines (terminal, `recommend` and `report --traffic`) and as the HTML report's
plots: the profile, and the day-weighted figure of each setting (and the schedule) against the best static.

Why lines and not a table: the answer is a handful of sentences (best, gain, losses, replicas), each with
its definition and whether it rests on predictions; the per-level breakdown is the only tabular part."""

from __future__ import annotations

from specfrontier.metrics.slo import slo_text
from specfrontier.perfmodel.decide import NOT_SEPARATED
from specfrontier.report.table_model import percent_1dp
from specfrontier.traffic import DayFigures, TrafficAnswer
from specfrontier.traffic.crossing import Flip

DEFINITIONS = (
    "aggregate tok/s = output tokens per second of one server, all users together, weighted by the share of "
    "time at each load (idle time counts 0); per-user tok/s = per request: the decode speed one user sees "
    "(p50 over a cell's requests), weighted by time over the busy time; SLO share = busy time at loads whose "
    "cell meets every SLO (its percentile), over the busy time; goodput tok/s = aggregate tok/s counting only "
    "the loads that meet the SLO"
)


def _figures(f: DayFigures, answer: TrafficAnswer) -> str:
    parts = [f"{f.aggregate_tok_s:.1f} aggregate tok/s"]
    lo, hi = f.aggregate_band
    if hi > lo:
        parts[0] += f" (model error band {lo:.1f}-{hi:.1f})"
    if f.per_user_tok_s is not None:
        parts.append(f"{f.per_user_tok_s:.1f} per-user tok/s")
    if f.goodput_tok_s is not None:
        parts.append(f"{f.goodput_tok_s:.1f} goodput tok/s")
    if f.slo_share is not None:
        parts.append(f"SLO met {percent_1dp(f.slo_share)} of the busy time")
    predicted = f"predicted: {percent_1dp(f.predicted_share)} of the busy time"
    parts.append(predicted if f.predicted_share else "all measured")
    return ", ".join(parts)


def _within_model_error(f: DayFigures, best: DayFigures) -> bool:
    """Either rests partly on predictions and their model-error bands overlap."""
    (lo, hi), (blo, bhi) = f.aggregate_band, best.aggregate_band
    return bool(f.predicted_share or best.predicted_share) and lo <= bhi and blo <= hi


def _versus(f: DayFigures, best: DayFigures, answer: TrafficAnswer) -> str:
    diff = f.objective - best.objective
    rel = diff / best.objective if best.objective else 0.0
    within = ", within the model error" if _within_model_error(f, best) else ""
    return f"{diff:+.1f} {answer.objective_name} ({100 * rel:+.1f}%){within}"


def _flips_text(flips: tuple[Flip, ...]) -> str:
    return "; ".join(f.describe() for f in flips)


def answer_line(answer: TrafficAnswer) -> str:
    """What to deploy: the schedule only when it beats the best static setting beyond the model error and
    whatever the order at the crossovers it rests on; no setting when the best static one's lead rests on
    predictions within their stated error, or on where a measured order flips (`traffic.crossing`)."""
    best = answer.best
    if len(answer.settings) > 1 and _within_model_error(answer.settings[1], best):
        second = answer.settings[1]
        predicted = sorted({lv.concurrency for f in (best, second) for lv in f.busy if lv.predicted})
        return (
            f"answer: {NOT_SEPARATED} C = {', '.join(map(str, predicted))}: {best.name} leads {second.name} by "
            f"{_versus(best, second, answer)}, which rests on predicted levels within the model's stated error"
        )
    if answer.unsettled:
        second = answer.settings[1]
        return (
            f"answer: {NOT_SEPARATED} C = {', '.join(str(f.concurrency) for f in answer.unsettled)}: {best.name} "
            f"leads {second.name} by {_versus(best, second, answer)}, but not if the order at those levels is the "
            f"one measured on the side that favours {second.name} ({_flips_text(answer.unsettled)}: where it flips "
            "rests on how each option's cost bends between them, which no cell measures)"
        )
    sched = answer.schedule.figures
    if sched is not None and sched.objective > best.objective and answer.schedule.over_capacity > 0:
        return (
            f"answer: deploy {best.name} (static); the schedule's gain ({_versus(sched, best, answer)}) rests on "
            f"{100 * answer.schedule.over_capacity:.1f}% of the time above the capacity it runs with, where no "
            "cell measured it: measure it first (tune with verify_schedule: true, docs/schedules.md)"
        )
    if sched is not None and sched.objective > best.objective and answer.schedule.unsettled:
        flips = answer.schedule.unsettled
        return (
            f"answer: deploy {best.name} (static); the schedule's gain ({_versus(sched, best, answer)}) rests on "
            f"where the order flips ({_flips_text(flips)}), which no cell measures: "
            f"measure C = {', '.join(str(f.concurrency) for f in flips)}"
        )
    if sched is not None and sched.objective > best.objective and not _within_model_error(sched, best):
        return (
            f"answer: deploy the per-batch-size schedule ({answer.schedule.ranges}), "
            f"{_versus(sched, best, answer)} over {best.name}; without a schedule, {best.name}"
        )
    why = ""
    if sched is not None and sched.objective > best.objective:
        why = f"; the schedule gains {_versus(sched, best, answer)}, not worth its machinery"
    elif sched is not None:
        versus = _versus(sched, best, answer)
        why = f"; the schedule (best depth per batch size by aggregate tok/s) does no better: {versus}"
    return f"answer: deploy {best.name} (static){why}"


def _profile_line(answer: TrafficAnswer) -> str:
    p = answer.profile
    unit = "C" if p.kind == "concurrency" else "req/s"
    levels = ", ".join(f"{level:g}: {percent_1dp(share)}" for level, share in p.shares)
    more = f", {p.samples} samples over {p.seconds:.0f} s (time-weighted)" if p.samples else ""
    return f"profile: {p.source}{more}; share of time per {unit}: {levels}"


def traffic_lines(answer: TrafficAnswer) -> list[str]:
    """The answer, one sentence a line (see the module docstring)."""
    simulated = " (SIMULATED: model predictions, not measurements)" if answer.simulated else ""
    best = answer.best
    out = [f"Recommendation for the traffic profile, run {answer.run_id}{simulated}", _profile_line(answer)]
    objective = answer.objective_name
    slo = f" under {slo_text(answer.slos)}" if answer.slos else ""
    out.append(f"objective: the highest day-weighted {objective}{slo}")
    out.append(f"definitions: {DEFINITIONS}")
    out.append(f"best static setting: {best.name}: {_figures(best, answer)}")
    sched = answer.schedule
    if sched.figures is not None:
        f = sched.figures
        out.append(
            f"per-batch-size schedule ({sched.ranges}): {_figures(f, answer)}; "
            f"gain over {best.name}: {_versus(f, best, answer)} ({sched.note})"
        )
    else:
        out.append(sched.note + (f" ({sched.ranges})" if sched.ranges else ""))
    out.append(answer_line(answer))
    for f in answer.settings[1:]:
        out.append(f"other choice {f.name}: {_figures(f, answer)}; loss vs {best.name}: {_versus(f, best, answer)}")
    for line in answer.left_out:
        out.append(f"left out: {line}")
    out.append("aggregate tok/s per load (M measured, P predicted +/- its model error):")
    by_level: dict[int, list[str]] = {}
    for f in answer.settings:
        for lv in f.levels:
            if lv.concurrency == 0:
                continue
            how = "M" if not lv.predicted else f"P +/-{100 * (lv.error or 0):.0f}%"
            met = "" if lv.slo_met is None else (" SLO ok" if lv.slo_met else " SLO missed")
            by_level.setdefault(lv.concurrency, []).append(f"{f.name} {lv.aggregate_tok_s:.1f} {how}{met}")
    shares = {lv.concurrency: lv.share for f in answer.settings for lv in f.levels}
    for c in sorted(by_level):
        share = f" ({percent_1dp(shares[c])})" if answer.profile.kind == "concurrency" else ""
        out.append(f"  C={c}{share}: " + "; ".join(by_level[c]))
    predicted = max([f.predicted_share for f in answer.settings] + [0.0])
    if answer.model is not None:
        out.append(f"predictions: up to {percent_1dp(predicted)} of the busy time rests on the {answer.model}")
    else:
        out.append("predictions: none; every figure is a measured cell")
    if answer.peak is not None:
        unit = "users" if answer.peak.unit == "users" else "req/s"
        rule = "highest measured level meeting the SLO" if answer.slos else "highest measured level (no SLO given)"
        each = [
            f"{r.setting} {r.count} ({r.per_replica:.3g} {unit} per replica)"
            if r.count is not None and r.per_replica is not None
            else f"{r.setting} none (no measured level meets the SLO)"
            for r in answer.replicas
        ]
        out.append(f"replicas for a peak of {answer.peak.text}{slo} (one replica: the {rule}): " + "; ".join(each))
    return out


def traffic_text(answer: TrafficAnswer, *, markdown: bool = False) -> str:
    """The answer as a block appended to a text report (a Markdown section with `markdown`)."""
    lines = traffic_lines(answer)
    if markdown:
        return "\n## Traffic profile\n\n" + lines[0] + "\n\n" + "".join(f"- {line}\n" for line in lines[1:])
    return "\n" + lines[0] + "\n" + "".join(f"  {line}\n" for line in lines[1:])


def profile_plot(answer: TrafficAnswer) -> str:
    """The profile: share of time per load level (bars)."""
    from specfrontier.report.plots import HEIGHT_IN, new_figure, svg_of

    fig, ax = new_figure(HEIGHT_IN * 0.8)
    levels = [f"{level:g}" for level, _ in answer.profile.shares]
    ax.bar(levels, [100 * share for _, share in answer.profile.shares], color="#4c72b0")
    ax.set_xlabel(
        "concurrency C (running requests)" if answer.profile.kind == "concurrency" else "request rate (req/s)"
    )
    ax.set_ylabel("share of time (%)")
    return svg_of(fig)


def gain_plot(answer: TrafficAnswer) -> str:
    """Each setting's (and the schedule's) day-weighted objective relative to the best static setting, with
    the model-error band where predictions enter (hatched bars: part of the weight rests on predictions)."""
    from specfrontier.report.plots import HEIGHT_IN, new_figure, svg_of

    best = answer.best
    rows = list(answer.settings) + ([answer.schedule.figures] if answer.schedule.figures is not None else [])
    fig, ax = new_figure(HEIGHT_IN * 0.8)
    for i, f in enumerate(rows):
        rel = 100 * (f.objective / best.objective - 1) if best.objective else 0.0
        ax.barh(i, rel, color="#55a868" if rel >= 0 else "#c44e52", hatch="//" if f.predicted_share else None)
        if f.predicted_share and f.aggregate_tok_s > 0:
            lo, hi = f.aggregate_band
            half = 100 * (hi - lo) / 2 / f.aggregate_tok_s
            ax.errorbar(rel, i, xerr=half, color="black", capsize=3)
    ax.set_yticks(range(len(rows)), [f.name for f in rows])
    ax.axvline(0, color="black", linewidth=0.8)
    ax.set_xlabel(f"day-weighted {answer.objective_name} vs {best.name} (%)")
    return svg_of(fig)


__all__ = ["DEFINITIONS", "answer_line", "gain_plot", "profile_plot", "traffic_lines", "traffic_text"]
