"""Optimism bias: acceptance and speed-up under the best case vs production workloads, and the best setting."""

from __future__ import annotations

import html
import json
from dataclasses import replace
from pathlib import Path

import pytest
from rich.console import Console

from builders import StoredRun, steady_cell
from specfrontier.analysis import RunData
from specfrontier.analysis.bias import optimism_bias
from specfrontier.records import SpecCounters
from specfrontier.report import print_report, report_json, report_markdown

# workload -> setting -> C -> aggregate tok/s per repeat (three repeats, ranges do not overlap across settings)
TABLE = {
    "synthetic-greedy@greedy": {
        "baseline": {1: [99, 100, 101], 4: [199, 200, 201]},
        "ngram": {1: [149, 150, 151], 4: [239, 240, 241]},
    },
    "humaneval@greedy": {
        "baseline": {1: [99, 100, 101], 4: [199, 200, 201]},
        "ngram": {1: [109, 110, 111], 4: [179, 180, 181]},
    },
}
ACCEPT = {"synthetic-greedy@greedy": (80, 100), "humaneval@greedy": (40, 100)}  # accepted, drafted per window


@pytest.fixture
def data(tmp_path: Path) -> RunData:
    run = StoredRun(tmp_path / "s.db")
    for name in ("baseline", "ngram"):
        run.setting(name, status="done", command=("llama-server", "--alias", name))
    for workload, by_setting in TABLE.items():
        accepted, drafted = ACCEPT[workload]
        for name, by_c in by_setting.items():
            read = SpecCounters(drafted, accepted, 50) if name == "ngram" else None
            for c, aggs in by_c.items():
                cells = (steady_cell(c, agg) for agg in aggs)
                run.repeats(name, c, cells, counters=[read] * len(aggs), workload=workload)
    return run.data()


def test_bias_states_acceptance_and_gain_kept_against_the_synthetic_best_case(data: RunData) -> None:
    bias = optimism_bias(data)
    assert bias is not None and bias.best_case == "synthetic-greedy@greedy" and bias.best_case_is_synthetic
    (row,) = bias.settings
    assert (row.setting, row.workload) == ("ngram", "humaneval@greedy")
    assert row.acceptance_rate == pytest.approx(0.4) and row.best_case_acceptance_rate == pytest.approx(0.8)
    assert row.acceptance_kept == pytest.approx(0.5)
    c1, c4 = row.levels
    assert (c1.speedup, c1.best_case_speedup) == (pytest.approx(1.1), pytest.approx(1.5))
    assert c1.gain_kept == pytest.approx(0.2)  # (1.1 - 1) / (1.5 - 1)
    assert c4.speedup == pytest.approx(0.9) and c4.gain_kept == pytest.approx(-0.5)


def test_the_best_setting_changes_where_the_production_gain_is_gone(data: RunData) -> None:
    bias = optimism_bias(data)
    assert bias is not None
    changes = {(b.workload, b.level): (b.best_case_setting, b.workload_setting, b.changed) for b in bias.best}
    assert changes == {
        ("humaneval@greedy", 1): ("ngram", "ngram", False),
        ("humaneval@greedy", 4): ("ngram", "baseline", True),
    }


def test_without_a_synthetic_workload_the_highest_acceptance_workload_stands_in(data: RunData) -> None:
    only_real = data.for_workload("humaneval@greedy")
    assert optimism_bias(only_real) is None  # one workload: nothing to compare
    renamed = tuple(
        replace(c, workload="gsm8k@greedy") if c.workload.startswith("synthetic") else c for c in data.cells
    )
    bias = optimism_bias(replace(data, cells=renamed))
    assert bias is not None and bias.best_case == "gsm8k@greedy" and not bias.best_case_is_synthetic


def test_reports_show_the_bias_table_and_the_best_setting_change(data: RunData) -> None:
    md = report_markdown(data)
    assert "### Optimism bias: best case synthetic-greedy@greedy vs production workloads" in md
    assert "1.10x vs 1.50x (20% of gain)" in md
    assert "humaneval@greedy C=4: baseline (best case synthetic-greedy@greedy: ngram) - CHANGES" in md
    console = Console(record=True, width=240)
    print_report(data, console)
    assert "Optimism bias" in console.export_text()
    doc = json.loads(json.dumps(report_json(data)))
    bias = doc["optimism_bias"]
    assert bias["best_case"] == "synthetic-greedy@greedy"
    assert bias["settings"][0]["acceptance_kept"] == pytest.approx(0.5)
    assert {b["level"]: b["changed"] for b in bias["best_setting"]} == {1: False, 4: True}
    assert doc["correctness_gate"]["unsafe"] == []


def test_html_report_ranks_per_workload_and_shows_the_bias(data: RunData) -> None:
    from specfrontier.report.html import report_html

    page = report_html(data)
    assert "humaneval@greedy: Aggregate tok/s" in page and "synthetic-greedy@greedy: Aggregate tok/s" in page
    assert "Optimism bias: best case synthetic-greedy@greedy" in page
    from specfrontier.report.bias import best_change_lines

    changes = best_change_lines(data)
    assert changes and all(html.escape(line, quote=False) in page for line in changes)  # the best-setting moves
