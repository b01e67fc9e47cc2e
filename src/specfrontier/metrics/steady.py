"""The steady state of a closed-loop cell: the span in which the requested C requests were in flight.

A closed-loop cell sends a fixed number of requests; its whole window (first send -> last end) includes
the ramp (requests still being sent) and the drain (the last requests finishing with fewer than C in
flight), so rates over the whole window are those of a lower concurrency than the cell's label. The
steady span is the part of the window the label describes:

- it starts once C requests are in flight and (C > 1) the first C requests sent have all ended: those
  started together (the ramp: every prefill at once, no token out yet), and until they have all been
  replaced the server is not in the state a steady load keeps it in. Started at the first instant C
  are in flight instead, the span read 4-6% low on the CPU llama.cpp server against 60-second cells of
  the same settings when it covered 7 request lifetimes; started at the cohort's first tokens, 3-5%
  high; this rule was within 2% from 4 lifetimes on (`analysis.summary` requires 4). At C = 1 there is
  no cohort: the span is the whole window;
- it ends where the drain begins: the first instant, at or after the last send, with fewer than C in
  flight (the first end nothing replaces; the end that triggered the last send comes before it, or at
  the same instant);
- rates over it count the tokens produced inside it: each content chunk's tokens (server-reported
  per-chunk counts, else the same even split as the per-token ITL, `chunks.chunk_token_counts`) spread
  over the time since the previous chunk, so a request that straddles an edge contributes only its
  share inside;
- `concurrency` is the mean number of requests in flight inside the span (the time integral of the
  in-flight count over the span, divided by its length): C in a perfect closed loop, a little less
  where the client's replacement of a finished request takes time.

None when C requests were never in flight at once (a cell with fewer requests than C, or every request
failing at once), or when sending stopped before the first C requests had all been replaced (a cell of
a round or two); such a cell has no steady state to report.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from specfrontier.metrics.chunks import chunk_token_counts
from specfrontier.records import RequestRecord
from specfrontier.units import ns_to_s


@dataclass(frozen=True, slots=True)
class SteadyState:
    """The steady span of one closed-loop cell and the rates over it (module docstring)."""

    start_ns: int
    end_ns: int
    output_tokens: float
    """Tokens that arrived inside the span (fractional where a chunk's split is estimated)."""
    concurrency: float
    """Mean requests in flight inside the span."""

    @property
    def span_s(self) -> float:
        return ns_to_s(self.end_ns - self.start_ns)

    @property
    def tok_s(self) -> float | None:
        """Output tokens per second over the steady span (None for an empty span)."""
        return self.output_tokens / self.span_s if self.span_s > 0 else None


def _in_flight_events(records: Sequence[RequestRecord]) -> list[tuple[int, int]]:
    """(time, +1 send / -1 end), ends first at equal times: a request replaced at the same instant is no gap."""
    return sorted([(r.send_ns, 1) for r in records] + [(r.end_ns, -1) for r in records])


def steady_span(records: Sequence[RequestRecord], concurrency: int) -> tuple[int, int] | None:
    """(start_ns, end_ns) of the span with `concurrency` requests in flight, or None (module docstring)."""
    if concurrency < 1 or not records:
        return None
    start: int | None = None
    current = 0
    for t, step in _in_flight_events(records):
        current += step
        if current >= concurrency:
            start = t
            break
    if start is None:
        return None
    if concurrency > 1:
        cohort = sorted(records, key=lambda r: r.send_ns)[:concurrency]
        start = max(start, max(r.end_ns for r in cohort))
    end = _drain_start(records, concurrency)
    if end is None or end <= start:
        return None
    return start, end


def _drain_start(records: Sequence[RequestRecord], concurrency: int) -> int | None:
    """The first instant, at or after the last send, with fewer than `concurrency` in flight once every
    event of that instant is counted: the first end nothing replaces. Before the last send an end is
    always replaced (a closed loop), if a moment later; in lock step (a simulator) many end at the
    instant of the last send and only some are replaced."""
    last_send = max(r.send_ns for r in records)
    events = _in_flight_events(records)
    current = 0
    for i, (t, step) in enumerate(events):
        current += step
        at_instant_end = i + 1 == len(events) or events[i + 1][0] != t
        if t >= last_send and at_instant_end and current < concurrency:
            return t
    return None


def steady_state(records: Sequence[RequestRecord], concurrency: int) -> SteadyState | None:
    """The steady span of a closed-loop cell at `concurrency` and the rates over it (None: no steady state)."""
    span = steady_span(records, concurrency)
    if span is None:
        return None
    start, end = span
    tokens = 0.0
    busy_ns = 0
    for r in records:
        busy_ns += max(0, min(r.end_ns, end) - max(r.send_ns, start))
        if not r.ok:
            continue
        tokens += tokens_inside(r, start, end)
    return SteadyState(start, end, tokens, busy_ns / (end - start))


def tokens_inside(r: RequestRecord, start: int, end: int) -> float:
    """Tokens of one request produced inside [start, end]: chunk i's tokens are spread evenly over the
    time since the previous chunk (the first chunk's over the time since the send), so a span edge that
    cuts a gap counts its share, and a steady stream's rate comes out exact, not off by a token per edge."""
    if not r.chunk_ns:  # no chunk times recorded (an imported or hand-made record): spread over the decode
        begin = r.first_token_ns if r.first_token_ns is not None else r.send_ns
        length = r.end_ns - begin
        tokens = float(r.completion_tokens or 0)
        if length <= 0:
            return tokens if start < r.end_ns <= end else 0.0
        return tokens * max(0, min(r.end_ns, end) - max(begin, start)) / length
    if r.end_ns <= start or r.send_ns > end:  # wholly outside: the common case, without numpy
        return 0.0
    inside = r.send_ns >= start and r.end_ns <= end  # wholly inside (every chunk's gap too)
    if inside and r.chunk_tokens is not None and len(r.chunk_tokens) == len(r.chunk_ns):
        return float(sum(r.chunk_tokens))  # server counts: an integer sum, exact (no per-chunk floats needed)
    counts, _ = chunk_token_counts(r)
    if inside:
        return float(sum(counts))
    ends = np.asarray(r.chunk_ns, dtype=np.float64)
    starts = np.concatenate(([float(r.send_ns)], ends[:-1]))
    lengths = ends - starts
    inside = np.clip(np.minimum(ends, end) - np.maximum(starts, start), 0.0, None)
    at_once = ((ends > start) & (ends <= end)).astype(np.float64)  # a chunk with no gap: all or nothing
    share = np.divide(inside, lengths, out=at_once, where=lengths > 0)
    return float(np.dot(share, np.asarray(counts, dtype=np.float64)))


__all__ = ["SteadyState", "steady_span", "steady_state", "tokens_inside"]
