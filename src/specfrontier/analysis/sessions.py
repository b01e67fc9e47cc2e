"""Per-turn figures of agentic session replay: how latency and acceptance move as the context grows.

Session turns are stored as requests whose prompt id is `<session>#t<turn>` (`workloads.resolve`). Per
(setting, workload, level, turn) over every repeat: the server-reported prompt tokens (the context
length) p50, TTFT p50, end-to-end latency p50, and the acceptance rate from the requests' own
speculative counts (llama.cpp `timings.draft_n*`, SGLang `meta_info`): accepted / drafted, summed over
the turn's requests, because the server's counters cover a whole window, not one turn.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

from specfrontier.records import RequestRecord
from specfrontier.store import CellRow
from specfrontier.units import ns_to_ms
from specfrontier.workloads.resolve import TURN_SEPARATOR


@dataclass(frozen=True, slots=True)
class TurnSummary:
    setting: str
    workload: str
    level: float
    turn: int
    requests: int
    context_tokens_p50: float | None
    ttft_p50_ms: float | None
    e2e_p50_ms: float | None
    drafted: int
    accepted: int

    @property
    def acceptance_rate(self) -> float | None:
        return self.accepted / self.drafted if self.drafted else None


def _turn(prompt_id: str) -> int | None:
    head, sep, tail = prompt_id.rpartition(TURN_SEPARATOR)
    return int(tail) if sep and head and tail.isdigit() else None


def _p50(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def turn_summaries(rows: Iterable[CellRow]) -> list[TurnSummary]:
    """Per-turn figures of every session-replay cell (empty for runs without sessions)."""
    groups: dict[tuple[str, str, float, int], list[RequestRecord]] = defaultdict(list)
    for row in rows:
        level = row.request_rate if row.request_rate is not None else row.concurrency
        for r in row.requests:
            turn = _turn(r.prompt_id)
            if turn is not None and r.ok:
                groups[(row.setting_id, row.workload, level, turn)].append(r)
    out = []
    for (setting, workload, level, turn), reqs in sorted(groups.items()):
        ttft = [ns_to_ms(r.first_token_ns - r.send_ns) for r in reqs if r.first_token_ns is not None]
        out.append(
            TurnSummary(
                setting,
                workload,
                level,
                turn,
                len(reqs),
                _p50([float(r.prompt_tokens) for r in reqs if r.prompt_tokens is not None]),
                _p50(ttft),
                _p50([ns_to_ms(r.end_ns - r.send_ns) for r in reqs]),
                sum(r.spec.draft_tokens for r in reqs if r.spec is not None),
                sum(r.spec.accepted_tokens for r in reqs if r.spec is not None),
            )
        )
    return out


__all__ = ["TurnSummary", "turn_summaries"]
