"""The per-cell metric declaration (`metrics.specs`) against the places that still spell metrics out, and the
public shapes it lays out (JSON cell fields, CSV range columns, table headers), pinned."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path
from typing import Any

import pytest

import specfrontier.report
from specfrontier.analysis.summary import CellSummary, OverRepeats
from specfrontier.metrics.declare import SECTIONS, LatencyColumn, MetricSpec, SloUse
from specfrontier.metrics.specs import (
    ADDED_METRICS,
    CELL_METRICS,
    _check,
    html_latency_columns,
    in_section,
    latency_columns,
    spread_metrics,
)
from specfrontier.report.csv_export import _SPREAD
from specfrontier.report.json_export import CellExport
from specfrontier.units import NS_PER_MS, NS_PER_S, ns_to_ms, ns_to_s, s_to_ns

JSON_CELL_FIELDS = [
    "setting",
    "workload",
    "concurrency",
    "load_mode",
    "request_rate",
    "load",
    "time_slices",
    "spikes",
    "repeats",
    "complete",
    "evidence",
    "verdict",
    "per_request_tok_s_p50",
    "per_request_tok_s_p10",
    "aggregate_tok_s",
    "ttft_p50_ms",
    "ttft_p99_ms",
    "tpot_p50_ms",
    "achieved_concurrency",
    "window_tok_s",
    "steady_tok_s",
    "steady_concurrency",
    "steady_s",
    "acceptance_rate",
    "acceptance_length",
    "acceptance_source",
    "capacity",
    "requests",
    "errors",
    "noisy",
    "client_saturated",
    "steady_too_short",
    "client_health",
    "tpot_p99_ms",
    "e2e_p50_ms",
    "e2e_p99_ms",
    "e2e_tok_s_p50",
    "itl_p50_ms",
    "itl_p99_ms",
    "itl_estimated_requests",
    "chunk_gap_p50_ms",
    "chunk_gap_p99_ms",
    "tokens_per_chunk_mean",
    "acceptance_rate_request_weighted",
    "acceptance_length_request_weighted",
    "goodput",
    "spread",
]


SECTION_ENDS = {"headline": "steady_s", "counts": "errors", "detail": "acceptance_length_request_weighted"}
"""The last field of each metric section in `JSON_CELL_FIELDS`."""


def _with_added(pinned: list[str]) -> list[str]:
    """The pinned fields with the metrics declared in files of their own (`metrics/added/`) at the end of
    their sections, by file name: adding a metric extends the JSON cell there, without an edit here."""
    fields = list(pinned)
    for section, last in SECTION_ENDS.items():
        at = fields.index(last) + 1
        fields[at:at] = [m.name for m in ADDED_METRICS if m.section == section]
    return fields


def _summary_fields(kind: str) -> set[str]:
    return {f.name for f in dataclasses.fields(CellSummary) if f.type == kind}


def test_cell_summary_spells_out_exactly_the_declared_metrics() -> None:
    # CellSummary keeps explicit fields for type checking; the declaration fills them: they must agree.
    core = [m for m in CELL_METRICS if m not in ADDED_METRICS]
    assert {m.name for m in core if m.over_repeats == "median"} == _summary_fields("OverRepeats")
    assert {m.name for m in core if m.over_repeats == "sum"} <= _summary_fields("int")


def test_json_cell_fields_keep_their_names_order_and_descriptions() -> None:
    assert list(CellExport.model_fields) == _with_added(JSON_CELL_FIELDS)
    for section in SECTIONS:
        for m in in_section(section):
            assert CellExport.model_fields[m.name].description == m.definition
    assert [m.name for m in spread_metrics()] == [
        "per_request_tok_s_p50",
        "aggregate_tok_s",
        "ttft_p50_ms",
        "tpot_p50_ms",
        "itl_p50_ms",
        "e2e_p50_ms",
    ]


def test_csv_range_columns_and_table_headers_come_from_the_declaration() -> None:
    assert _SPREAD == ("per_request_tok_s_p50", "aggregate_tok_s", "ttft_p50_ms", "tpot_p50_ms")
    assert [column.header for _, column in latency_columns()] == [
        "TTFT ms p50/p99",
        "TPOT ms p50/p99",
        "ITL ms p50/p99",
        "chunk gap ms p50/p99",
        "tok/chunk",
        "E2E ms p50/p99",
        "out/E2E tok/s p50",
    ]
    html_headers = ["TTFT p50", "TTFT p90", "TTFT p99", "TPOT p50", "TPOT p90"]
    assert [header for _, header in html_latency_columns()] == html_headers
    assert [m.grid.title for m in CELL_METRICS if m.grid] == [
        "Per-request tok/s (p50 over requests)",
        "Aggregate tok/s",
        "TTFT p50 (ms)",
    ]


def test_a_metric_reads_its_window_field() -> None:
    by_name = {m.name: m for m in CELL_METRICS}
    assert by_name["acceptance_rate_request_weighted"].field == "request_acceptance_rate_request_weighted"
    assert by_name["ttft_p50_ms"].field == "ttft_p50_ms"


def _spec(name: str, **given: Any) -> MetricSpec:
    return MetricSpec(name, "ms", "d", **({"compute": lambda w: 1.0} | given))


@pytest.mark.parametrize(
    ("specs", "message"),
    [
        ((_spec("x", compute=None, source="no_such_field"),), "reads no_such_field, which no declaration computes"),
        ((_spec("x", source="y"),), "needs exactly one of compute and source"),
        ((_spec("ttft_p50_ms"), _spec("ttft_p50_ms")), "declared twice"),
        ((_spec("ttft_p50_ms", csv_range=True),), "no spread"),
        ((_spec("ttft_p50_ms", latency=LatencyColumn(1, "h", 0, then="ttft_p99_ms")),), "not declared"),
        ((_spec("ttft_p50_ms", spread=0), _spec("ttft_p99_ms", spread=0)), "share a spread"),
        ((_spec("w", over_repeats=None, section="detail"),), "window figure only"),
        ((_spec("w", over_repeats=None, compare="w"),), "window figure only"),
        ((_spec("a", compare="x"), _spec("b", compare="x")), "share a comparison name"),
        ((_spec("a", slo=SloUse("a", lambda r: 1.0)), _spec("b", slo=SloUse("a", lambda r: 1.0))), "share a SLO key"),
        ((_spec("a", revision=0),), "revisions start at 1"),
    ],
)
def test_a_declaration_that_cannot_work_is_refused(specs: tuple[MetricSpec, ...], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        _check(specs)


def test_figure_by_name_refuses_a_count() -> None:
    fig = OverRepeats.of([1.0, 2.0, 3.0])
    fields = {f.name: fig for f in dataclasses.fields(CellSummary) if f.type == "OverRepeats"}
    facts = {"setting": "s", "concurrency": 1, "workload": "w", "repeats": 3, "requests": 9, "errors": 0}
    cell = CellSummary(**facts, counters=None, acceptance_source=None, **fields)  # type: ignore[arg-type]
    assert cell.figure("ttft_p50_ms") is fig
    with pytest.raises(KeyError, match="requests is not a figure"):
        cell.figure("requests")


def test_units_divide_as_the_float_constants_did() -> None:
    for ns in (0, 1, 999_999, 1_234_567_891, 86_400 * NS_PER_S + 7):
        assert ns_to_ms(ns) == ns / 1e6
        assert ns_to_s(ns) == ns / 1e9
    assert (NS_PER_MS, NS_PER_S, s_to_ns(0.005)) == (1_000_000, 1_000_000_000, 5_000_000)


def _report_imports() -> dict[str, set[str]]:
    """Each `specfrontier.report` module's imports of other report modules, function-level ones included."""
    package = Path(specfrontier.report.__file__).parent
    graph: dict[str, set[str]] = {}
    for path in package.glob("*.py"):
        deps: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("specfrontier.report."):
                deps.add((node.module or "").rsplit(".", 1)[1])
        graph[path.stem] = deps - {path.stem}
    return graph


def test_report_modules_import_no_cycle() -> None:
    graph = _report_imports()
    assert "metric_tables" not in graph["table_model"] and "tables" not in graph["metric_tables"]
    done: set[str] = set()

    def visit(module: str, path: tuple[str, ...]) -> None:
        assert module not in path, f"import cycle: {' -> '.join((*path, module))}"
        if module in done:
            return
        for dep in sorted(graph.get(module, ())):
            visit(dep, (*path, module))
        done.add(module)

    for module in sorted(graph):
        visit(module, ())
