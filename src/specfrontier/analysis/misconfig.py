"""Misconfiguration check: a speculative setting that ran without error but cannot be doing what was meant.

Why: engines accept some wrong combinations silently. A reported SGLang case ran EAGLE-3 weights under
`--speculative-algorithm EAGLE` and got acceptance length 1.0 with no error; llama-server runs any draft
model whose vocabulary is compatible, whether or not it predicts the target. Such a setting costs a launch,
measures as "speculation does not help here", and a reader draws the wrong conclusion about speculation
instead of fixing one flag. Each finding names its evidence, the likely cause and the fix, in the engine's
terms (`EngineSetting.rejected_drafts_hint`).

Checks, per speculative setting and workload, on the server's counters over the measured windows (pooled
over the setting's cells) and on the lowest measured concurrency:
- drafted nothing: the counters show no drafted token at all (speculation configured but not running);
- drafts rejected: drafts were made, but fewer than `MIN_ACCEPTANCE_RATE` of drafted tokens were accepted,
  or the acceptance length (tokens per verify step, incl. the bonus token) is below `MIN_ACCEPTANCE_LENGTH`;
- slow for one user: at the lowest closed-loop concurrency, per-request tok/s (p50) below
  `SLOW_FACTOR` x no speculation's, with every repeat of the setting below every repeat of the baseline.

Thresholds, and why: a working drafter accepts far more than 5 % (n-gram on copy-heavy prompts 44-68 %,
the generated pair at alpha 0.3 about 10 %, EAGLE-3 on chat 40-60 %), while a mismatched draft measured on
llama-server (the generated target with a draft of another seed) accepted 0.1 % (acceptance length 1.004)
and ran at 0.46x the baseline's per-request speed at C=1. 0.8x at one user is "slower by far": a working
speculative setting is rarely slower than the baseline at C=1, and noise is excluded by the spread rule.
These are findings to read, not verdicts: the setting's cells stay in the tables and the recommendation
(a slow setting never wins it).
"""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import ValidationError

from specfrontier.analysis.summary import RunData
from specfrontier.engines.registry import stored_setting
from specfrontier.errors import ConfigError
from specfrontier.records import SpecCounters

MIN_ACCEPTANCE_RATE = 0.05
MIN_ACCEPTANCE_LENGTH = 1.05
SLOW_FACTOR = 0.8

DRAFTED_NOTHING = "drafted_nothing"
DRAFTS_REJECTED = "drafts_rejected"
SLOW_FOR_ONE_USER = "slow_for_one_user"


@dataclass(frozen=True, slots=True)
class Misconfiguration:
    """One finding: which setting (in which workload), what was seen, and the likely cause with its fix."""

    setting: str
    workload: str
    check: str
    evidence: str
    cause: str

    def line(self, multi_workload: bool) -> str:
        where = f"{self.setting} [{self.workload}]" if multi_workload else self.setting
        return f"{where}: likely misconfigured: {self.evidence}; likely cause: {self.cause}"


def _hint(data: RunData, name: str) -> str:
    """The engine's own reading of rejected drafts; the generic one when the stored setting cannot be rebuilt."""
    try:
        return stored_setting(data.run.engine, name, data.setting(name).params).rejected_drafts_hint()
    except (ConfigError, ValidationError):
        return (
            "the drafter does not match the target (a draft of another model, tokenizer or checkpoint); fix: use "
            "the draft model or head trained for this target"
        )


def _acceptance_finding(data: RunData, name: str, workload: str, counters: SpecCounters) -> Misconfiguration | None:
    if counters.draft_tokens <= 0 and counters.accepted_tokens <= 0:
        if counters.verify_steps <= 0:
            return Misconfiguration(
                name,
                workload,
                DRAFTED_NOTHING,
                "the server's counters show no drafted token in any measured window",
                "speculation is configured but not running (the engine ignored or refused the drafter without "
                "failing), or an n-gram drafter never found a match in this workload; fix: check the launch "
                "command's speculative flags against the server log (specfrontier-logs/RUN/SETTING.log beside "
                "the store)",
            )
        return None
    rate, length = counters.acceptance_rate, counters.acceptance_length
    low_rate = rate is not None and rate < MIN_ACCEPTANCE_RATE
    low_length = length is not None and length < MIN_ACCEPTANCE_LENGTH
    if not (low_rate or low_length):
        return None
    seen = []
    if rate is not None:
        seen.append(f"{rate:.1%} of {counters.draft_tokens} drafted tokens accepted")
    if length is not None:
        seen.append(f"acceptance length {length:.3f}")
    return Misconfiguration(name, workload, DRAFTS_REJECTED, ", ".join(seen), _hint(data, name))


def _slow_finding(data: RunData, name: str, workload: str, rejected: bool) -> Misconfiguration | None:
    if data.open_loop or data.baseline is None or not data.concurrency_levels:
        return None
    level = min(data.concurrency_levels)
    cell, base = data.cell(name, level), data.cell(data.baseline, level)
    if cell is None or base is None:
        return None
    mine, theirs = cell.per_request_tok_s_p50, base.per_request_tok_s_p50
    if not (mine.median and theirs.median and mine.high is not None and theirs.low is not None):
        return None
    ratio = mine.median / theirs.median
    if ratio >= SLOW_FACTOR or mine.high >= theirs.low:
        return None
    cause = (
        "its drafts are rejected (see the finding above)"
        if rejected
        else "each draft costs more than it saves: a draft model too large for the target, a depth too deep for "
        "this acceptance, or an engine running the drafter on a slow path (no CUDA graphs for this draft shape, "
        "eager fallback; see the server log); fix: try a smaller depth or draft, and check the engine's log"
    )
    evidence = (
        f"at {data.level_text(level)} per-request tok/s p50 {mine.median:.1f} is {ratio:.2f}x no speculation's "
        f"{theirs.median:.1f} ({data.baseline}), every repeat below the baseline's"
    )
    return Misconfiguration(name, workload, SLOW_FOR_ONE_USER, evidence, cause)


def _one_workload(data: RunData, workload: str) -> list[Misconfiguration]:
    found: list[Misconfiguration] = []
    measured = set(data.measured_settings())
    for row in data.settings:
        if not row.speculative or row.name not in measured:
            continue
        counters = data.pooled_counters(row.name)
        acceptance = _acceptance_finding(data, row.name, workload, counters) if counters is not None else None
        if acceptance is not None:
            found.append(acceptance)
        slow = _slow_finding(data, row.name, workload, acceptance is not None)
        if slow is not None:
            found.append(slow)
    return found


def misconfigurations(data: RunData) -> list[Misconfiguration]:
    """Every finding of a run, per workload (a drafter can be fine on code and useless on chat)."""
    found: list[Misconfiguration] = []
    for workload, view in data.workload_views():
        found += _one_workload(view, workload)
    return found


def misconfiguration_lines(data: RunData) -> list[str]:
    """The findings as report flag lines."""
    return [m.line(data.multi_workload) for m in misconfigurations(data)]


__all__ = [
    "DRAFTED_NOTHING",
    "DRAFTS_REJECTED",
    "MIN_ACCEPTANCE_LENGTH",
    "MIN_ACCEPTANCE_RATE",
    "SLOW_FACTOR",
    "SLOW_FOR_ONE_USER",
    "Misconfiguration",
    "misconfiguration_lines",
    "misconfigurations",
]
