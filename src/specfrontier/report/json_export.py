"""Machine-readable report: one object per cell, plus the run, decisions and definitions.

Validated by pydantic models so the shape scripts rely on is explicit and documented in one place. A
cell's model, `CellExport`, is assembled in the report's field order from the cell's facts (the `_Cell*`
parts below) and the metrics `metrics.specs` declares, each section in its place: a declared metric is
exported, described and typed without an edit here.
"""

from __future__ import annotations

import shlex
from dataclasses import asdict
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, create_model

from specfrontier.analysis import RunData, best_per_concurrency, crossovers, recommend
from specfrontier.analysis.deploy import deploy_command
from specfrontier.analysis.drift import drift_control, level_drifts, reference_facts
from specfrontier.analysis.misconfig import misconfigurations
from specfrontier.analysis.schedule_check import verify_schedules
from specfrontier.analysis.summary import CellSummary, OverRepeats, figure_json, verdict_text
from specfrontier.metrics.declare import MetricSpec, Section
from specfrontier.metrics.specs import CELL_METRICS, in_section, spread_metrics
from specfrontier.report.bias import bias_json, gate_json, turns_json


class _Export(BaseModel):
    model_config = ConfigDict(extra="forbid")


class SettingExport(_Export):
    name: str = Field(description="Setting label.")
    parameters: dict[str, Any] = Field(description="Parameters set explicitly for this setting.")


class _CellHead(_Export):
    """A cell's identity and load: the JSON cell's first fields."""

    setting: SettingExport
    workload: str = Field(description="Prompt set, temperature, max tokens and EOS handling of the cell.")
    concurrency: int = Field(
        description="Closed loop: requested concurrency C. Open loop: the in-flight cap (0: none)."
    )
    load_mode: str = Field(description="'closed' (C users) or 'open' (arrivals at request_rate).")
    request_rate: float | None = Field(description="Open loop: target request rate (req/s); None for closed loop.")
    load: list[dict[str, Any]] = Field(
        description="Per repeat. Open loop: target/achieved rate, burstiness, seed, sent/measured, cap waits, send "
        "lag. Closed loop: send_s (how long the cell kept sending, s; null: its request count alone), sized_by (why, "
        "in words) and window_s (first send to last end, s)."
    )
    time_slices: list[list[dict[str, Any]]] = Field(
        description="Per repeat, per second of the window: finished, errors, output tokens, TTFT/TPOT p50/p99."
    )
    spikes: list[dict[str, Any]] = Field(description="Slices whose TTFT or TPOT p99 > 3x that repeat's median.")
    repeats: int = Field(description="Measured repeats of the cell.")
    complete: bool = Field(
        True,
        description="All the repeats the run asked for are stored and the setting's server did not fail (false: "
        "partial evidence, shown but never recommended; `evidence` is the whole rule).",
    )
    evidence: bool = Field(
        True,
        description="The evidence rule's verdict (docs/reliability.md): complete, failed requests within the "
        "run's max_failed_share, (closed loop) a steady state, and a client that kept up; only "
        "such cells decide the best setting per level, the crossovers and the recommendations.",
    )
    verdict: str = Field(
        "evidence",
        description="'evidence', or 'not evidence: ' and each reason (repeats, server, failed, steady, client).",
    )


class _CellAcceptance(_Export):
    """Pooled acceptance and the setting's capacity: after the headline metrics."""

    acceptance_rate: float | None = Field(description="Accepted / drafted tokens, pooled over repeats.")
    acceptance_length: float | None = Field(description="1 + accepted / verification steps, pooled.")
    acceptance_source: str | None = Field(description="Where the acceptance counts were read.")
    capacity: int | None = Field(description="Max concurrent requests read back from the server.")


class _CellHealth(_Export):
    """Trust flags: after the counts."""

    noisy: bool = Field(description="Aggregate tok/s MAD over repeats > 10% of the median.")
    client_saturated: bool = Field(
        description="Some repeat's client was saturated (lag p99 or CPU over the limits): TTFT and ITL may carry "
        "its lag; not evidence where it could not keep up (see verdict)."
    )
    steady_too_short: bool = Field(
        description="Closed loop: no steady state to measure (C > 1: a span under 1 s or 4 request lifetimes, "
        "or < 95% of C in flight inside it): not used for recommendations."
    )
    client_health: list[dict[str, Any]] = Field(
        description="Per repeat: client event-loop lag p50/p99/max (ms), CPU share of a core per worker, "
        "reads, events, workers, saturated and why."
    )


class _CellTail(_Export):
    """Goodput and the per-figure spread: the last fields."""

    goodput: dict[str, Any] | None = Field(
        description="Under the report's SLOs (None without --slo): goodput req/s and tok/s, good fraction "
        "(medians over repeats, spread), slo_met, and per SLO the observed percentile and whether it was met."
    )
    spread: dict[str, dict[str, Any]] = Field(
        description="Per figure over repeats: median, min, max, MAD, relative MAD, 95% bootstrap CI of the median."
    )


def _fields(part: type[_Export]) -> dict[str, Any]:
    return {name: (info.annotation, info) for name, info in part.model_fields.items()}


def _metric_fields(section: Section) -> dict[str, Any]:
    """The declared metrics of one section (`metrics.specs`): a median (float or None) or a summed count."""
    return {
        m.name: (float | None if m.over_repeats == "median" else int, Field(description=m.definition))
        for m in in_section(section)
    }


CellExport = create_model(
    "CellExport",
    __base__=_Export,
    __doc__="One cell of the JSON report. Its metric fields come from `metrics.specs.CELL_METRICS`; the "
    "field order is the report's (scripts and the CSV columns follow it).",
    **_fields(_CellHead),
    **_metric_fields("headline"),
    **_fields(_CellAcceptance),
    **_metric_fields("counts"),
    **_fields(_CellHealth),
    **_metric_fields("detail"),
    **_fields(_CellTail),
)


def _metric_value(c: CellSummary, spec: MetricSpec) -> float | int | None:
    """What a JSON cell shows of a declared metric: the median over repeats, or the summed count."""
    value = c.value(spec.name)
    return value.median if isinstance(value, OverRepeats) else int(value)


def _cell(data: RunData, c: CellSummary) -> _Export:
    s = data.setting(c.setting)
    reasons = data.verdict(c)
    facts: dict[str, Any] = dict(
        setting=SettingExport(name=s.name, parameters=s.params),
        workload=c.workload,
        concurrency=c.concurrency,
        load_mode="closed" if c.request_rate is None else "open",
        request_rate=c.request_rate,
        load=list(c.load),
        time_slices=[[asdict(x) for x in repeat] for repeat in c.slices],
        spikes=[{"repeat": r, **asdict(x), "factor": x.factor} for r, x in c.spikes],
        repeats=c.repeats,
        complete=c.repeats >= data.repeats_expected_of(c) and c.setting not in data.failed_settings,
        evidence=not reasons,
        verdict=verdict_text(reasons),
        acceptance_rate=c.acceptance_rate,
        acceptance_length=c.acceptance_length,
        acceptance_source=c.acceptance_source,
        capacity=s.capacity,
        noisy=c.noisy,
        client_saturated=c.client_saturated,
        steady_too_short=c.steady_too_short,
        client_health=list(c.client_health),
        goodput=_goodput(c),
        spread={m.name: figure_json(c.figure(m.name)) for m in spread_metrics()},
    )
    metrics = {m.name: _metric_value(c, m) for m in CELL_METRICS if m.section is not None}
    return CellExport.model_validate(facts | metrics)


def _goodput(c: CellSummary) -> dict[str, Any] | None:
    g = c.goodput
    if g is None:
        return None
    keys = sorted({ch.slo.key for w in g.windows for ch in w.checks})
    return {
        "goodput_req_s": figure_json(g.goodput_req_s),
        "goodput_tok_s": figure_json(g.goodput_tok_s),
        "good_fraction": figure_json(g.good_fraction),
        "slo_met": g.slo_met,
        "slos": {
            key: {
                "observed_ms": figure_json(g.observed(key)),
                "met_every_repeat": all(ch.met for w in g.windows for ch in w.checks if ch.slo.key == key),
            }
            for key in keys
        },
    }


DEFINITIONS = {
    "per_request_tok_s": "(output tokens - 1) / (end - first token) per request (= 1/TPOT); p50/p10 over requests",
    "aggregate_tok_s": "sum of server-reported completion tokens / window (first send to last end)",
    "ttft_ms": "first streamed chunk with text - request send",
    "tpot_ms": "(end - first token) / (output tokens - 1) per request",
    "achieved_concurrency": "sum of request latencies / window",
    "acceptance_rate": "accepted draft tokens / drafted tokens, measured windows only",
    "acceptance_length": "1 + accepted draft tokens / verification steps",
    "repeats": "every figure is the median over repeats; spread gives min, max, MAD and a seeded bootstrap 95% "
    "interval of the median; noisy = aggregate tok/s MAD > 10% of the median; a difference is a tie when the "
    "intervals overlap or the medians are within 1%, and the cheapest tied setting is recommended",
    "time_slices": "one-second slices from the window's first send: requests finished (by end time), output "
    "tokens delivered (by chunk arrival), TTFT p50/p99 by first-token time, TPOT p50/p99 by end time",
    "spike": "a slice whose TTFT or TPOT p99 exceeds 3x the median of that metric over the repeat's requests",
    "open_loop": "arrivals on a seeded gamma schedule (shape = burstiness, mean gap 1/rate); requests scheduled "
    "in warmup_s / the last cooldown_s are sent but not measured",
    "client_health": "per repeat: event-loop lag = actual - scheduled wake-up of a 5 ms ticker running beside "
    "the load (p50/p99/max), client CPU = process CPU time / window per worker; saturated when lag p99 > 5 ms "
    "or CPU > 90% of a core in any worker",
    "first_request": "TTFT and e2e of the very first request on a freshly launched server, before warmup",
    "evidence": "a cell is evidence when all the repeats the run asked for are stored, its setting's server did "
    "not fail, its failed requests are at most max_failed_share of its requests (the run's config; default 1%), "
    "(closed loop) it had a steady state, and its client kept up (CPU within 90% of a core, lag p99 within "
    "max_client_lag_share of the request lifetime, default 2%, or 5 ms); only evidence decides best, crossovers "
    "and recommendations",
    "itl_ms": "per token: each gap between content chunks split evenly over the tokens of the later chunk; "
    "token-weighted inverted-CDF percentiles; the first chunk's tokens belong to the TTFT",
    "chunk_gap_ms": "raw time between consecutive content chunks of a request (burstiness, not per token)",
    "e2e_tok_s": "completion tokens / (end - send) per request (per-user speed including the TTFT)",
    "acceptance_weighting": "token-weighted = sums then ratio (acceptance_rate/length); request-weighted = mean "
    "of per-request ratios (from per-request stats only)",
    "goodput": "per request: ok and within every SLO threshold; goodput = good requests (tokens) / window; "
    "good_fraction = good / all requests (errors are misses). Per cell: the SLO's percentile over all requests "
    "with failed ones as infinitely slow, met when <= the threshold",
    "noise_and_ties": "noisy = aggregate tok/s MAD > 10% of the median over repeats; a difference is a tie when "
    "the seeded bootstrap 95% intervals of the medians overlap or the medians are within 1%",
}


def _per_position(data: RunData, setting: str) -> list[float]:
    """P(draft position i accepted) per verification step, pooled over the setting's windows."""
    pooled = data.pooled_counters(setting)
    return list(pooled.per_position_rate) if pooled is not None else []


def report_json(data: RunData) -> dict[str, Any]:
    run = data.run
    return {
        "run": {
            "run_id": run.run_id,
            "engine": run.engine,
            "status": run.status,
            "created": run.created_at,
            "finished": run.finished_at,
            "environment": run.environment,
            "simulated": bool(run.environment.get("simulated")),
        },
        "definitions": DEFINITIONS,
        "slo": [
            {"key": s.key, "metric": s.metric, "percentile": s.percentile, "threshold_ms": s.threshold_ms}
            for s in data.slos
        ],
        "settings": [
            {
                "name": s.name,
                "parameters": s.params,
                "status": s.status,
                "capacity": s.capacity,
                "capacity_source": s.capacity_source,
                "startup_s": s.startup_s,
                "first_ttft_ms": s.first_ttft_ms,
                "first_e2e_ms": s.first_e2e_ms,
                "acceptance_per_position": _per_position(data, s.name),
                "command": shlex.join(s.command) if s.command else None,
                "deploy_command": deployed.text() if (deployed := deploy_command(data, s.name)) else None,
                "error": s.error,
            }
            for s in data.settings
        ],
        "cells": [_cell(data, c).model_dump(mode="json") for c in data.cells],
        # Decisions rank settings within one workload: per workload under `workloads`; the top-level
        # keys are the first workload's (the only one on a one-workload run), kept for existing scripts.
        **decisions_json(data.workload_views()[0][1]),
        "workloads": [{"workload": w, **decisions_json(view)} for w, view in data.workload_views() if w],
        "optimism_bias": bias_json(data),
        "correctness_gate": gate_json(data),
        "misconfiguration": [asdict(m) for m in misconfigurations(data)],
        "schedule_verification": [
            {"workload": w, **asdict(lv), "vs_best_pct": lv.vs_best_pct}
            for w, view in data.workload_views()
            for lv in verify_schedules(view)
        ],
        "session_turns": turns_json(data),
    }


def decisions_json(data: RunData) -> dict[str, Any]:
    """Best setting per concurrency, crossovers and recommendations of a one-workload view."""
    return {
        "best_per_concurrency": [
            {
                "concurrency": b.concurrency,
                "setting": b.setting,
                "aggregate_tok_s": b.aggregate_tok_s,
                "runner_up": b.runner_up,
                "margin": b.margin,
                "beyond_spread": b.beyond_spread,
                "speedup_vs_baseline": b.speedup_vs_baseline,
                "drift_withdrawn": b.drift_withdrawn,
            }
            for b in best_per_concurrency(data.complete_evidence())
        ],
        "drift_control": drift_control(data),
        "drift_reference": reference_facts(data),
        "drift": [{**asdict(d), "size": d.size, "beyond_noise": d.beyond_noise} for d in level_drifts(data)],
        "crossovers": [
            {
                "wins_low": x.winner_low,
                "wins_high": x.winner_high,
                "up_to": x.up_to,
                "from": x.from_c,
                "beyond_spread": x.beyond_spread,
            }
            for x in crossovers(data.complete_evidence())
        ],
        "recommendations": [
            {
                "setting": r.setting,
                "concurrency": list(r.concurrency),
                "command": r.deploy.text() if r.deploy else None,
                "environment": dict(r.deploy.env) if r.deploy else {},
                "measuring_only": list(r.deploy.measuring_only) if r.deploy else [],
                "launched_command": shlex.join(r.command) if r.command else None,
                "beyond_spread": r.beyond_spread,
                "note": r.note,
            }
            for r in recommend(data)
        ],
    }


__all__ = ["DEFINITIONS", "CellExport", "decisions_json", "report_json"]
