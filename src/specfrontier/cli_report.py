"""`report` formats and the HTML file `tune` writes next to its store: kept out of cli.py (a shared hotspot).

Why `tune` writes HTML by itself: the report people look at should exist without a second command, next
to the results it was drawn from (`<store stem>-<run id>.html`).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path

from rich.console import Console
from rich.markup import escape

from specfrontier.analysis import RunData, load_run
from specfrontier.analysis.compare import Comparison
from specfrontier.report import print_report, report_json, report_markdown
from specfrontier.report.csv_export import report_csv
from specfrontier.slo import Slo
from specfrontier.store import Store

FORMATS = ("terminal", "markdown", "json", "csv", "html")


def run_report(
    store: Store, run_id: str, fmt: str, output: Path | None, console: Console, slos: Sequence[Slo] = ()
) -> None:
    """Render one stored run in `fmt` to `output` (stdout when None; HTML: next to the store when None);
    with `slos`, goodput under them is added (docs/metrics.md)."""
    from specfrontier.report.html import default_html_path, write_html  # matplotlib: only when drawing

    if fmt == "html":
        loaded = load_run(store, run_id, slos) if slos else None
        path = write_html(store, run_id, output or default_html_path(store.path, run_id), loaded)
        console.print(f"HTML report: {escape(str(path))}")
        return
    data = load_run(store, run_id, slos)
    if fmt == "terminal":
        if output is None:
            print_report(data, console)
        else:
            with output.open("w", encoding="utf-8") as fh:
                print_report(data, Console(file=fh, width=160))
        return
    if fmt == "json":
        text = json.dumps(report_json(data), indent=2) + "\n"
    elif fmt == "csv":
        text = report_csv(data)
    else:
        text = report_markdown(data)
    if output:
        output.write_text(text, encoding="utf-8")
    else:
        sys.stdout.write(text)


def write_tune_html(store: Store, run_id: str, data: RunData, console: Console) -> Path:
    """After `tune`: the HTML report next to the store, and its path printed."""
    from specfrontier.report.html import default_html_path, write_html

    path = write_html(store, run_id, default_html_path(store.path, run_id), data)
    console.print(f"HTML report: {escape(str(path))}")
    return path


def write_compare_html(cmp: Comparison, path: Path, console: Console) -> Path:
    """`compare --format html`: the comparison page, written whole then renamed, and its path printed."""
    from specfrontier.report.compare_html import compare_html

    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(compare_html(cmp), encoding="utf-8")
    tmp.replace(path)
    console.print(f"HTML comparison: {escape(str(path))}")
    return path


__all__ = ["FORMATS", "run_report", "write_compare_html", "write_tune_html"]
