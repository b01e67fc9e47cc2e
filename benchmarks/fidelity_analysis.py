"""Pure parts of the client-fidelity benchmark: lag samples, GuideLLM result parsing, tables.

Kept apart from `client_fidelity.py` (which starts processes and sends traffic) so that every
definition here is unit-tested on hand-made inputs and a captured GuideLLM result.

Definitions (also printed by the benchmark and written to the docs):
- send stamp: the fidelity server's clock reading just before it wrote a chunk to the socket
  (`perf_counter_ns` and `time_ns`, both recorded).
- added client lag of a chunk = the client's receive stamp of that chunk - its send stamp. Our client
  stamps with `perf_counter_ns` (CLOCK_MONOTONIC) when a read returns; GuideLLM stamps with
  `time.time()` after httpx yields the line, so its lag is taken against the server's wall clock.
- GuideLLM keeps only the first and the last token's receive time per request, so the like-for-like
  comparison uses those two chunks of every request ("first+last"); ours is also given over every chunk.
- request-path delay = server arrival (handler entry) - the client's request start stamp. Ours starts
  before the TCP connect (a fresh connection per request); GuideLLM's when httpx starts writing headers
  on an already open (kept-alive) connection.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from specfrontier.metrics.window import CellMetrics
from specfrontier.records import RequestRecord

_NS_PER_MS = 1e6


@dataclass(frozen=True, slots=True)
class StreamSchedule:
    """One stream as the fidelity server served it."""

    sid: int
    arrival_ns: int
    arrival_wall_ns: int
    sched_ns: tuple[int, ...]
    sent_ns: tuple[int, ...]
    sent_wall_ns: tuple[int, ...]
    tokens: int = 0
    """Tokens the server generated for this stream (its `max_tokens`; 0 when unknown)."""


def parse_server_log(payload: Mapping[str, Any]) -> dict[int, StreamSchedule]:
    """`GET /fidelity/log` JSON -> schedules by stream id."""
    streams: dict[int, StreamSchedule] = {}
    for s in payload["streams"]:
        streams[int(s["sid"])] = StreamSchedule(
            sid=int(s["sid"]),
            arrival_ns=int(s["arrival_ns"]),
            arrival_wall_ns=int(s["arrival_wall_ns"]),
            sched_ns=tuple(int(x) for x in s["sched_ns"]),
            sent_ns=tuple(int(x) for x in s["sent_ns"]),
            sent_wall_ns=tuple(int(x) for x in s["sent_wall_ns"]),
            tokens=int(s.get("max_tokens", 0)),
        )
    return streams


def parse_sid(text: str | None) -> int | None:
    """Stream id from an output that starts with the server's first token `s<sid>t0 `."""
    if not text or not text.startswith("s"):
        return None
    head, sep, _ = text[1:].partition("t")
    return int(head) if sep and head.isdigit() else None


@dataclass(frozen=True, slots=True)
class LagSamples:
    """Lag samples of one tool in one cell, in ms (see the module docstring for the definitions)."""

    every_chunk_ms: tuple[float, ...]
    """Every content chunk (empty for GuideLLM, which keeps no per-chunk times)."""
    first_last_ms: tuple[float, ...]
    """The first and the last content chunk of every matched request."""
    first_ms: tuple[float, ...]
    request_path_ms: tuple[float, ...]
    matched: int
    unmatched: int


def our_lags(records: Sequence[RequestRecord], streams: Mapping[int, StreamSchedule]) -> LagSamples:
    """Lag of our client's records (perf_counter_ns) against the server's monotonic send stamps.

    A record is matched to its stream by the id in its output text; ok records whose chunk count
    differs from the server's (a coalesced or lost chunk would break the index pairing) are unmatched.
    """
    every: list[float] = []
    first_last: list[float] = []
    first: list[float] = []
    path: list[float] = []
    matched = unmatched = 0
    for r in records:
        sid = parse_sid(r.output_text)
        stream = streams.get(sid) if sid is not None else None
        if not r.ok or stream is None or len(r.chunk_ns) != len(stream.sent_ns) or not r.chunk_ns:
            unmatched += 1
            continue
        matched += 1
        lags = [(got - sent) / _NS_PER_MS for got, sent in zip(r.chunk_ns, stream.sent_ns, strict=True)]
        every.extend(lags)
        first.append(lags[0])
        first_last.extend((lags[0], lags[-1]) if len(lags) > 1 else (lags[0],))
        path.append((stream.arrival_ns - r.send_ns) / _NS_PER_MS)
    return LagSamples(tuple(every), tuple(first_last), tuple(first), tuple(path), matched, unmatched)


@dataclass(frozen=True, slots=True)
class GuideLLMRequest:
    """The parts of one GuideLLM request record the benchmark uses (times are `time.time()` seconds)."""

    sid: int | None
    request_start_s: float
    first_token_s: float | None
    last_token_s: float | None
    output_tokens: int | None


def guidellm_benchmarks(report: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The benchmarks of a GuideLLM 0.8 JSON report (`--output kind=json`), in run order."""
    benchmarks = report.get("benchmarks")
    if not isinstance(benchmarks, list) or not benchmarks:
        raise ValueError("GuideLLM report has no 'benchmarks' list: was it written by guidellm 0.8 --output json?")
    return benchmarks


def guidellm_requests(benchmark: Mapping[str, Any]) -> list[GuideLLMRequest]:
    """Successful requests of one GuideLLM benchmark that started inside its measured window (so its
    warmup requests are left out, as its own metrics do), with the stream id read from the output text."""
    out: list[GuideLLMRequest] = []
    window_start = benchmark.get("start_time")
    for r in benchmark["requests"]["successful"]:
        timings = r["info"]["timings"]
        if window_start is not None and float(timings["request_start"]) < float(window_start):
            continue
        metrics = r.get("output_metrics") or {}
        out.append(
            GuideLLMRequest(
                sid=parse_sid(r.get("output")),
                request_start_s=float(timings["request_start"]),
                first_token_s=timings.get("first_token_iteration"),
                last_token_s=timings.get("last_token_iteration"),
                output_tokens=metrics.get("total_tokens"),
            )
        )
    return out


def guidellm_lags(requests: Iterable[GuideLLMRequest], streams: Mapping[int, StreamSchedule]) -> LagSamples:
    """Lag of GuideLLM's first/last token stamps (wall clock) against the server's wall-clock sends."""
    first_last: list[float] = []
    first: list[float] = []
    path: list[float] = []
    matched = unmatched = 0
    for r in requests:
        stream = streams.get(r.sid) if r.sid is not None else None
        if stream is None or r.first_token_s is None or r.last_token_s is None or not stream.sent_wall_ns:
            unmatched += 1
            continue
        matched += 1
        lag_first = r.first_token_s * 1e3 - stream.sent_wall_ns[0] / _NS_PER_MS
        lag_last = r.last_token_s * 1e3 - stream.sent_wall_ns[-1] / _NS_PER_MS
        first.append(lag_first)
        first_last.extend((lag_first, lag_last) if len(stream.sent_wall_ns) > 1 else (lag_first,))
        path.append(stream.arrival_wall_ns / _NS_PER_MS - r.request_start_s * 1e3)
    return LagSamples((), tuple(first_last), tuple(first), tuple(path), matched, unmatched)


@dataclass(frozen=True, slots=True)
class ToolFigures:
    """The three figures compared between tools, each by its own tool's definition."""

    ttft_p50_ms: float | None
    itl_p50_ms: float | None
    output_tok_s: float | None
    requests: int
    errors: int
    concurrency: float | None = None
    """Mean requests in flight over the window (achieved, not requested)."""


def guidellm_figures(benchmark: Mapping[str, Any]) -> ToolFigures:
    """GuideLLM's own figures: median TTFT, median inter_token_latency_ms, mean output tokens/s.

    `inter_token_latency_ms` = (last token - first token) / (output tokens - 1) per request, and its
    distribution is token-weighted; `output_tokens_per_second.mean` is GuideLLM's time-weighted rate
    over its measured window; `request_concurrency.mean` its time-weighted requests in flight.
    Only successful requests are used (as ours uses only ok requests).
    """
    metrics = benchmark["metrics"]
    totals = metrics["request_totals"]

    def stat(name: str, key: str) -> float | None:
        value = metrics[name]["successful"].get(key)
        return float(value) if value is not None else None

    return ToolFigures(
        ttft_p50_ms=stat("time_to_first_token_ms", "median"),
        itl_p50_ms=stat("inter_token_latency_ms", "median"),
        output_tok_s=stat("output_tokens_per_second", "mean"),
        requests=int(totals["total"]),
        errors=int(totals["errored"]) + int(totals["incomplete"]),
        concurrency=stat("request_concurrency", "mean"),
    )


def server_figures(streams: Mapping[int, StreamSchedule], sids: Iterable[int]) -> ToolFigures:
    """The truth, from the server's own send stamps, for the streams `sids` (one tool's requests).

    TTFT = first send - arrival; ITL = (last send - first send) / (tokens - 1); throughput = tokens /
    (first arrival -> last send); concurrency = sum of (last send - arrival) / that window. No client
    is involved, so a tool's figure minus this one is what that tool added.
    """
    chosen = [streams[sid] for sid in sids if sid in streams and streams[sid].sent_ns]
    if not chosen:
        return ToolFigures(None, None, None, 0, 0)
    ttft = [(s.sent_ns[0] - s.arrival_ns) / _NS_PER_MS for s in chosen]
    itl = [
        (s.sent_ns[-1] - s.sent_ns[0]) / _NS_PER_MS / (s.tokens - 1)
        for s in chosen
        if s.tokens > 1 and len(s.sent_ns) > 1
    ]
    window_ns = max(s.sent_ns[-1] for s in chosen) - min(s.arrival_ns for s in chosen)
    tokens = sum(s.tokens for s in chosen)
    busy_ns = sum(s.sent_ns[-1] - s.arrival_ns for s in chosen)
    return ToolFigures(
        ttft_p50_ms=percentile(ttft, 50),
        itl_p50_ms=percentile(itl, 50),
        output_tok_s=tokens / (window_ns / 1e9) if window_ns > 0 else None,
        requests=len(chosen),
        errors=0,
        concurrency=busy_ns / window_ns if window_ns > 0 else None,
    )


def our_figures(cell: CellMetrics) -> ToolFigures:
    """Our figures from `specfrontier.metrics.window.cell_metrics` (definitions in its docstring)."""
    return ToolFigures(
        ttft_p50_ms=cell.ttft_p50_ms,
        itl_p50_ms=cell.tpot_p50_ms,
        output_tok_s=cell.aggregate_tok_s,
        requests=cell.requests,
        errors=cell.errors,
        concurrency=cell.achieved_concurrency,
    )


def pct_diff(ours: float | None, theirs: float | None) -> float | None:
    """(ours - theirs) / theirs in percent; None when either is missing or theirs is 0."""
    if ours is None or theirs is None or theirs == 0:
        return None
    return (ours - theirs) / theirs * 100.0


def percentile(values: Sequence[float], q: float) -> float | None:
    """numpy linear-interpolation percentile; None for no data."""
    if not values:
        return None
    return float(np.percentile(np.asarray(values, dtype=np.float64), q))


def _fmt(value: float | None, digits: int = 2) -> str:
    if value is None or math.isnan(value):
        return "-"
    return f"{value:.{digits}f}"


def _fmt_pct(value: float | None) -> str:
    return "-" if value is None else f"{value:+.1f}%"


@dataclass(frozen=True, slots=True)
class AgreementCell:
    """One concurrency level: each tool's figures and the server's truth during that tool's run."""

    concurrency: int
    ours: ToolFigures
    guidellm: ToolFigures
    server_ours: ToolFigures
    server_guidellm: ToolFigures


_FIGURES = (
    ("median TTFT (ms)", "ttft_p50_ms", 2),
    ("median TPOT / ITL (ms)", "itl_p50_ms", 3),
    ("output throughput (tok/s)", "output_tok_s", 1),
    ("achieved concurrency", "concurrency", 1),
)


def agreement_rows(cells: Sequence[AgreementCell]) -> list[list[str]]:
    """Rows of the agreement table: both tools, their difference, and each against the server's truth."""
    rows: list[list[str]] = []
    for cell in cells:
        for label, name, digits in _FIGURES:
            a, b = getattr(cell.ours, name), getattr(cell.guidellm, name)
            truth_a, truth_b = getattr(cell.server_ours, name), getattr(cell.server_guidellm, name)
            diff = pct_diff(a, b)
            verdict = "-" if diff is None else ("yes" if abs(diff) <= 3.0 else "NO")
            rows.append(
                [
                    str(cell.concurrency),
                    label,
                    _fmt(a, digits),
                    _fmt(b, digits),
                    _fmt_pct(diff),
                    verdict,
                    f"{_fmt(truth_a, digits)} ({_fmt_pct(pct_diff(a, truth_a))})",
                    f"{_fmt(truth_b, digits)} ({_fmt_pct(pct_diff(b, truth_b))})",
                ]
            )
    return rows


AGREEMENT_HEADER = [
    "C",
    "figure",
    "ours",
    "GuideLLM",
    "ours vs GuideLLM",
    "within 3%",
    "server truth in our run (ours vs it)",
    "server truth in GuideLLM's run (GuideLLM vs it)",
]


def lag_rows(cells: Sequence[tuple[int, LagSamples, LagSamples]]) -> list[list[str]]:
    """Rows of the lag table from (streams, ours, GuideLLM) triples; p50/p99 in ms."""
    rows: list[list[str]] = []
    for streams, ours, theirs in cells:
        rows.append(
            [
                str(streams),
                f"{_fmt(percentile(ours.first_last_ms, 50))} / {_fmt(percentile(ours.first_last_ms, 99))}",
                f"{_fmt(percentile(theirs.first_last_ms, 50))} / {_fmt(percentile(theirs.first_last_ms, 99))}",
                f"{_fmt(percentile(ours.every_chunk_ms, 50))} / {_fmt(percentile(ours.every_chunk_ms, 99))}",
                f"{_fmt(percentile(ours.first_ms, 50))} / {_fmt(percentile(theirs.first_ms, 50))}",
                f"{_fmt(percentile(ours.request_path_ms, 50))} / {_fmt(percentile(theirs.request_path_ms, 50))}",
                f"{ours.matched} / {theirs.matched}",
            ]
        )
    return rows


LAG_HEADER = [
    "streams",
    "ours first+last p50 / p99 (ms)",
    "GuideLLM first+last p50 / p99 (ms)",
    "ours every chunk p50 / p99 (ms)",
    "first chunk p50 ours / GuideLLM (ms)",
    "request path p50 ours / GuideLLM (ms)",
    "requests matched ours / GuideLLM",
]


DIAGNOSTIC_HEADER = [
    "streams",
    "our client",
    "every chunk p50 / p99 (ms)",
    "first+last p50 / p99 (ms)",
    "request path p50 / p99 (ms)",
]


def diagnostic_row(streams: int, label: str, lags: LagSamples) -> list[str]:
    """One row comparing two ways of running our client on the same server."""

    def pair(values: Sequence[float]) -> str:
        return f"{_fmt(percentile(values, 50))} / {_fmt(percentile(values, 99))}"

    return [str(streams), label, pair(lags.every_chunk_ms), pair(lags.first_last_ms), pair(lags.request_path_ms)]


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A GitHub-flavoured Markdown table (numbers right-aligned after the first column)."""
    align = ["---"] + ["---:"] * (len(header) - 1)
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join(align) + " |"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def replace_section(document: str, heading: str, body: str) -> str:
    """Put `body` under the `## heading` section of a Markdown document, replacing that section's text.

    The section runs to the next heading of level 2 or higher (or the end); it is appended when absent.
    """
    marker = f"## {heading}"
    lines = document.splitlines()
    start = next((i for i, line in enumerate(lines) if line.strip() == marker), None)
    new = [marker, "", *body.strip("\n").splitlines(), ""]
    if start is None:
        prefix = document.rstrip("\n")
        return (prefix + "\n\n" if prefix else "") + "\n".join(new)
    end = next(
        (j for j in range(start + 1, len(lines)) if lines[j].startswith("## ") or lines[j].startswith("# ")),
        len(lines),
    )
    merged = lines[:start] + new + lines[end:]
    return "\n".join(merged).rstrip("\n") + "\n"


__all__ = [
    "AGREEMENT_HEADER",
    "DIAGNOSTIC_HEADER",
    "LAG_HEADER",
    "AgreementCell",
    "GuideLLMRequest",
    "LagSamples",
    "StreamSchedule",
    "ToolFigures",
    "agreement_rows",
    "diagnostic_row",
    "guidellm_benchmarks",
    "guidellm_figures",
    "guidellm_lags",
    "guidellm_requests",
    "lag_rows",
    "markdown_table",
    "our_figures",
    "our_lags",
    "parse_server_log",
    "parse_sid",
    "pct_diff",
    "percentile",
    "replace_section",
    "server_figures",
]
