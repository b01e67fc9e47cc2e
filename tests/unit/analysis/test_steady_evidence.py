"""A closed-loop cell without a steady state is flagged ('s', a flag line with the fix, JSON) and decides
nothing; the steady table shows the steady rate beside the whole-window rate."""

from __future__ import annotations

import json
from pathlib import Path

from rich.console import Console

from builders import closed_loop_ms, record_ms, store_cells
from specfrontier.analysis import load_run, recommend
from specfrontier.records import RequestRecord
from specfrontier.report import print_report, report_json
from specfrontier.store import Store


def _steady(tokens: int) -> list[RequestRecord]:
    """Four workers, each request 1 s long and replaced at once, six rounds: C=4 in flight from 0 to 6 s,
    steady from 1 s (the first round replaced) to 6 s: 5 request lifetimes."""
    return closed_loop_ms(4, 6, 1000, tokens)


def _staggered(tokens: int) -> list[RequestRecord]:
    """Eight requests sent 100 ms apart, each 1 s long: never 8 in flight at once."""
    return [record_ms(k * 100, k * 100 + 50, k * 100 + 700, tokens) for k in range(8)]


def _run(tmp_path: Path) -> tuple[Store, str]:
    cells = {name: {4: _steady(tokens), 8: _staggered(tokens)} for name, tokens in (("baseline", 10), ("spec", 30))}
    return store_cells(tmp_path / "s.db", cells, config={"repeats": 1})


def test_a_cell_without_a_steady_state_is_flagged_and_decides_nothing(tmp_path: Path) -> None:
    store, run_id = _run(tmp_path)
    data = load_run(store, run_id)
    four, eight = data.cell("spec", 4), data.cell("spec", 8)
    assert four is not None and eight is not None
    assert not four.steady_too_short and eight.steady_too_short
    assert four.steady_concurrency.median == 4.0 and four.steady_s.median == 5.0  # 1 s to 6 s
    assert four.aggregate_tok_s.median == four.steady_tok_s.median
    assert data.is_evidence(four) and not data.is_evidence(eight)
    recommendations = recommend(data)
    assert [r.concurrency for r in recommendations] == [(4,)]  # C=8 decided nothing
    console = Console(width=240, record=True)
    print_report(data, console)
    text = console.export_text()
    assert (
        "spec C=8: no steady state to measure (never 8 requests in flight at once after the first 8 sent had "
        "been replaced); not used for recommendations" in text
    )
    assert "Fix: raise cell_duration_s (tune) / --cell-duration (bench) or rounds_per_cell" in text
    assert "Steady state vs whole window" in text
    assert "'s' marks a closed-loop cell without a steady state" in text
    cells = json.loads(json.dumps(report_json(data)))["cells"]
    flags = {(c["setting"]["name"], c["concurrency"]): c["steady_too_short"] for c in cells}
    assert flags == {("baseline", 4): False, ("baseline", 8): True, ("spec", 4): False, ("spec", 8): True}


def test_the_steady_rate_leaves_out_the_ramp_and_the_drain_the_window_rate_keeps(tmp_path: Path) -> None:
    """C=4, six rounds of 1 s requests replaced at once, but the last round drains: its requests end at
    6.0, 6.3, 6.6 and 6.9 s. The steady span runs from 1 s (the first round replaced) to 6 s (the first end
    after the last send); each request's 30 tokens are spread over its decode time (first token to end),
    so the last round counts only its share before 6 s. The window (0-6.9 s) counts ramp and drain too."""
    records = closed_loop_ms(4, 5, 1000, 30) + [record_ms(5000, 5050, 6000 + 300 * i, 30) for i in range(4)]
    store = Store(tmp_path / "t.db")
    run_id = store.create_run(engine="external", config={"repeats": 1}, environment={"engine_version": "x"})
    store.add_setting(run_id, setting_id="a", position=0, name="a", params={}, speculative=False)
    store.record_cell(
        run_id, setting_id="a", workload="w", concurrency=4, repeat=0, requests=records, counters=None,
        acceptance_source=None,
    )  # fmt: skip
    cell = load_run(store, run_id).cells[0]
    inside = 16 * 30 + sum(30 * 950 / (950 + 300 * i) for i in range(4))
    assert cell.steady_s.median == 5.0 and cell.steady_concurrency.median == 4.0
    assert cell.steady_tok_s.median is not None and abs(cell.steady_tok_s.median - inside / 5.0) < 1e-6
    assert cell.window_tok_s.median is not None and abs(cell.window_tok_s.median - 24 * 30 / 6.9) < 1e-6
    assert not cell.steady_too_short


def test_a_span_under_four_request_lifetimes_is_too_short(tmp_path: Path) -> None:
    """Four rounds: steady from 1 s to 4 s, 3 lifetimes of 1 s: too short at C=4 (its edges cut requests in
    progress); the same records labelled C=1 are a whole window, never too short."""
    store = Store(tmp_path / "l.db")
    run_id = store.create_run(engine="external", config={"repeats": 1}, environment={"engine_version": "x"})
    store.add_setting(run_id, setting_id="a", position=0, name="a", params={}, speculative=False)
    for c in (1, 4):
        store.record_cell(
            run_id, setting_id="a", workload="w", concurrency=c, repeat=0, requests=closed_loop_ms(4, 4, 1000, 30),
            counters=None, acceptance_source=None,
        )  # fmt: skip
    data = load_run(store, run_id)
    four, one = data.cell("a", 4), data.cell("a", 1)
    assert four is not None and one is not None
    assert four.steady_s.median == 3.0 and four.min_steady_s == 4.0 and four.steady_too_short
    assert not one.steady_too_short
    console = Console(width=240, record=True)
    print_report(data, console)
    assert "a C=4: no steady state to measure (steady span 3.00 s < 4.00 s (4 request lifetimes of 1.00 s))" in (
        console.export_text()
    )


def test_an_open_loop_cell_takes_its_rate_from_the_measured_span_of_its_schedule(tmp_path: Path) -> None:
    store = Store(tmp_path / "o.db")
    run_id = store.create_run(engine="external", config={"repeats": 1}, environment={"engine_version": "x"})
    store.add_setting(run_id, setting_id="a", position=0, name="a", params={}, speculative=False)
    facts = {"target_rate": 1.0, "measured_span_tok_s": 20.0, "measured_span_s": 5.0}
    store.record_cell(
        run_id, setting_id="a", workload="w", concurrency=0, repeat=0, requests=_staggered(30), counters=None,
        acceptance_source=None, request_rate=1.0, load=facts,
    )  # fmt: skip
    cell = load_run(store, run_id).cells[0]
    assert cell.aggregate_tok_s.median == 20.0  # the span's rate, every sent request's tokens counted
    assert cell.window_tok_s.median is not None and cell.window_tok_s.median != 20.0  # kept beside it
    assert not cell.steady_too_short  # the closed-loop rule does not apply
