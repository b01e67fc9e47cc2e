"""Best per concurrency, crossovers and recommendations on runs whose aggregate tok/s is set by hand."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from builders import StoredRun, steady_cell
from specfrontier.analysis import (
    Crossover,
    RunData,
    best_per_concurrency,
    crossovers,
    recommend,
    speedup,
)

MS = 1_000_000  # ns per ms

Table = dict[str, dict[int, list[int]]]
"""setting -> concurrency -> aggregate tok/s of each repeat; the first setting is the baseline."""


def _command(name: str) -> tuple[str, ...]:
    return ("/opt/llama/llama-server", "-m", "model.gguf", "--alias", name)


def _run(tmp_path: Path, table: Table) -> RunData:
    run = StoredRun(tmp_path / "s.db")
    for name, by_c in table.items():
        run.setting(name, status="ok", command=_command(name))
        for c, aggs in by_c.items():
            run.repeats(name, c, (steady_cell(c, agg) for agg in aggs))
    data = run.data()
    run.close()
    return data


# C=1: draft wins, its range [118, 122] clear of ngram's [100, 108].
# C=2: ngram wins on the median (115 vs 112) but its range [110, 125] overlaps draft's [100, 113].
# C=4: ngram beats the baseline on the median (100 vs 98) but inside the spread ([95, 105] vs [96, 99]).
MAIN: Table = {
    "baseline": {1: [80, 81, 82], 2: [90, 91, 92], 4: [96, 98, 99]},
    "ngram": {1: [100, 104, 108], 2: [110, 115, 125], 4: [95, 100, 105]},
    "draft": {1: [118, 120, 122], 2: [100, 112, 113], 4: [60, 61, 62]},
}


def test_best_per_concurrency(tmp_path: Path) -> None:
    best = {b.concurrency: b for b in best_per_concurrency(_run(tmp_path, MAIN))}
    assert sorted(best) == [1, 2, 4]

    b1 = best[1]
    assert (b1.setting, b1.aggregate_tok_s, b1.runner_up) == ("draft", 120.0, "ngram")
    assert b1.margin == pytest.approx(120 / 104 - 1)
    assert b1.beyond_spread  # 118 > 108
    assert b1.speedup_vs_baseline == pytest.approx(120 / 81)

    b2 = best[2]
    assert (b2.setting, b2.aggregate_tok_s, b2.runner_up) == ("ngram", 115.0, "draft")
    assert b2.margin == pytest.approx(115 / 112 - 1)
    assert not b2.beyond_spread  # 110 <= 113: overlapping ranges
    assert b2.speedup_vs_baseline == pytest.approx(115 / 91)

    b4 = best[4]
    assert (b4.setting, b4.runner_up) == ("ngram", "baseline")
    assert b4.margin == pytest.approx(100 / 98 - 1)
    assert not b4.beyond_spread
    assert b4.speedup_vs_baseline == pytest.approx(100 / 98)


def test_touching_ranges_are_not_beyond_spread(tmp_path: Path) -> None:
    data = _run(tmp_path, {"baseline": {1: [100, 101, 102]}, "ngram": {1: [102, 104, 106]}})
    (b,) = best_per_concurrency(data)
    assert (b.setting, b.runner_up) == ("ngram", "baseline")
    assert not b.beyond_spread  # lowest 102 is not above the runner-up's highest 102


def test_baseline_best_has_speedup_one(tmp_path: Path) -> None:
    data = _run(tmp_path, {"baseline": {1: [150, 151, 152]}, "ngram": {1: [140, 141, 142]}})
    (b,) = best_per_concurrency(data)
    assert (b.setting, b.runner_up, b.beyond_spread) == ("baseline", "ngram", True)
    assert b.speedup_vs_baseline == pytest.approx(1.0)


def test_speedup(tmp_path: Path) -> None:
    data = _run(tmp_path, MAIN)
    assert speedup(data, "draft", 1) == pytest.approx(120 / 81)
    assert speedup(data, "draft", 4) == pytest.approx(61 / 98)
    assert speedup(data, "draft", 8) is None  # not measured


def test_crossovers_report_each_flip_of_order(tmp_path: Path) -> None:
    assert crossovers(_run(tmp_path, MAIN)) == [
        # draft 120/112 over baseline 81/91 at C=1,2; baseline 98 over draft 61 at C=4; ranges clear at both ends
        Crossover(winner_low="draft", winner_high="baseline", up_to=2, from_c=4, beyond_spread=True),
        # draft 120 over ngram 104 at C=1; ngram 115 over draft 112 at C=2, ranges overlapping there
        Crossover(winner_low="draft", winner_high="ngram", up_to=1, from_c=2, beyond_spread=False),
    ]


def test_no_crossover_when_the_order_never_flips(tmp_path: Path) -> None:
    table: Table = {
        "baseline": {1: [50, 50, 50], 2: [60, 61, 62], 4: [70, 70, 70]},
        "ngram": {1: [51, 51, 51], 2: [80, 81, 82], 4: [71, 72, 90]},
    }
    assert crossovers(_run(tmp_path, table)) == []


def test_only_the_first_flip_is_reported(tmp_path: Path) -> None:
    table: Table = {
        "baseline": {1: [10, 10, 10], 2: [30, 30, 30], 4: [10, 10, 10], 8: [30, 30, 30]},
        "ngram": {1: [20, 20, 20], 2: [20, 20, 20], 4: [20, 20, 20], 8: [20, 20, 20]},
    }
    assert crossovers(_run(tmp_path, table)) == [Crossover("ngram", "baseline", 1, 2, True)]


def test_recommend_groups_consecutive_levels_with_their_command(tmp_path: Path) -> None:
    table: Table = {
        "baseline": {1: [50, 50, 50], 2: [90, 90, 90], 4: [150, 151, 152]},
        "ngram": {1: [70, 71, 72], 2: [120, 121, 122], 4: [140, 141, 142]},
    }
    ngram, base = recommend(_run(tmp_path, table))
    assert (ngram.setting, ngram.concurrency, ngram.command, ngram.beyond_spread) == (
        "ngram",
        (1, 2),
        _command("ngram"),
        True,
    )
    # speedups 121/90 = 1.34 and 71/50 = 1.42
    assert ngram.note == "1.34x-1.42x the baseline's aggregate tok/s"
    assert (base.setting, base.concurrency, base.command, base.beyond_spread) == (
        "baseline",
        (4,),
        _command("baseline"),
        True,
    )
    assert "no speculative setting beat the no-speculation baseline" in base.note


def test_recommend_prefers_the_baseline_on_a_tie_with_it(tmp_path: Path) -> None:
    draft, ngram, base = recommend(_run(tmp_path, MAIN))
    assert (draft.setting, draft.concurrency, draft.beyond_spread) == ("draft", (1,), True)
    assert draft.command == _command("draft")
    # ngram is best at C=2, beyond the baseline but tied with draft: kept, flagged as a tie
    assert (ngram.setting, ngram.concurrency, ngram.beyond_spread) == ("ngram", (2,), False)
    assert "treat as a tie" in ngram.note
    # at C=4 ngram's median win over the baseline is within the spread: the baseline is recommended
    assert (base.setting, base.concurrency, base.command) == ("baseline", (4,), _command("baseline"))
    assert "no speculative setting beat" in base.note


def test_recommend_prefers_the_baseline_even_when_it_is_not_the_runner_up(tmp_path: Path) -> None:
    # ngram 110 [100, 120] > draft 105 [100, 110] > baseline 104 [100, 115]: ngram's win over the baseline is
    # within the spread of repeats, so speculation is not worth its cost here.
    table: Table = {
        "baseline": {1: [100, 104, 115]},
        "ngram": {1: [100, 110, 120]},
        "draft": {1: [100, 105, 110]},
    }
    (rec,) = recommend(_run(tmp_path, table))
    assert (rec.setting, rec.concurrency, rec.command) == ("baseline", (1,), _command("baseline"))


def test_recommend_keeps_a_speculative_win_clear_of_the_baseline(tmp_path: Path) -> None:
    # ngram and draft tie with each other, but both are clear of the baseline: speculation stays recommended.
    table: Table = {
        "baseline": {1: [50, 51, 52]},
        "ngram": {1: [100, 110, 120]},
        "draft": {1: [100, 105, 111]},
    }
    (rec,) = recommend(_run(tmp_path, table))
    assert (rec.setting, rec.beyond_spread) == ("ngram", False)
    assert rec.note.startswith(f"{110 / 51:.2f}x the baseline's aggregate tok/s")  # one level: one figure


def test_partial_evidence_is_shown_but_never_recommended(tmp_path: Path) -> None:
    """A cell missing a repeat, and every cell of a setting whose server failed, are left out of the best
    table and the recommendation even when they are the fastest; the cells themselves stay in the run."""
    data = _run(
        tmp_path,
        {
            "base": {1: [100, 101, 99], 4: [300, 301, 299]},
            "short": {1: [200, 201]},  # one repeat missing (a crash cut it)
            "crashed": {1: [150, 151, 149], 4: [900, 901, 899]},
        },
    )
    failed = replace(data.setting("crashed"), status="failed", error="server exited with status 1 during the cell C=4")
    data = replace(data, settings=tuple(failed if s.name == "crashed" else s for s in data.settings))
    assert data.expected_repeats == 3
    assert [c.setting for c in data.incomplete_cells()] == ["short"]
    assert {c.setting for c in data.cells} == {"base", "short", "crashed"}  # shown
    assert {b.setting for b in best_per_concurrency(data.complete_evidence())} == {"base"}
    assert [(r.setting, r.concurrency) for r in recommend(data)] == [("base", (1, 4))]
