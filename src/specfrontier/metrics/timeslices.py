"""Per-second figures of one measured window, from stored request records, and the latency spikes they show.

A cell's percentiles hide *when* latency was bad: a 2-second stall (a compaction, a KV-cache eviction,
a draft model falling behind) moves p99 a little and p50 not at all. Slicing the window makes it visible.

Definitions (all client-side `perf_counter_ns` stamps, like `metrics`):
- The window starts at the first `send_ns` of the cell's records; slice k covers
  [start + k x slice_s, start + (k + 1) x slice_s). The last slice holds the last `end_ns`.
- `finished`: requests (errors included) whose `end_ns` falls in the slice; `errors`: those that failed.
- `output_tokens`: tokens *delivered* in the slice: each content chunk of an ok request counts at its
  arrival time, with the server-reported tokens of that chunk (`chunk_tokens`) when known, else the
  request's completion tokens spread evenly over its content chunks (so the sum over slices equals the
  cell's output tokens; a slice's figure may then be fractional).
- TTFT of a request belongs to the slice of its first token (when the user saw it); TPOT (as in
  `metrics`) to the slice in which the request ended. p50 and p99 per slice use numpy's linear
  interpolation; a slice without samples has None.

Spike rule: a slice is a spike when its TTFT p99 (or TPOT p99) exceeds `SPIKE_FACTOR` (3) x the cell's
median of that metric over all its ok requests. A one-sample slice counts: one user waiting three
times the median is what a spike is.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import chain

import numpy as np

from specfrontier.metrics.per_request import percentile, request_tpot_ms, request_ttft_ms
from specfrontier.records import RequestRecord
from specfrontier.units import NS_PER_S, ns_to_ms

SPIKE_FACTOR = 3.0
"""A slice's p99 above this multiple of the cell's median is reported as a spike."""


@dataclass(frozen=True, slots=True)
class TimeSlice:
    """Figures of one slice of the window; the module docstring gives every definition."""

    index: int
    start_s: float
    """Seconds from the window start."""
    finished: int
    errors: int
    output_tokens: float
    ttft_p50_ms: float | None
    ttft_p99_ms: float | None
    tpot_p50_ms: float | None
    tpot_p99_ms: float | None


@dataclass(frozen=True, slots=True)
class Spike:
    """One slice whose p99 of `metric` is above SPIKE_FACTOR x the cell's median."""

    metric: str
    """"ttft" or "tpot"."""
    slice_index: int
    start_s: float
    p99_ms: float
    cell_median_ms: float

    @property
    def factor(self) -> float:
        return self.p99_ms / self.cell_median_ms


def p50_p99_each(groups: Sequence[Sequence[float]]) -> list[tuple[float | None, float | None]]:
    """`percentile` at 50 and 99 of every group (None, None for an empty one), from one numpy call per group
    size: groups of equal size are stacked as the rows of one array, and numpy's row-wise percentile runs
    the same arithmetic on each row as on the row alone, so the values are those of `percentile`. Why: a cell
    has a slice per second and two of these per slice; a numpy call per group cost more than the figures."""
    found: list[tuple[float | None, float | None]] = [(None, None)] * len(groups)
    by_size: dict[int, list[int]] = {}
    for i, group in enumerate(groups):
        if group:
            by_size.setdefault(len(group), []).append(i)
    for indexes in by_size.values():
        rows = np.asarray([groups[i] for i in indexes], dtype=np.float64)
        p50, p99 = np.percentile(rows, (50, 99), axis=1).tolist()
        for i, low, high in zip(indexes, p50, p99, strict=True):
            found[i] = (low, high)
    return found


def _chunk_tokens(r: RequestRecord) -> list[float]:
    if r.chunk_tokens is not None and len(r.chunk_tokens) == len(r.chunk_ns):
        return list(map(float, r.chunk_tokens))
    if not r.chunk_ns:
        return []
    return [(r.completion_tokens or 0) / len(r.chunk_ns)] * len(r.chunk_ns)


def _whole_tokens(r: RequestRecord) -> bool:
    """Whether every chunk of `r` counts a whole number of tokens (`_chunk_tokens`): the server's counts, or
    an even split of its tokens over its chunks."""
    if r.chunk_tokens is not None and len(r.chunk_tokens) == len(r.chunk_ns):
        return True
    return not r.chunk_ns or (r.completion_tokens or 0) % len(r.chunk_ns) == 0


def _tokens_per_slot(records: Sequence[RequestRecord], start: int, width: float, count: int) -> np.ndarray:
    """Tokens of every chunk of `records` summed per slot in one pass over the cell's chunks. Only for whole
    token counts: every partial sum is then an exact integer, so the order of the additions (here chunk by
    chunk over the cell, request by request in the general path) cannot change a slot's total."""
    lengths = np.fromiter((len(r.chunk_ns) for r in records), dtype=np.int64, count=len(records))
    total = int(lengths.sum())
    times = np.fromiter(chain.from_iterable(r.chunk_ns for r in records), dtype=np.int64, count=total)
    weights = np.fromiter(chain.from_iterable(_chunk_tokens(r) for r in records), dtype=np.float64, count=total)
    slots = np.minimum((times - start) // width, count - 1).astype(np.int64)
    return np.bincount(slots, weights=weights, minlength=count).astype(np.float64)


def time_slices(records: Sequence[RequestRecord], slice_s: float = 1.0) -> list[TimeSlice]:
    """Slice a cell's window into `slice_s`-second slices (every slice, empty ones included)."""
    if slice_s <= 0:
        raise ValueError(f"slice_s must be > 0, got {slice_s}")
    if not records:
        return []
    start = min(r.send_ns for r in records)
    width = slice_s * NS_PER_S
    count = int((max(r.end_ns for r in records) - start) // width) + 1

    def slot(t_ns: int) -> int:
        return min(int((t_ns - start) // width), count - 1)

    finished = [0] * count
    errors = [0] * count
    tokens = np.zeros(count, dtype=np.float64)
    ttft: list[list[float]] = [[] for _ in range(count)]
    tpot: list[list[float]] = [[] for _ in range(count)]
    whole = all(_whole_tokens(r) for r in records if r.ok)
    if whole:
        tokens = _tokens_per_slot([r for r in records if r.ok and r.chunk_ns], start, width, count)
    for r in records:
        k = slot(r.end_ns)
        finished[k] += 1
        if not r.ok:
            errors[k] += 1
            continue
        if r.chunk_ns and not whole:  # numpy: a long cell has millions of chunks
            chunk_slots = np.minimum((np.asarray(r.chunk_ns, dtype=np.int64) - start) // width, count - 1)
            tokens += np.bincount(chunk_slots.astype(np.int64), weights=_chunk_tokens(r), minlength=count)
        if r.first_token_ns is not None:
            ttft[slot(r.first_token_ns)].append(ns_to_ms(r.first_token_ns - r.send_ns))
        value = request_tpot_ms(r)
        if value is not None:
            tpot[k].append(value)
    out = []
    for k, ((ttft_p50, ttft_p99), (tpot_p50, tpot_p99)) in enumerate(
        zip(p50_p99_each(ttft), p50_p99_each(tpot), strict=True)
    ):
        out.append(
            TimeSlice(
                index=k,
                start_s=k * slice_s,
                finished=finished[k],
                errors=errors[k],
                output_tokens=float(tokens[k]),
                ttft_p50_ms=ttft_p50,
                ttft_p99_ms=ttft_p99,
                tpot_p50_ms=tpot_p50,
                tpot_p99_ms=tpot_p99,
            )
        )
    return out


def spikes(records: Sequence[RequestRecord], slices: Sequence[TimeSlice]) -> list[Spike]:
    """Slices whose TTFT or TPOT p99 exceeds SPIKE_FACTOR x the cell median (see the module docstring)."""
    ok = [r for r in records if r.ok]
    medians = {
        "ttft": percentile([v for r in ok if (v := request_ttft_ms(r)) is not None], 50),
        "tpot": percentile([v for r in ok if (v := request_tpot_ms(r)) is not None], 50),
    }
    found = []
    for s in slices:
        for metric, p99 in (("ttft", s.ttft_p99_ms), ("tpot", s.tpot_p99_ms)):
            median = medians[metric]
            if p99 is not None and median is not None and median > 0 and p99 > SPIKE_FACTOR * median:
                found.append(Spike(metric, s.index, s.start_s, p99, median))
    return found


__all__ = ["SPIKE_FACTOR", "Spike", "TimeSlice", "spikes", "time_slices"]
