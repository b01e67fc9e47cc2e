"""Sweep progress: ETA from the pace so far, JSON-lines events, the live view, failed settings."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from rich.console import Console

from builders import record_ms
from specfrontier.cli.progress import SweepProgress, planned_cells, progress_mode
from specfrontier.config.load import parse_config
from specfrontier.engines import Capacity
from specfrontier.metrics.window import cell_metrics
from specfrontier.records import SpecCounters
from specfrontier.runs.cell import CellDone
from specfrontier.store import Store


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Named:
    def __init__(self, name: str) -> None:
        self.name = name


def _cell(setting: str, c: int, repeat: int) -> CellDone:
    metrics = cell_metrics([record_ms(0, 100, 1000, 33)])
    return CellDone(setting, c, repeat, metrics, SpecCounters(10, 5, 5))


def test_eta_is_the_mean_pace_times_the_cells_left() -> None:
    clock = Clock()
    progress = SweepProgress(Console(file=io.StringIO()), "lines", 6, clock=clock)
    assert progress.eta_s() is None
    clock.now += 10
    progress.on_cell(_cell("a", 1, 0))
    progress.on_cell(_cell("a", 2, 0))
    assert progress.eta_s() == pytest.approx(10 / 2 * 4)


def test_jsonl_mode_writes_one_parseable_event_per_line() -> None:
    out = io.StringIO()
    clock = Clock()
    progress = SweepProgress(Console(file=io.StringIO()), "jsonl", 4, per_setting_cells=2, out=out, clock=clock)
    events = progress.events()
    assert events.on_setting_start and events.on_setting_ready and events.on_cell_done and events.on_setting_failed
    events.on_setting_start(Named("a"), ["/x/llama-server", "--port", "1"])
    events.on_setting_ready(Named("a"), 1.5, Capacity(4, "props"))
    clock.now += 4
    events.on_cell_done(_cell("a", 1, 0))
    events.on_setting_failed(Named("a"), "crashed\nlog")
    progress.finished("run1", Path("r.html"))
    lines = [json.loads(x) for x in out.getvalue().splitlines()]
    assert [x["event"] for x in lines] == ["setting_start", "setting_ready", "cell_done", "setting_failed", "run_done"]
    cell = lines[2]
    assert (cell["setting"], cell["concurrency"], cell["done"], cell["total"]) == ("a", 1, 1, 4)
    assert cell["aggregate_tok_s"] == pytest.approx(33.0) and cell["acceptance_rate"] == 0.5
    assert cell["eta_s"] == pytest.approx(12.0)
    assert progress.total == 3  # the failed setting's other cell will not be measured
    assert lines[-1] == {"event": "run_done", "run_id": "run1", "html": "r.html", "cells": 1}


def test_settings_side_by_side_say_where_they_run_and_a_failure_skips_only_its_own_cells() -> None:
    out = io.StringIO()
    progress = SweepProgress(Console(file=io.StringIO()), "jsonl", 6, per_setting_cells=3, out=out, clock=Clock())
    events = progress.events()
    assert events.on_setting_placed is not None
    where = "node 0123abcd, 4 GPU(s) NVIDIA H200, 570.86"
    events.on_setting_placed(Named("a"), where)
    events.on_setting_placed(Named("b"), "node 4567ef01")
    events.on_cell_done(_cell("a", 1, 0))
    events.on_cell_done(_cell("b", 1, 0))
    events.on_cell_done(_cell("a", 2, 0))  # cells of the two settings interleave
    events.on_setting_failed(Named("b"), "node lost")
    lines = [json.loads(x) for x in out.getvalue().splitlines()]
    assert lines[0] == {
        "event": "setting_placed",
        "setting": "a",
        "where": "node 0123abcd, 4 GPU(s) NVIDIA H200, 570.86",
    }
    assert progress.total == 4  # b's two unmeasured cells leave the plan; a's do not


def test_lines_mode_prints_each_cell_with_its_plan_and_quiet_prints_nothing() -> None:
    console = Console(file=io.StringIO(), width=200)
    progress = SweepProgress(console, "lines", 2)
    progress.on_cell(_cell("steps2", 16, 1))
    text = console.file.getvalue()  # type: ignore[attr-defined]
    assert "setting steps2" in text
    assert "C=16 repeat 2: 33.0 tok/s aggregate, 35.6 tok/s per request, accept 50%  [1/2 cells, ETA ~0:00]" in text
    assert progress_mode(True, "jsonl", console) == "quiet"
    quiet = SweepProgress(console, "quiet", 2).events()
    assert quiet.on_cell_done is None


def test_live_view_shows_the_bar_eta_and_finished_cells() -> None:
    console = Console(file=io.StringIO(), force_terminal=True, width=120)
    assert progress_mode(False, None, console) == "live"
    clock = Clock()
    with SweepProgress(console, "live", 3, clock=clock) as progress:
        clock.now += 30
        progress.on_cell(_cell("ngram", 4, 0))
        text = Console(file=io.StringIO(), width=120)
        text.print(progress._render())
    shown = text.file.getvalue()  # type: ignore[attr-defined]
    assert "1/3 cells" in shown and "ETA ~1:00" in shown and "now: ngram" in shown
    assert "ngram" in shown and "33.0" in shown and "50%" in shown


def test_planned_cells_subtracts_what_a_resumed_run_already_stored(tmp_path: Path) -> None:
    config = parse_config(
        {
            "concurrency": [1, 2],
            "repeats": 3,
            "settings": [{"name": "baseline"}, {"name": "b", "spec_type": "ngram-simple"}],
        },
        source="test",
    )
    assert planned_cells(config) == 2 * 3 * 2
    store = Store(tmp_path / "s.db")
    run_id = store.create_run(engine="llamacpp", config={}, environment={})
    store.add_setting(run_id, setting_id="baseline", position=0, name="baseline", params={}, speculative=False)
    store.record_cell(
        run_id, setting_id="baseline", workload="w", concurrency=1, repeat=0,
        requests=[record_ms(0, 10, 100, 5)], counters=None, acceptance_source=None,
    )  # fmt: skip
    assert planned_cells(config, store, run_id) == 11
    store.close()


def test_planned_cells_count_the_schedule_that_verify_schedule_measures_after_the_search() -> None:
    ladder = [{"name": "no-spec"}, *({"name": f"s{d}", "algorithm": "EAGLE3", "num_steps": d} for d in (1, 2, 3))]
    data = {"engine": {"name": "sim"}, "concurrency": [1, 4, 16], "repeats": 1, "settings": ladder}
    without = planned_cells(parse_config(data, source="test"))
    with_schedule = planned_cells(parse_config({**data, "verify_schedule": True}, source="test"))
    assert (without, with_schedule) == (4 * 3, 5 * 3)  # '[13/12 cells]' before: the schedule was not planned


def test_the_provisional_answer_is_printed_emitted_and_kept_in_the_live_view() -> None:
    out = io.StringIO()
    progress = SweepProgress(Console(file=io.StringIO()), "jsonl", 6, per_setting_cells=3, out=out, clock=Clock())
    progress.events().on_provisional(["C=1: baseline (no speculative setting beat ...)"])  # type: ignore[misc]
    (event,) = [json.loads(line) for line in out.getvalue().splitlines()]
    assert event["event"] == "provisional_answer" and event["recommendations"][0].startswith("C=1: baseline")
    lines = io.StringIO()
    plain = SweepProgress(Console(file=lines, width=200), "lines", 6, clock=Clock())
    plain.on_provisional(["C=1, C=2: ngram-8 (1.30x the baseline's aggregate tok/s)"])
    assert "provisional answer" in lines.getvalue() and "C=1, C=2: ngram-8 (1.30x" in lines.getvalue()
    live = SweepProgress(Console(file=io.StringIO(), width=200), "live", 6, clock=Clock())
    live.on_provisional(["C=4: baseline"])
    shown = Console(file=io.StringIO(), width=200)
    shown.print(live._render())
    assert "provisional: C=4: baseline" in shown.file.getvalue()  # type: ignore[attr-defined]


def test_cells_dropped_by_the_sequential_rule_leave_the_plan_and_the_eta() -> None:
    out = io.StringIO()
    progress = SweepProgress(Console(file=io.StringIO()), "jsonl", 27, out=out, clock=Clock())
    progress.events().on_cells_dropped(6)  # type: ignore[misc]
    assert progress.total == 21
    assert json.loads(out.getvalue().splitlines()[-1]) == {"event": "cells_dropped", "cells": 6, "total": 21}


def test_a_module_launch_names_its_interpreter() -> None:
    out = io.StringIO()
    progress = SweepProgress(Console(file=out, width=200), "lines", 2, heartbeat_s=0)
    argv = ["/opt/venv-vllm/bin/python", "-m", "vllm.entrypoints.openai.api_server", "--port", "1"]
    progress.on_start(Named("ngram-k2"), argv)
    progress.on_start(Named("baseline"), ["/x/bin/llama-server", "--port", "1"])
    text = out.getvalue()
    assert "launching /opt/venv-vllm/bin/python -m vllm.entrypoints.openai.api_server" in text  # was "-m vllm..."
    assert "launching llama-server" in text


@pytest.mark.parametrize("mode", ["lines", "jsonl"])
def test_a_slow_launch_prints_a_heartbeat_until_ready_in_human_modes_only(mode: str) -> None:
    import threading

    out, events = io.StringIO(), io.StringIO()
    clock = Clock()
    progress = SweepProgress(Console(file=out, width=200), mode, 2, out=events, clock=clock, heartbeat_s=0.01)
    ticked = threading.Event()
    real_line = progress._line

    def line(markup: str) -> None:
        real_line(markup)
        if "still launching" in markup:
            ticked.set()

    progress._line = line  # type: ignore[method-assign]
    with progress:
        progress.on_start(Named("ngram-k4"), ["/venv/bin/python", "-m", "vllm.entrypoints.openai.api_server"])
        clock.now += 95
        assert ticked.wait(5 if mode == "lines" else 0.3) is (mode == "lines")
        progress.on_ready(Named("ngram-k4"), 95.0, Capacity(4, "launched"))
        after_ready = out.getvalue()
        clock.now += 30
        ticked.clear()
        assert not ticked.wait(0.1)  # ready: the heartbeat stopped
    if mode == "lines":
        assert "still launching ngram-k4: 1:35 since launch, waiting for the server to answer its health check" in (
            after_ready
        )
        assert out.getvalue().count("still launching") == after_ready.count("still launching")
    else:
        assert "still launching" not in out.getvalue() + events.getvalue()


def test_the_drift_reference_joins_the_plan_and_its_cells_say_what_they_are() -> None:
    """Issue 39, item 10: the end-of-run reference adds its cells to the plan when it starts, and its cells
    read 'drift reference', not 'repeat 0'."""
    console = Console(file=io.StringIO(), width=200)
    progress = SweepProgress(console, "lines", 4)
    events = progress.events()
    assert events.on_reference_start is not None and events.on_cell_done is not None
    events.on_reference_start(Named("baseline"), 2)  # type: ignore[arg-type]
    assert progress.total == 6
    events.on_cell_done(_cell("baseline", 1, -1))
    text = console.file.getvalue()  # type: ignore[attr-defined]
    assert "drift reference: baseline once more, at every level, on one more launch" in text
    assert "C=1 drift reference: " in text and "repeat 0" not in text
    assert progress.rows[-1][2] == "ref"
