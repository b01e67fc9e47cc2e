"""JSON, Markdown and terminal reports of a hand-built run: same content as the analysis, safely escaped."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest
from rich.console import Console

from builders import back_to_back
from builders import record_ms as _record
from specfrontier.analysis import RunData, best_per_concurrency, crossovers, load_run, recommend
from specfrontier.records import RequestRecord, SpecCounters
from specfrontier.report import print_report, report_json, report_markdown
from specfrontier.store import Store

MS = 1_000_000  # ns per ms

# setting -> concurrency -> aggregate tok/s of each repeat (see tests/unit/analysis/test_decisions.py):
# draft wins C=1 clearly, ngram wins C=2 inside the spread of draft, the baseline is preferred at C=4.
TABLE = {
    "baseline": {1: [80, 81, 82], 2: [90, 91, 92], 4: [96, 98, 99]},
    "ngram": {1: [100, 104, 108], 2: [110, 115, 125], 4: [95, 100, 105]},
    "draft": {1: [118, 120, 122], 2: [100, 112, 113], 4: [60, 61, 62]},
}
PARAMS = {"baseline": {}, "ngram": {"spec_type": "ngram-simple", "ngram_size_n": 3}, "draft": {"spec_type": "draft"}}
COUNTERS = SpecCounters(draft_tokens=20, accepted_tokens=10, verify_steps=5, accepted_per_position=(6, 4))
FAILED_ERROR = "bad flag <--spec|x> rejected\nsecond line"


def _repeat(c: int, agg: int) -> list[RequestRecord]:
    """Rounds of C requests, each round sent at once and ended 1000 ms later, carrying `agg` tokens in all,
    back to back: exactly `agg` tok/s, in the steady state and over the whole window."""
    tokens = [agg // c] * c
    tokens[0] += agg % c
    return back_to_back([_record(0, 100, 1000, t) for t in tokens])


def _command(name: str) -> tuple[str, ...]:
    return ("/opt/my llama/llama-server", "-m", "model.gguf", "--alias", name)


@pytest.fixture
def data(tmp_path: Path) -> RunData:
    store = Store(tmp_path / "s.db")
    environment = {"engine_version": "b1234", "cpu": "TestCPU", "cpu_count": 4, "platform": "Linux"}
    run_id = store.create_run(engine="llamacpp", config={}, environment=environment)
    for pos, (name, by_c) in enumerate(TABLE.items()):
        store.add_setting(run_id, setting_id=name, position=pos, name=name, params=PARAMS[name], speculative=pos > 0)
        store.update_setting(run_id, name, status="ok", command=_command(name), capacity=4, startup_s=1.5)
        for c, aggs in by_c.items():
            for rep, agg in enumerate(aggs):
                store.record_cell(
                    run_id,
                    setting_id=name,
                    workload="w",
                    concurrency=c,
                    repeat=rep,
                    requests=_repeat(c, agg),
                    counters=COUNTERS if pos > 0 else None,
                    acceptance_source="metrics" if pos > 0 else None,
                )
    store.add_setting(run_id, setting_id="broken", position=9, name="broken", params={}, speculative=True)
    store.update_setting(run_id, "broken", status="failed", error=FAILED_ERROR)
    store.set_run_status(run_id, "done")
    loaded = load_run(store, run_id)
    store.close()
    return loaded


# -- JSON ------------------------------------------------------------------------------------------
CELL_KEYS = {
    "setting",
    "concurrency",
    "repeats",
    "per_request_tok_s_p50",
    "aggregate_tok_s",
    "ttft_p50_ms",
    "tpot_p50_ms",
    "acceptance_rate",
    "acceptance_length",
    "capacity",
    "errors",
}


def test_json_has_the_run_and_one_object_per_cell_equal_to_the_analysis(data: RunData) -> None:
    out = report_json(data)
    assert out["run"]["run_id"] == data.run.run_id
    assert (out["run"]["engine"], out["run"]["status"]) == ("llamacpp", "done")
    assert out["run"]["environment"]["engine_version"] == "b1234"

    cells = out["cells"]
    assert len(cells) == len(data.cells) == 9
    by_key = {(c["setting"]["name"], c["concurrency"]): c for c in cells}
    assert len(by_key) == 9
    for summary in data.cells:
        cell = by_key[(summary.setting, summary.concurrency)]
        assert set(cell) >= CELL_KEYS
        assert cell["setting"] == {"name": summary.setting, "parameters": PARAMS[summary.setting]}
        assert cell["repeats"] == summary.repeats == 3
        assert cell["per_request_tok_s_p50"] == summary.per_request_tok_s_p50.median
        assert cell["aggregate_tok_s"] == summary.aggregate_tok_s.median
        assert cell["ttft_p50_ms"] == summary.ttft_p50_ms.median
        assert cell["tpot_p50_ms"] == summary.tpot_p50_ms.median
        assert cell["acceptance_rate"] == summary.acceptance_rate
        assert cell["acceptance_length"] == summary.acceptance_length
        assert cell["capacity"] == 4
        assert (cell["requests"], cell["errors"]) == (summary.requests, 0)
        assert cell["noisy"] == summary.noisy
        spread = cell["spread"]["aggregate_tok_s"]
        assert (spread["min"], spread["median"], spread["max"]) == (
            summary.aggregate_tok_s.low,
            summary.aggregate_tok_s.median,
            summary.aggregate_tok_s.high,
        )

    ngram1 = by_key[("ngram", 1)]
    assert ngram1["aggregate_tok_s"] == 104.0
    # pooled over 3 repeats of 20 drafted / 10 accepted / 5 steps
    assert ngram1["acceptance_rate"] == pytest.approx(0.5)
    assert ngram1["acceptance_length"] == pytest.approx(3.0)
    assert by_key[("baseline", 1)]["acceptance_rate"] is None
    # [110, 115, 125]: relative MAD 5/115 = 4.3% <= 10%: one far repeat does not make the cell noisy
    assert by_key[("ngram", 2)]["noisy"] is False
    assert by_key[("ngram", 2)]["spread"]["aggregate_tok_s"]["relative_mad"] == pytest.approx(5 / 115)


def test_json_decisions_match_the_analysis(data: RunData) -> None:
    out = report_json(data)
    assert [(b["concurrency"], b["setting"], b["beyond_spread"]) for b in out["best_per_concurrency"]] == [
        (b.concurrency, b.setting, b.beyond_spread) for b in best_per_concurrency(data)
    ]
    assert [(x["wins_low"], x["wins_high"], x["up_to"], x["from"]) for x in out["crossovers"]] == [
        (x.winner_low, x.winner_high, x.up_to, x.from_c) for x in crossovers(data)
    ]
    recs = out["recommendations"]
    assert [(r["setting"], r["concurrency"]) for r in recs] == [
        (r.setting, list(r.concurrency)) for r in recommend(data)
    ]
    assert recs[0]["command"] == shlex.join(_command("draft"))
    broken = next(s for s in out["settings"] if s["name"] == "broken")
    assert (broken["status"], broken["error"], broken["command"]) == ("failed", FAILED_ERROR, None)


def test_json_is_serialisable(data: RunData) -> None:
    out = report_json(data)
    assert json.loads(json.dumps(out, allow_nan=False)) == out


# -- Markdown --------------------------------------------------------------------------------------
def _md_table(markdown: str, title: str) -> list[str]:
    """The header and body lines of the table under `### title`."""
    lines = markdown.splitlines()
    start = lines.index(f"### {title}") + 2
    end = start
    while end < len(lines) and lines[end].startswith("|"):
        end += 1
    return lines[start:end]


def test_markdown_has_seed_style_tables(data: RunData) -> None:
    md = report_markdown(data)
    table = _md_table(md, "Aggregate tok/s")
    assert table[0] == "| C | baseline | ngram | draft |"
    assert table[1] == "|---|---|---|---|"
    # medians with ±(half range / median); no '~': every relative MAD is <= 10% (ngram C=2: 5/115)
    assert table[2:] == [
        "| 1 | 81.0 ±1% | 104.0 ±4% | 120.0 ±2% |",
        "| 2 | 91.0 ±1% | 115.0 ±7% | 112.0 ±6% |",
        "| 4 | 98.0 ±2% | 100.0 ±5% | 61.0 ±2% |",
    ]
    assert [row.split(" | ")[0] for row in _md_table(md, "Per-request tok/s (p50 over requests)")[2:]] == [
        "| 1",
        "| 2",
        "| 4",
    ]
    assert _md_table(md, "TTFT p50 (ms)")[0] == "| C | baseline | ngram | draft |"
    assert _md_table(md, "Speedup vs baseline (baseline)")[2] == f"| 1 | {104 / 81:.2f}x | {120 / 81:.2f}x |"


def test_markdown_has_crossovers_and_recommendation_with_command(data: RunData) -> None:
    md = report_markdown(data)
    assert "- draft beats baseline up to C=2, loses from C=4" in md
    assert "- draft beats ngram up to C=1, loses from C=2 (within the spread" in md
    rec = md[md.index("### Recommendation") :]
    assert "- C = 1: draft (" in rec
    assert "- C = 4: baseline (no speculative setting beat" in rec
    assert f"  {shlex.join(_command('draft'))}" in rec.splitlines()
    assert "'/opt/my llama/llama-server'" in rec  # the space in the path is quoted: copy-paste safe


def test_markdown_escapes_pipes_and_angle_brackets(data: RunData) -> None:
    md = report_markdown(data)
    assert "setting broken failed: bad flag &lt;--spec\\|x&gt; rejected" in md
    assert "<--spec" not in md
    assert "second line" not in md  # only the error's first line is shown
    # every table row still has one cell per header (no stray unescaped '|')
    for title in ("Aggregate tok/s", "Settings: capacity, startup, acceptance", "Best setting per concurrency"):
        header, *rows = _md_table(md, title)
        widths = {len(re.split(r"(?<!\\)\|", row)) for row in rows}
        assert widths == {len(re.split(r"(?<!\\)\|", header))}, title


# -- Terminal --------------------------------------------------------------------------------------
def test_terminal_report_shows_tables_crossovers_and_recommendation(data: RunData) -> None:
    console = Console(record=True, width=200)
    print_report(data, console)
    text = console.export_text()
    lines = [line.rstrip() for line in text.splitlines()]
    assert f"run {data.run.run_id}" in text
    for title in (
        "Per-request tok/s (p50 over requests)",
        "Aggregate tok/s",
        "TTFT p50 (ms)",
        "Speedup vs baseline (baseline)",
        "Settings: capacity, startup, acceptance",
        "Best setting per concurrency",
        "Crossovers",
        "Recommendation",
    ):
        assert title in lines, title  # whole, on its own line
    # notes are printed whole, not wrapped to the width of a narrow table
    assert (
        "aggregate tok/s of the setting / aggregate tok/s of the no-speculation baseline at the same C (medians); "
        "'-': either cell missing or not evidence." in lines
    )
    assert re.search(r"115\.0 ±7%(?! ~)", text)
    assert "draft beats baseline up to C=2, loses from C=4" in text
    assert "C = 1: draft (" in text
    assert "C = 4: baseline (no speculative setting beat" in text
    assert shlex.join(_command("draft")) in text
    assert "setting broken failed: bad flag <--spec|x> rejected" in text  # literal, not eaten as markup


def test_reports_of_a_run_without_any_measured_cell(tmp_path: Path) -> None:
    store = Store(tmp_path / "s.db")
    run_id = store.create_run(engine="llamacpp", config={}, environment={})
    store.add_setting(run_id, setting_id="baseline", position=0, name="baseline", params={}, speculative=False)
    store.update_setting(run_id, "baseline", status="failed", error="exit 1")
    data = load_run(store, run_id)
    store.close()
    out = report_json(data)
    assert (out["cells"], out["best_per_concurrency"], out["recommendations"]) == ([], [], [])
    markdown = report_markdown(data)
    assert "- setting baseline failed: exit 1" in markdown
    assert "Nothing to recommend: no cell was measured" in markdown
    console = Console(record=True, width=120)
    print_report(data, console)
    text = console.export_text()
    assert "setting baseline failed: exit 1" in text
    assert "nothing to recommend: no cell was measured" in text


def test_per_position_acceptance_is_pooled_per_setting(data: RunData) -> None:
    # COUNTERS in each of 9 cells: positions (6, 4) over 5 verification steps -> 1.2 and 0.8 per step.
    settings = {s["name"]: s for s in report_json(data)["settings"]}
    assert settings["draft"]["acceptance_per_position"] == pytest.approx([6 / 5, 4 / 5])
    assert settings["baseline"]["acceptance_per_position"] == []
    assert "1.20 0.80" in report_markdown(data)
