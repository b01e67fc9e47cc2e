"""CSV export: one row per cell, for spreadsheets and plotting tools.

The columns are the flat part of the JSON report's cells (medians over repeats plus the lowest and
highest repeat of the metrics `metrics.specs` marks `csv_range`), so a CSV and a JSON export of the same
run always agree, and a newly declared metric gets its column without an edit here.
Nested per-repeat facts (time slices, open-loop schedule) stay in the JSON report.
"""

from __future__ import annotations

import csv
import io
from typing import Any

from specfrontier.analysis import RunData
from specfrontier.metrics.specs import CELL_METRICS
from specfrontier.report.json_export import report_json

_SPREAD = tuple(m.name for m in CELL_METRICS if m.csv_range)
"""Metrics with `<name>_min` / `<name>_max` columns (`metrics.specs`: `csv_range`)."""
_NESTED = {"setting", "load", "time_slices", "spikes", "spread"}


def _cell_text(value: Any) -> Any:
    """A text field that a spreadsheet would run as a formula (=, +, -, @) is prefixed with a quote."""
    if isinstance(value, str) and value[:1] in ("=", "+", "-", "@"):
        return "'" + value
    return value


def _row(cell: dict[str, Any]) -> dict[str, Any]:
    row: dict[str, Any] = {"run_id": None, "setting": cell["setting"]["name"]}
    row.update({k: v for k, v in cell.items() if k not in _NESTED})
    for key in _SPREAD:
        spread = cell["spread"].get(key, {})
        row[f"{key}_min"] = spread.get("min")
        row[f"{key}_max"] = spread.get("max")
    row["spikes"] = len(cell["spikes"])
    return {k: _cell_text(v) for k, v in row.items()}


def report_csv(data: RunData) -> str:
    """Every cell of the run as one CSV row (header first); empty fields are unknown values."""
    exported = report_json(data)
    rows = [_row(c) for c in exported["cells"]]
    for r in rows:
        r["run_id"] = data.run.run_id
    buf = io.StringIO()
    if not rows:
        buf.write("run_id,setting\n")
        return buf.getvalue()
    fields = list(rows[0])
    writer = csv.DictWriter(buf, fieldnames=fields, lineterminator="\n", extrasaction="ignore")
    writer.writeheader()
    writer.writerows(rows)
    return buf.getvalue()


__all__ = ["report_csv"]
