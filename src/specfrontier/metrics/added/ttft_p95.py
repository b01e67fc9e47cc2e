"""TTFT p95: the 95th percentile of time to first token over a window's ok requests, median over repeats.

Per ok request, TTFT = arrival of the first content chunk that carries generated text - the request's
send (`metrics.per_request.request_ttft_ms`, the same value as in TTFT p50, p90 and p99); a request whose
stream carried no text has none and is left out, and failed requests are left out, as for every latency
figure. Over one window: numpy's linear-interpolation percentile of those values
(`metrics.per_request.percentile`); over the cell's repeats: their median. Shown in the JSON cell and the
CSV row (detail section) and as the latency table's "TTFT ms p95" column.

Why: p95 is where a TTFT target is most often stated, and the tables had p50 and p99 only (p90 in HTML):
GuideLLM reports p95 of `time_to_first_token_ms` (its `Percentiles.p95`, schemas/statistics.py
`Percentiles.from_pdf`: `searchsorted` on the cumulative share, side "left", i.e. the smallest value whose
cumulative share reaches 95 %, so on few requests it can differ from this interpolated figure), vLLM's
`bench serve` prints it with `--metric-percentiles 95` (`percentiles_ttft_ms`), and BentoML's
llm-optimizer takes `ttft:p95<...` constraints (second-hand: ../shared/reference/anchors.md, section K).
An SLO on it needs nothing here: `--slo ttft_p95_ms=...` already targets any percentile of TTFT.
"""

from __future__ import annotations

from specfrontier.metrics.declare import LatencyColumn, MetricSpec
from specfrontier.metrics.per_request import percentile

METRIC = MetricSpec(
    "ttft_p95_ms",
    "ms",
    "Median over repeats of p95 TTFT (ms).",
    lambda w: percentile(w.ttft_ms, 95),
    section="detail",
    latency=LatencyColumn(8, "TTFT ms p95", 0, note="TTFT p95 = the 95th percentile of the same TTFTs"),
)
