"""What every declared metric must do, as one check its test calls (the metrics' conformance suite).

Why: a metric is one declaration (`specfrontier.metrics.specs`); its test should need no more than a
call to `assert_metric_works(spec)` to show that it computes in a window, combines over repeats as
declared, appears in the JSON and CSV reports where its `section` says and in the latency table when it
declares a column, and takes SLOs when declared so.
"""

from __future__ import annotations

import csv
import io
import math
from pathlib import Path

from specfrontier.analysis import load_run
from specfrontier.analysis.summary import OverRepeats
from specfrontier.metrics.declare import MetricSpec
from specfrontier.metrics.slo import parse_slo, window_goodput
from specfrontier.metrics.window import cell_metrics
from specfrontier.records import RequestRecord, RequestSpecStats
from specfrontier.report.csv_export import report_csv
from specfrontier.report.json_export import report_json
from specfrontier.report.metric_tables import latency_table
from specfrontier.store import Store

MS = 1_000_000
C = 2


def sample_window(shift_ms: int = 0) -> list[RequestRecord]:
    """A closed loop at C=2 with every kind of data a metric reads: streamed chunks with per-chunk token
    counts (one chunk of several tokens, as under speculation), spec counts, one failed request."""
    records = []
    for i in range(8):
        send = (i // C) * 400 + shift_ms
        chunks = tuple((send + 50 + 20 * k + i) * MS for k in range(6))
        records.append(
            RequestRecord(
                f"p{i}",
                send * MS,
                (send + 400) * MS,
                chunks[0],
                chunk_ns=chunks,
                chunk_tokens=(1, 3, 1, 2, 1, 1 + i % 2),
                completion_tokens=9 + i % 2,
                spec=RequestSpecStats(draft_tokens=8, accepted_tokens=3 + i % 3, verify_steps=4),
            )
        )
    records.append(RequestRecord("bad", shift_ms * MS, (shift_ms + 10) * MS, None, error="HTTP 500"))
    return records


def assert_metric_works(spec: MetricSpec, tmp_path: Path) -> None:
    """The declared metric computes, combines over repeats, shows in JSON/CSV and takes SLOs as declared."""
    window = cell_metrics(sample_window(), C)
    value = spec.window_value(window)
    assert isinstance(value, int | float) and math.isfinite(value), f"{spec.name}: {value!r} in the sample window"
    if spec.over_repeats is None:
        return
    store = Store(tmp_path / f"{spec.name}.db")
    run_id = store.create_run(engine="sim", config={"repeats": 2}, environment={})
    store.add_setting(run_id, setting_id="s", position=0, name="s", params={}, speculative=True)
    for repeat in range(2):
        store.record_cell(
            run_id,
            setting_id="s",
            workload="w",
            concurrency=C,
            repeat=repeat,
            requests=sample_window(shift_ms=repeat),
            counters=None,
            acceptance_source=None,
        )
    data = load_run(store, run_id)
    store.close()
    (cell,) = data.cells
    combined = cell.value(spec.name)
    if spec.over_repeats == "median":
        assert isinstance(combined, OverRepeats) and combined.n == 2 and combined.median is not None
        shown: float | int | None = combined.median
    else:
        assert combined == 2 * int(window.value(spec.field) or 0)
        shown = combined
    (exported,) = report_json(data)["cells"]
    header = next(csv.reader(io.StringIO(report_csv(data))))
    assert (spec.name in exported) == (spec.section is not None)
    assert (spec.name in header) == (spec.section is not None)
    if spec.section is not None:
        assert exported[spec.name] == shown
    if spec.latency is not None:
        table = latency_table(data)
        (row,) = table.rows
        assert dict(zip(table.headers, row, strict=True))[spec.latency.header] != "-", f"{spec.name}: not shown"
        assert not spec.latency.note or spec.latency.note in table.notes[0]
    if spec.slo is not None:
        (slo,) = parse_slo(f"{spec.slo.key}_p90_ms=100000")
        goodput = window_goodput([r for r in sample_window() if r.ok], [slo])
        assert goodput.good == goodput.requests and goodput.slo_met, f"{slo.key}: {goodput}"


__all__ = ["assert_metric_works", "sample_window"]
