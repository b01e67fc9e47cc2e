"""One window's request records, prepared once for the declared metric computations (`Window`), and the
per-chunk arithmetic they share: per-token ITL (`token_itl`, weighted percentiles), chunk gaps, peak
concurrency. The definitions are in `metrics.window`'s docstring and docs/metrics.md.

Why apart from `metrics.window`: a declaration's `compute` takes a `Window` (`metrics.declare`), the
declarations (`metrics.specs`) are collected by `metrics.window.cell_metrics`, so a `Window` kept in
`metrics.window` made declare -> window -> specs -> declare a circle; here it needs nothing declared.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from itertools import chain

import numpy as np

from specfrontier.metrics.chunks import chunk_token_counts
from specfrontier.metrics.per_request import request_decode_ns, request_e2e_ms, request_tpot_ms, request_ttft_ms
from specfrontier.metrics.steady import SteadyState, steady_state
from specfrontier.records import RequestRecord, RequestSpecStats
from specfrontier.units import NS_PER_MS, ns_to_s


def weighted_percentile(
    values: Sequence[float] | np.ndarray, weights: Sequence[float] | np.ndarray, q: float
) -> float | None:
    """Inverted-CDF weighted percentile: the smallest value whose cumulative weight reaches q% of the total.

    Used for the per-token ITL, where one chunk gap stands for k tokens (weight k, maybe fractional);
    repeating a value k times would need integer k. None when there is no positive weight.
    """
    return weighted_percentiles(values, weights, (q,))[0]


def weighted_percentiles(
    values: Sequence[float] | np.ndarray, weights: Sequence[float] | np.ndarray, qs: Sequence[float]
) -> list[float | None]:
    """`weighted_percentile` at each of `qs`, sorting the values once (a cell asks for three)."""
    if len(values) != len(weights):
        raise ValueError(f"weighted_percentile: {len(values)} values but {len(weights)} weights")
    # numpy, not a Python loop: a long cell has millions of token gaps and this runs per percentile.
    value_array = np.asarray(values, dtype=np.float64)
    weight_array = np.asarray(weights, dtype=np.float64)
    keep = weight_array > 0
    if not keep.any():
        return [None] * len(qs)
    value_array = value_array[keep]
    order = np.argsort(value_array, kind="stable")
    cumulative = np.cumsum(weight_array[keep][order])
    total = float(cumulative[-1])
    ordered = value_array[order]
    found: list[float | None] = []
    for q in qs:
        # A relative tolerance: cumulative float sums of fractional weights must not skip a value.
        index = int(np.searchsorted(cumulative, q / 100.0 * total - 1e-9 * total, side="left"))
        found.append(float(ordered[min(index, len(order) - 1)]))
    return found


def token_itl(r: RequestRecord) -> tuple[list[float], list[float], bool]:
    """(per-token ITL values in ms, their token weights, estimated?) of one ok request.

    The gap before chunk i is split evenly over the k_i tokens it carries: one value gap / k_i with
    weight k_i. A chunk that reports 0 tokens (e.g. a text-only delta the server did not count) adds
    nothing, and its gap is carried over to the next chunk that has tokens, so no time is lost.
    """
    counts, estimated = chunk_token_counts(r)
    if len(r.chunk_ns) < 2:
        return [], [], estimated
    times = np.asarray(r.chunk_ns, dtype=np.int64)
    tokens = np.asarray(counts, dtype=np.float64)
    carrying = np.flatnonzero(tokens[1:] > 0) + 1  # chunks after the first that carry tokens
    ends = times[carrying]
    starts = np.concatenate((times[:1], ends[:-1]))  # a token-less chunk's gap carries over
    kept = tokens[carrying]
    return ((ends - starts) / kept / NS_PER_MS).tolist(), kept.tolist(), estimated


@dataclass(frozen=True, slots=True)
class _ChunkFigures:
    """The chunk-level values of a cell's ok requests, pooled in request order."""

    gaps_ms: np.ndarray
    itl_values: np.ndarray
    itl_weights: np.ndarray
    itl_estimated: int


def _chunk_figures(ok: Sequence[RequestRecord]) -> _ChunkFigures:
    """Every ok request's chunk gaps and per-token ITL values and weights (`token_itl`), over the cell's
    chunks at once.

    Why: a cell holds thousands of requests of a few hundred chunks each, and a numpy call per request costs
    more than its arithmetic; the same integer differences and divisions, taken element by element over the
    concatenated chunks, give exactly the values (and order) of the per-request computation."""
    lengths = np.fromiter((len(r.chunk_ns) for r in ok), dtype=np.int64, count=len(ok))
    total = int(lengths.sum())
    times = np.fromiter(chain.from_iterable(r.chunk_ns for r in ok), dtype=np.int64, count=total)
    split = [chunk_token_counts(r) for r in ok]
    tokens = np.fromiter(chain.from_iterable(counts for counts, _ in split), dtype=np.float64, count=total)
    first = np.zeros(total, dtype=bool)
    first[(np.cumsum(lengths) - lengths)[lengths > 0]] = True  # each request's first chunk
    gaps_ms = np.diff(times)[~first[1:]] / NS_PER_MS
    # a chunk after the first that carries tokens; a token-less chunk's gap carries over to the next one
    carrying = ~first & (tokens > 0)
    marked = np.where(first | carrying, np.arange(total), 0)
    anchor = np.maximum.accumulate(marked)[np.flatnonzero(carrying) - 1]  # previous carrying or first chunk
    kept = tokens[carrying]
    values = (times[carrying] - times[anchor]) / kept / NS_PER_MS
    owner = np.repeat(np.arange(len(ok)), lengths)
    has_values = np.bincount(owner[carrying], minlength=len(ok)) > 0
    estimated = sum(1 for (_, guessed), valued in zip(split, has_values.tolist(), strict=True) if guessed and valued)
    return _ChunkFigures(gaps_ms, values, kept, estimated)


def peak_concurrency(records: Sequence[RequestRecord]) -> int:
    """Most requests in flight at one instant, from the [send_ns, end_ns) intervals."""
    # At equal times the end (-1) sorts before the start (+1): back-to-back requests do not overlap.
    events = sorted([(r.send_ns, 1) for r in records] + [(r.end_ns, -1) for r in records])
    peak = current = 0
    for _, step in events:
        current += step
        peak = max(peak, current)
    return peak


class Window:
    """One window's records, prepared for the declared computations (`metrics.specs`): each list is built
    on first use and shared by the metrics that read it (TTFT p50, p90 and p99 sort one list)."""

    def __init__(self, records: Sequence[RequestRecord], concurrency: int | None) -> None:
        self.records: Sequence[RequestRecord] = records
        self.concurrency: int | None = concurrency
        """The closed loop's C (its steady span is measured); None for an open-loop cell."""

    @cached_property
    def ok(self) -> list[RequestRecord]:
        return [r for r in self.records if r.ok]

    @cached_property
    def window_ns(self) -> int:
        return max(r.end_ns for r in self.records) - min(r.send_ns for r in self.records)

    @cached_property
    def window_s(self) -> float:
        return ns_to_s(self.window_ns)

    @cached_property
    def output_tokens(self) -> int:
        return sum(r.completion_tokens or 0 for r in self.ok)

    @cached_property
    def chunks(self) -> int:
        """Content chunks of the ok requests."""
        return sum(len(r.chunk_ns) for r in self.ok)

    @cached_property
    def ttft_ms(self) -> list[float]:
        return [v for r in self.ok if (v := request_ttft_ms(r)) is not None]

    @cached_property
    def e2e_ms(self) -> list[float]:
        return [request_e2e_ms(r) for r in self.ok]

    @cached_property
    def tpot_ms(self) -> list[float]:
        return [v for r in self.ok if (v := request_tpot_ms(r)) is not None]

    @cached_property
    def tok_s(self) -> list[float]:
        """Per-request tok/s = (completion_tokens - 1) / (E2E - TTFT), over the requests with a TPOT."""
        return [
            ((r.completion_tokens or 0) - 1) / ns_to_s(decode_ns)
            for r in self.ok
            if (decode_ns := request_decode_ns(r)) is not None
        ]

    @cached_property
    def e2e_tok_s(self) -> list[float]:
        return [(r.completion_tokens or 0) / ns_to_s(r.end_ns - r.send_ns) for r in self.ok if r.end_ns > r.send_ns]

    @cached_property
    def known_chunk_tokens(self) -> list[int]:
        """Server-reported per-chunk token counts, pooled over the ok requests that stream them."""
        return [
            k
            for r in self.ok
            if r.chunk_tokens is not None and len(r.chunk_tokens) == len(r.chunk_ns)
            for k in r.chunk_tokens
        ]

    @cached_property
    def pooled(self) -> _ChunkFigures:
        """Chunk gaps and per-token ITL (`token_itl`), over all chunks at once."""
        return _chunk_figures(self.ok)

    @cached_property
    def itl(self) -> list[float | None]:
        """Per-token ITL p50, p90, p99 (token-weighted)."""
        return weighted_percentiles(self.pooled.itl_values, self.pooled.itl_weights, (50, 90, 99))

    @cached_property
    def with_spec(self) -> list[RequestSpecStats]:
        """The spec counts of the ok requests that report them."""
        return [r.spec for r in self.ok if r.spec is not None]

    @cached_property
    def peak_concurrency(self) -> int:
        return peak_concurrency(self.records)

    @cached_property
    def steady(self) -> SteadyState | None:
        """Closed loop: the steady span (`metrics.steady`); None for an open-loop cell or C never reached."""
        return steady_state(self.records, self.concurrency) if self.concurrency is not None else None


__all__ = ["Window", "peak_concurrency", "token_itl", "weighted_percentile", "weighted_percentiles"]
