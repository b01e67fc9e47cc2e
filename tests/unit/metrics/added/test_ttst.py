"""Time to second token (`metrics/added/ttst.py`): its definition, case by case, and the checks every
declared metric passes (tests/metric_rules.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from metric_rules import assert_metric_works
from specfrontier.metrics.added.ttst import METRIC, request_ttst_ms
from specfrontier.metrics.slo import parse_slo, request_is_good
from specfrontier.metrics.window import cell_metrics
from specfrontier.records import RequestRecord

MS = 1_000_000


def _request(
    chunks_ms: tuple[int, ...], tokens: int, per_chunk: tuple[int, ...] | None = None, error: str | None = None
) -> RequestRecord:
    chunk_ns = tuple(t * MS for t in chunks_ms)
    return RequestRecord(
        "p",
        0,
        (chunks_ms[-1] + 5 if chunks_ms else 100) * MS,
        chunk_ns[0] if chunk_ns else None,
        chunk_ns=chunk_ns,
        chunk_tokens=per_chunk,
        completion_tokens=tokens,
        error=error,
    )


@pytest.mark.parametrize(
    ("request_", "expected"),
    [
        (_request((100, 130, 150), 3), 30.0),  # one token per chunk: the gap between the first two chunks
        (_request((100, 130, 150), 6, (1, 3, 2)), 30.0),  # server counts: the 2nd token came with chunk 2
        (_request((100, 130, 150), 6, (3, 2, 1)), 0.0),  # the first chunk carried both tokens
        (_request((100, 140), 2, (0, 2)), 0.0),  # a token-less first chunk: both tokens in the second
        (_request((100, 120, 170), 9), 20.0),  # counts unknown: 1 token first, the rest split evenly
        (_request((100,), 4), 0.0),  # every token in one chunk
        (_request((100,), 1), None),  # one streamed token: no second token
        (_request((), 0), None),  # no token at all
    ],
)
def test_time_from_the_first_to_the_second_token(request_: RequestRecord, expected: float | None) -> None:
    assert request_ttst_ms(request_) == expected


def test_window_p50_leaves_out_requests_without_a_second_token_and_failures() -> None:
    window = [
        _request((100, 110), 2),
        _request((100, 130), 2),
        _request((100, 160), 2),
        _request((100,), 1),
        _request((100, 900), 2, error="stream cut"),
    ]
    assert cell_metrics(window).more["ttst_p50_ms"] == 30.0
    assert cell_metrics([_request((100,), 1)]).more["ttst_p50_ms"] is None


def test_an_slo_on_ttst_counts_one_token_answers_as_good() -> None:
    (slo,) = parse_slo("ttst_p90_ms=25")
    assert request_is_good(_request((100, 120), 2), [slo])
    assert not request_is_good(_request((100, 130), 2), [slo])
    assert request_is_good(_request((100,), 1), [slo])


def test_ttst_works_as_every_declared_metric(tmp_path: Path) -> None:
    assert_metric_works(METRIC, tmp_path)
