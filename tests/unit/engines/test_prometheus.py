"""The Prometheus text reader: samples, labels, and precise errors for malformed lines."""

from __future__ import annotations

import pytest

from specfrontier.engines.prometheus import counter, parse_metrics
from specfrontier.errors import EngineResponseError


def test_parses_samples_labels_and_timestamps() -> None:
    text = '# TYPE x counter\nx_total 3\ny{a="1",b="two \\"q\\""} 2.5 1700000000\n\nz NaN\n'
    samples = parse_metrics(text)
    assert [s.name for s in samples] == ["x_total", "y", "z"]
    assert samples[1].label("a") == "1"
    assert samples[1].label("b") == 'two \\"q\\"'
    assert samples[1].value == 2.5
    assert counter(samples, "x_total") == 3
    assert counter(samples, "missing") is None


def test_counter_sums_label_sets() -> None:
    samples = parse_metrics('c{p="0"} 1\nc{p="1"} 2\n')
    assert counter(samples, "c") == 3


@pytest.mark.parametrize("line", ["this is not a metric", "x_total abc"])
def test_malformed_lines_raise_with_the_line_number(line: str) -> None:
    with pytest.raises(EngineResponseError, match="line 2"):
        parse_metrics(f"ok 1\n{line}\n", source="/metrics")
