"""Issue 39, item 9 (seen on a real SGLang run): a recommendation whose group of levels includes one where its
setting is the only cell that is evidence printed "within the spread of repeats of  (treat as a tie)" with
no name, and a speed-up ("8.20x the baseline") was printed at a level where the baseline's cell is not
evidence. A level with nothing to compare is said to be one; a ratio needs both of its cells to be evidence."""

from __future__ import annotations

import json
from pathlib import Path

from rich.console import Console

from builders import closed_loop_ms, record_ms, store_cells
from specfrontier.analysis import RunData, load_run, recommend, speedup
from specfrontier.records import RequestRecord
from specfrontier.report import print_report, report_json


def _steady(c: int, tokens: int) -> list[RequestRecord]:
    """Six rounds of C one-second requests, each replaced at once: a steady state of 5 request lifetimes."""
    return closed_loop_ms(c, 6, 1000, tokens)


def _no_steady_state(c: int, tokens: int) -> list[RequestRecord]:
    """C requests sent 100 ms apart, each 0.65 s long: never C in flight at once."""
    return [record_ms(k * 100, k * 100 + 50, k * 100 + 650, tokens) for k in range(c)]


def _run(tmp_path: Path) -> RunData:
    """baseline, ngram and spec at C = 1 and 8, one repeat each. C = 1: every cell evidence, spec 3x the
    baseline and beyond ngram. C = 8: only spec had a steady state (the SGLang run's high level)."""
    tokens = {"baseline": 10, "ngram": 20, "spec": 30}
    cells = {
        name: {1: _steady(1, n), 8: _steady(8, n) if name == "spec" else _no_steady_state(8, n)}
        for name, n in tokens.items()
    }
    store, run_id = store_cells(tmp_path / "s.db", cells, config={"repeats": 1})
    data = load_run(store, run_id)
    store.close()
    return data


def test_a_level_with_one_evidence_cell_names_why_there_is_no_tie_and_quotes_no_ratio_there(tmp_path: Path) -> None:
    data = _run(tmp_path)
    assert not data.is_evidence(data.cell("baseline", 8))  # type: ignore[arg-type]
    (rec,) = recommend(data)
    assert rec.setting == "spec" and rec.concurrency == (1, 8)
    assert "repeats of  (" not in rec.note and "of ," not in rec.note  # no empty name, ever
    assert rec.note.startswith("3.00x the baseline's aggregate tok/s at C=1; no ratio at C=8 (no baseline cell")
    assert "the only setting whose cell is evidence at C=8: nothing to compare it with there" in rec.note
    assert not rec.beyond_spread  # nothing was beaten at C=8


def test_the_speedup_table_and_json_quote_no_ratio_against_a_cell_that_is_not_evidence(tmp_path: Path) -> None:
    data = _run(tmp_path)
    assert speedup(data, "spec", 1) == 3.0
    assert speedup(data, "spec", 8) is None and speedup(data, "ngram", 8) is None  # the baseline's C=8: no evidence
    console = Console(record=True, width=240)
    print_report(data, console)
    text = console.export_text()
    table = text.split("Speedup vs baseline (baseline)", 1)[1].split("aggregate tok/s of the setting", 1)[0]
    assert "│ 1 │ 2.00x │ 3.00x │" in table and "│ 8 │     - │     - │" in table
    assert "'-': either cell missing or not evidence." in text
    exported = json.loads(json.dumps(report_json(data)))
    best = {b["concurrency"]: b for b in exported["best_per_concurrency"]}
    assert best[8]["setting"] == "spec" and best[8]["speedup_vs_baseline"] is None
    assert best[8]["runner_up"] is None
