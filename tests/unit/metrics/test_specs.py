"""The metric declarations (`metrics.specs`): every declared metric computes, combines over repeats and
shows where declared; SLO keys, comparisons and the stored digests follow from them; a declaration that
cannot work is refused; and the public shapes the core metrics lay out (JSON cell fields, CSV range
columns, table headers) are pinned.

Only the core metrics (declared in `metrics/specs.py`) are pinned by name here. A metric declared in a file
of its own (`metrics/added/`) is placed by these tests themselves and checked by its own test
(tests/unit/metrics/added/), so adding one edits nothing here.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import re
import zlib
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

import specfrontier.metrics.digest as digest_module
from metric_rules import C, assert_metric_works, sample_window
from specfrontier.analysis.compare import COMPARED
from specfrontier.analysis.summary import CellSummary, OverRepeats
from specfrontier.errors import ConfigError
from specfrontier.metrics.declare import SECTIONS, LatencyColumn, MetricSpec, SloUse
from specfrontier.metrics.digest import digest_requests, pack_digest, unpack_digest
from specfrontier.metrics.slo import parse_slo
from specfrontier.metrics.specs import (
    ADDED_METRICS,
    CELL_METRICS,
    METRICS,
    _check,
    declared_in,
    html_latency_columns,
    in_section,
    latency_columns,
    slo_uses,
    spread_metrics,
)
from specfrontier.metrics.window import CellMetrics
from specfrontier.report.csv_export import _SPREAD
from specfrontier.report.json_export import CellExport

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


CORE = frozenset(m.name for m in METRICS if m not in ADDED_METRICS)
"""The metrics `metrics/specs.py` declares: the only ones pinned by name below."""


def test_json_cell_fields_keep_their_names_order_and_descriptions() -> None:
    assert list(CellExport.model_fields) == _with_added(JSON_CELL_FIELDS)
    for section in SECTIONS:
        for m in in_section(section):
            assert CellExport.model_fields[m.name].description == m.definition
    assert [m.name for m in spread_metrics() if m.name in CORE] == [
        "per_request_tok_s_p50",
        "aggregate_tok_s",
        "ttft_p50_ms",
        "tpot_p50_ms",
        "itl_p50_ms",
        "e2e_p50_ms",
    ]


def test_csv_range_columns_and_table_headers_come_from_the_declaration() -> None:
    """The core metrics' columns, in their order; an added metric's column goes where it declares."""
    assert [name for name in _SPREAD if name in CORE] == [
        "per_request_tok_s_p50",
        "aggregate_tok_s",
        "ttft_p50_ms",
        "tpot_p50_ms",
    ]
    assert [column.header for name, column in latency_columns() if name in CORE] == [
        "TTFT ms p50/p99",
        "TPOT ms p50/p99",
        "ITL ms p50/p99",
        "chunk gap ms p50/p99",
        "tok/chunk",
        "E2E ms p50/p99",
        "out/E2E tok/s p50",
    ]
    html_headers = ["TTFT p50", "TTFT p90", "TTFT p99", "TPOT p50", "TPOT p90"]
    assert [header for name, header in html_latency_columns() if name in CORE] == html_headers
    assert [m.grid.title for m in CELL_METRICS if m.grid and m.name in CORE] == [
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


@pytest.mark.parametrize("spec", METRICS, ids=lambda m: m.name)
def test_every_declared_metric_computes_combines_and_shows(spec: MetricSpec, tmp_path: Path) -> None:
    assert_metric_works(spec, tmp_path)


def test_slo_keys_are_exactly_the_declared_ones() -> None:
    allowed = list(slo_uses())
    assert allowed[:3] == ["ttft", "tpot", "e2e"]
    percentile_metrics = {m.name.removesuffix("_p50_ms") for m in CELL_METRICS if m.name.endswith("_p50_ms")}
    assert set(allowed) <= percentile_metrics
    for name in sorted(percentile_metrics):
        key = f"{name}_p90_ms"
        if name in allowed:
            assert parse_slo(f"{key}=5")[0].key == key
            continue
        with pytest.raises(ConfigError) as info:
            parse_slo(f"{key}=5")
        message = str(info.value)
        assert "\n" not in message and f"key = {key!r}" in message and "fix:" in message
        words = re.search(r"with metric (.*);", message)
        assert words is not None and re.split(r", | or ", words.group(1)) == allowed


def test_comparisons_are_the_declared_ones() -> None:
    assert {m.compare: m.name for m in CELL_METRICS if m.compare} == COMPARED
    assert set(COMPARED) >= {"aggregate tok/s", "per-request tok/s p50", "TTFT p50 ms", "TPOT p50 ms"}


def _stored(packed: bytes) -> dict[str, object]:
    data: dict[str, object] = json.loads(zlib.decompress(packed))
    return data


def _packed(data: dict[str, object]) -> bytes:
    return zlib.compress(json.dumps(data).encode())


def test_a_digest_is_reused_only_under_the_same_declarations(monkeypatch: pytest.MonkeyPatch) -> None:
    digest = digest_requests(sample_window(), C)
    packed = pack_digest(digest)
    assert unpack_digest(packed) == digest
    # written before metrics could be declared in files of their own: no `more`, still valid without them
    old = _stored(packed)
    metrics = old["metrics"]
    assert isinstance(metrics, dict)
    more = metrics.pop("more")
    if not more:
        assert unpack_digest(_packed(old)) == digest
    # a metric declared since the digest was stored: recomputed
    monkeypatch.setattr(digest_module, "_ADDED", {*more, "new_metric_p50_ms"})
    assert unpack_digest(packed) is None
    monkeypatch.undo()
    # a metric's definition revised since: recomputed; stored under the new revision: reused
    monkeypatch.setattr(digest_module, "metric_revisions", lambda: {"ttft_p50_ms": 2})
    assert unpack_digest(packed) is None
    assert unpack_digest(pack_digest(digest)) == digest


def test_every_cell_metrics_value_is_a_declared_metric() -> None:
    metrics = digest_requests(sample_window(), C).metrics
    computed = {m.name for m in METRICS if m.compute is not None}
    spelled = {f.name for f in dataclasses.fields(CellMetrics)} - {"more"}
    assert spelled | set(metrics.more) == computed
    assert all(metrics.value(m.field) == m.window_value(metrics) for m in METRICS)


def _package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, files: dict[str, str]) -> ModuleType:
    """A package of declaration files, under a name no other test imports (modules stay cached)."""
    name = f"{name}_{tmp_path.name}"
    (tmp_path / name).mkdir()
    (tmp_path / name / "__init__.py").write_text("")
    for file, text in files.items():
        (tmp_path / name / file).write_text("from specfrontier.metrics.declare import MetricSpec\n" + text)
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.invalidate_caches()
    return importlib.import_module(name)


ONE = 'METRIC = MetricSpec("{0}", "ms", "d", lambda w: 1.0)\n'


def test_every_declaration_file_is_found_with_one_metric_or_several(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Files are read by name; `METRICS` declares several at once (a p50 and the p99 shown beside it)."""
    several = "METRICS = (" + ONE.format("b_p50_ms")[9:-1] + ", " + ONE.format("b_p99_ms")[9:-1] + ")\n"
    package = _package(tmp_path, monkeypatch, "declared_ok", {"b.py": several, "a.py": ONE.format("a_ms")})
    assert [m.name for m in declared_in(package)] == ["a_ms", "b_p50_ms", "b_p99_ms"]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("X = 1\n", r"declared_bad_\w+/x\.py: sets no METRIC = MetricSpec\(\.\.\.\) nor METRICS"),
        ("METRICS = ()\n", "sets no METRIC"),
        (ONE.format("a") + "METRICS = (METRIC,)\n", "sets both METRIC and METRICS; fix: keep one"),
    ],
)
def test_a_declaration_file_without_a_metric_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str, message: str
) -> None:
    package = _package(tmp_path, monkeypatch, "declared_bad", {"x.py": text})
    with pytest.raises(TypeError, match=message):
        declared_in(package)
