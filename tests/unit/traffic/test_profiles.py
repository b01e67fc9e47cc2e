"""Traffic profiles read from files (issue 33): a query_range JSON recorded from the real vLLM on the CPU while
`specfrontier bench` drove it, checked against the histogram computed here by hand from the raw samples;
CSV and YAML histograms and series; uneven scrapes and several series time-weighted."""

from __future__ import annotations

import json
import statistics
from collections import defaultdict
from pathlib import Path

import pytest

from specfrontier.traffic import read_profile

RECORDING = Path(__file__).resolve().parents[2] / "data" / "vllm_running_query_range.json"
"""Recorded by scripts/record_vllm_traffic.py: vLLM 0.32.0 (CPU, SmolLM2-135M, VLLM_CPU_KVCACHE_SPACE=1,
--max-num-seqs 8) driven by `specfrontier bench --url ... --concurrency 1,2,4,8 --cell-duration 8`, its
/metrics scraped every 0.5 s by scripts/record_running.py (no Prometheus server here) into query_range JSON."""


def _by_hand(path: Path) -> dict[int, float]:
    """Each sample holds until the next; the last for the median step; shares of the total time."""
    body = json.loads(path.read_text())
    time_at: dict[int, float] = defaultdict(float)
    for series in body["data"]["result"]:
        points = sorted((float(t), round(float(v))) for t, v in series["values"])
        gaps = [points[i + 1][0] - points[i][0] for i in range(len(points) - 1)]
        gaps.append(statistics.median(gaps))
        for (_, level), gap in zip(points, gaps, strict=True):
            time_at[level] += gap
    total = sum(time_at.values())
    return {level: t / total for level, t in sorted(time_at.items())}


def test_the_vllm_recording_reads_as_its_hand_computed_histogram() -> None:
    body = json.loads(RECORDING.read_text())
    assert body["data"]["resultType"] == "matrix"
    assert body["data"]["result"][0]["metric"]["__name__"] == "vllm:num_requests_running"
    hand = _by_hand(RECORDING)
    assert set(hand) >= {0, 1, 2, 4}  # idle before and after, and the bench's levels
    profile = read_profile(RECORDING)
    assert profile.kind == "concurrency"
    assert profile.source == "query_range vllm:num_requests_running"
    assert profile.samples == len(body["data"]["result"][0]["values"])
    assert profile.level_shares() == pytest.approx(hand)
    assert profile.idle_share == pytest.approx(hand[0])


def test_uneven_scrapes_are_time_weighted_and_series_pooled(tmp_path: Path) -> None:
    """C = 2 for 3 s then C = 6 for 1 s (scraped 3 times in it) in one series; C = 1 throughout in another."""
    first = [[0, "2"], [3, "6"], [3.5, "6"], [4, "6"]]  # steps 3, 0.5, 0.5; last: median 0.5
    second = [[0, "1"], [2, "1"], [4, "1"]]  # steps 2, 2; last: 2
    body = {
        "status": "success",
        "data": {
            "resultType": "matrix",
            "result": [
                {"metric": {"__name__": "sglang:num_running_reqs", "tp_rank": "0"}, "values": first},
                {"metric": {"__name__": "sglang:num_running_reqs", "tp_rank": "1"}, "values": second},
            ],
        },
    }
    path = tmp_path / "q.json"
    path.write_text(json.dumps(body))
    profile = read_profile(path)
    assert profile.level_shares() == pytest.approx({1: 6 / 10.5, 2: 3 / 10.5, 6: 1.5 / 10.5})
    assert profile.seconds == pytest.approx(10.5)


def test_csv_series_yaml_and_csv_histograms(tmp_path: Path) -> None:
    series = tmp_path / "running.csv"
    series.write_text("timestamp,running\n0,0\n10,4\n40,1.6\n")  # 10 s idle, 30 s at 4, the last (1.6 -> 2) 20 s
    assert read_profile(series).level_shares() == pytest.approx({0: 10 / 60, 4: 30 / 60, 2: 20 / 60})
    hist = tmp_path / "day.csv"
    hist.write_text("concurrency,share\n1,6\n16,2\n")  # hours: normalised
    assert read_profile(hist).level_shares() == pytest.approx({1: 0.75, 16: 0.25})
    yaml_hist = tmp_path / "day.yaml"
    yaml_hist.write_text("rate_req_s:\n  0.5: 3\n  4: 1\n")
    profile = read_profile(yaml_hist)
    assert profile.kind == "rate" and dict(profile.shares) == pytest.approx({0.5: 0.75, 4.0: 0.25})
