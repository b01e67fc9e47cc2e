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

from specfrontier.records import RequestSpecStats, session_turn
from specfrontier.store import CellRow
from specfrontier.store.cell_requests import request_heads
from specfrontier.units import ns_to_ms


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


def _p50(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


@dataclass(frozen=True, slots=True)
class _Turn:
    """The fields of one turn's request that the per-turn figures use (from the cell's stored heads)."""

    prompt_tokens: int | None
    ttft_ms: float | None
    e2e_ms: float
    spec: RequestSpecStats | None


def _turns_of(row: CellRow) -> Iterable[tuple[int, _Turn]]:
    """(turn, request) of every ok session-turn request of a cell; a cell whose stored digest says it has
    no turns is not read at all."""
    if row.stored_digest is not None and not row.stored_digest.session_turns:
        return
    heads = request_heads(row.requests)
    for i, prompt_id in enumerate(heads.prompt_ids):
        turn = session_turn(prompt_id)
        if turn is None or heads.errors[i] is not None:
            continue
        send, first = int(heads.send_ns[i]), heads.first_token_ns[i]
        yield (
            turn,
            _Turn(
                heads.prompt_tokens[i],
                ns_to_ms(first - send) if first is not None else None,
                ns_to_ms(int(heads.end_ns[i]) - send),
                heads.spec[i],
            ),
        )


def turn_summaries(rows: Iterable[CellRow]) -> list[TurnSummary]:
    """Per-turn figures of every session-replay cell (empty for runs without sessions)."""
    groups: dict[tuple[str, str, float, int], list[_Turn]] = defaultdict(list)
    for row in rows:
        level = row.request_rate if row.request_rate is not None else row.concurrency
        for turn, request in _turns_of(row):
            groups[(row.setting_id, row.workload, level, turn)].append(request)
    out = []
    for (setting, workload, level, turn), reqs in sorted(groups.items()):
        out.append(
            TurnSummary(
                setting,
                workload,
                level,
                turn,
                len(reqs),
                _p50([float(r.prompt_tokens) for r in reqs if r.prompt_tokens is not None]),
                _p50([r.ttft_ms for r in reqs if r.ttft_ms is not None]),
                _p50([r.e2e_ms for r in reqs]),
                sum(r.spec.draft_tokens for r in reqs if r.spec is not None),
                sum(r.spec.accepted_tokens for r in reqs if r.spec is not None),
            )
        )
    return out


__all__ = ["TurnSummary", "turn_summaries"]
