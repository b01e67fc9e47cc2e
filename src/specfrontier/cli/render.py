"""Rendering shared by the commands: a stored run in any report format, the HTML pages `tune` and
`compare` write, and a comparison printed on the terminal."""

from __future__ import annotations

import io
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console
from rich.markup import escape

from specfrontier.cli.app import (
    console,
)
from specfrontier.store import Store
from specfrontier.textfiles import check_output_path, write_text_atomic

if TYPE_CHECKING:  # annotations only: each command imports what it runs when it runs (a light --help)
    from specfrontier.analysis import RunData
    from specfrontier.analysis.compare import Comparison
    from specfrontier.metrics.slo import Slo

FORMATS = ("terminal", "markdown", "json", "csv", "html")
SUFFIXES = {"terminal": "txt", "markdown": "md", "json": "json", "csv": "csv", "html": "html"}
"""File suffix of each format, for the file name suggested when `-o` names a directory."""


def run_report(
    store: Store,
    run_id: str,
    fmt: str,
    output: Path | None,
    console: Console,
    slos: Sequence[Slo] = (),
    traffic: Path | None = None,
) -> None:
    """Render one stored run in `fmt` to `output` (stdout when None; HTML: next to the store when None);
    with `slos`, goodput under them is added (docs/metrics.md); with `traffic`, the answer for that load
    profile (docs/traffic.md: terminal, markdown and html)."""
    from specfrontier.analysis import load_run
    from specfrontier.report import print_report

    if output is not None:
        check_output_path(output, "-o", example=f"report.{SUFFIXES[fmt]}")
    answer = None
    if traffic is not None:
        from specfrontier.traffic import traffic_answer

        answer = traffic_answer(store, run_id, traffic, slos)  # a bad profile fails before anything is written
    if fmt == "html":
        from specfrontier.report.html import default_html_path, write_html  # matplotlib: only when drawing

        loaded = load_run(store, run_id, slos) if slos else None
        path = write_html(store, run_id, output or default_html_path(store.path, run_id), loaded, traffic=answer)
        console.print(f"HTML report: {escape(str(path))}")
        return
    data = load_run(store, run_id, slos)
    extra = ""
    if answer is not None:
        from specfrontier.report.traffic import traffic_text

        extra = traffic_text(answer, markdown=fmt == "markdown")
    if fmt == "terminal" and output is None:
        print_report(data, console)
        sys.stdout.write(extra)
    elif output is not None:
        write_text_atomic(output, _text(data, fmt) + extra)
    else:
        sys.stdout.write(_text(data, fmt) + extra)


def _text(data: RunData, fmt: str) -> str:
    """A non-HTML report as one string, so a file gets it whole (tmp file + rename) or not at all."""
    from specfrontier.report import print_report, report_json, report_markdown
    from specfrontier.report.csv_export import report_csv

    if fmt == "terminal":
        buffer = io.StringIO()
        print_report(data, Console(file=buffer, width=160))
        return buffer.getvalue()
    if fmt == "json":
        return json.dumps(report_json(data), indent=2) + "\n"
    if fmt == "csv":
        return report_csv(data)
    return report_markdown(data)


def write_tune_html(store: Store, run_id: str, data: RunData, console: Console) -> Path:
    """After `tune`: the HTML report next to the store, and its path printed."""
    from specfrontier.report.html import default_html_path, write_html

    path = write_html(store, run_id, default_html_path(store.path, run_id), data, what="HTML report")
    console.print(f"HTML report: {escape(str(path))}")
    return path


def write_compare_html(cmp: Comparison, path: Path, console: Console) -> Path:
    """`compare --format html`: the comparison page, written whole then renamed, and its path printed."""
    from specfrontier.report.compare_html import compare_html

    check_output_path(path, "-o", example="comparison.html")
    write_text_atomic(path, compare_html(cmp))
    console.print(f"HTML comparison: {escape(str(path))}")
    return path


def print_comparison(cmp: Comparison) -> None:
    from specfrontier.report.compare import comparison_commands, comparison_summary, comparison_tables
    from specfrontier.report.terminal import print_table

    for table in comparison_tables(cmp):
        console.print()
        print_table(table, console)
    console.print()
    for line in comparison_summary(cmp):
        console.print(f"  {escape(line)}")
    for headline, command, note in comparison_commands(cmp):
        console.print(f"  {escape(headline)}")
        console.print(f"    {escape(command)}", soft_wrap=True)
        if note:
            console.print(f"    ({escape(note)})", soft_wrap=True)
