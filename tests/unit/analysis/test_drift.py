"""Drift (a setting's first repeat vs its last, over the settings of an interleaved run) and the rules that
use it: a difference no larger than the drift is no win, and the sequential rule's stopping test."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from builders import one_level_run
from specfrontier.analysis import RunData, best_per_concurrency, recommend
from specfrontier.analysis.drift import drift_at, drift_lines, level_drifts, within_drift
from specfrontier.analysis.sequential import level_settled, open_levels

SETTINGS: dict[str, dict[str, Any]] = {
    "baseline": {},
    "ngram-8": {"spec_type": "ngram-simple", "ngram_size_m": 8},
}


def _run(tmp_path: Path, aggs: dict[str, list[int]], *, mode: str = "interleave", config: Any = None) -> RunData:
    """C=1 cells: one request of `agg` tokens in 1 s per repeat, i.e. exactly `agg` tok/s."""
    environment = {"drift_control": mode}
    data: RunData = one_level_run(tmp_path / "s.db", "llamacpp", SETTINGS, aggs, config=config, environment=environment)
    return data


def test_drift_is_the_median_first_to_last_change_over_settings_with_its_spread(tmp_path: Path) -> None:
    # both settings slowed down in the last repeat: baseline 1000 -> 800 (-20%), ngram-8 1300 -> 1000 (-23%)
    data = _run(tmp_path, {"baseline": [1000, 900, 800], "ngram-8": [1300, 1200, 1000]})
    (d,) = level_drifts(data)
    assert d.level == 1 and d.settings == 2 and d.repeats == 3
    assert d.low == pytest.approx(1000 / 1300 - 1) and d.high == pytest.approx(-0.2)
    assert d.change == pytest.approx((1000 / 1300 - 1 - 0.2) / 2)  # median of two = their mean
    assert d.beyond_noise
    lines = drift_lines(data)
    assert "cost: 4 more server launch(es)" in lines[0] and "drift_control: off" in lines[0]
    assert "BEYOND THE NOISE" in lines[1] and "-21.5%" in lines[1]


def test_settings_moving_both_ways_are_drift_within_the_noise(tmp_path: Path) -> None:
    data = _run(tmp_path, {"baseline": [1000, 1010, 1030], "ngram-8": [1100, 1090, 1080]})
    (d,) = level_drifts(data)
    assert not d.beyond_noise
    assert "within the noise" in drift_lines(data)[1]


def test_a_run_measured_setting_after_setting_has_no_drift(tmp_path: Path) -> None:
    data = _run(tmp_path, {"baseline": [1000, 900, 800], "ngram-8": [1300, 1200, 1000]}, mode="off")
    assert level_drifts(data) == [] and drift_at(data, 1) is None
    (line,) = drift_lines(data)  # no figure, but the report says the differences were not checked for drift
    assert line.startswith("drift: not controlled:") and "drift_control: interleave" in line


def test_runs_without_a_recorded_mode_or_with_one_setting_say_nothing_of_drift(tmp_path: Path) -> None:
    before = one_level_run(tmp_path / "a.db", "llamacpp", SETTINGS, {"baseline": [1000], "ngram-8": [1300]})
    alone = one_level_run(
        tmp_path / "b.db", "llamacpp", {"baseline": {}}, {"baseline": [1000]}, environment={"drift_control": "off"}
    )
    assert drift_lines(before) == [] and drift_lines(alone) == []


def test_within_drift_compares_the_relative_difference_with_the_drift_size(tmp_path: Path) -> None:
    data = _run(tmp_path, {"baseline": [1000, 900, 800], "ngram-8": [1300, 1200, 1000]})
    d = drift_at(data, 1)
    assert within_drift(1200, 1000, d)  # +20% < 21.5%
    assert not within_drift(1300, 1000, d)  # +30%
    assert not within_drift(1001, 1000, None)  # no drift measured: the spread rule alone decides


def test_a_win_beyond_the_spread_but_within_the_drift_is_withdrawn(tmp_path: Path) -> None:
    # ngram-8 [1250, 1040, 1010] vs baseline [1000, 900, 800]: ranges apart, medians +15.6% apart, but the
    # machine slowed down by 19.6% over the run (baseline -20%, ngram-8 -19.2%): no win.
    data = _run(tmp_path, {"baseline": [1000, 900, 800], "ngram-8": [1250, 1040, 1010]})
    drift = drift_at(data, 1)
    assert drift is not None and drift.size == pytest.approx((0.2 + (1 - 1010 / 1250)) / 2)
    (best,) = best_per_concurrency(data)
    assert best.setting == "ngram-8" and best.margin == pytest.approx(1040 / 900 - 1)
    assert best.margin is not None and best.margin < drift.size
    assert not best.beyond_spread and best.drift_withdrawn
    (rec,) = recommend(data)
    assert rec.setting == "baseline"  # the cheaper setting of the tie
    assert not rec.beyond_spread
    assert "DRIFT: the difference at C=1" in rec.note and "smaller than the machine's measured drift" in rec.note


def test_the_same_difference_without_drift_control_stays_a_win(tmp_path: Path) -> None:
    data = _run(tmp_path, {"baseline": [1000, 900, 800], "ngram-8": [1250, 1040, 1010]}, mode="off")
    (best,) = best_per_concurrency(data)
    assert best.beyond_spread and not best.drift_withdrawn
    (rec,) = recommend(data)
    assert rec.setting == "ngram-8" and "DRIFT" not in rec.note


def test_a_win_larger_than_the_drift_is_kept(tmp_path: Path) -> None:
    data = _run(tmp_path, {"baseline": [1000, 980, 960], "ngram-8": [1500, 1480, 1450]})
    (best,) = best_per_concurrency(data)
    assert best.beyond_spread and not best.drift_withdrawn
    (rec,) = recommend(data)
    assert rec.setting == "ngram-8" and rec.beyond_spread


def test_overlapping_ranges_after_two_repeats_settle_the_level_as_a_tie(tmp_path: Path) -> None:
    data = _run(tmp_path, {"baseline": [1000, 1040], "ngram-8": [1020, 1060]}, config={"min_repeats": 2})
    assert level_settled(data, 1) and open_levels(data) == []


def test_ranges_apart_by_less_than_their_width_need_another_repeat(tmp_path: Path) -> None:
    # baseline [1000, 1040] (width 40), ngram-8 [1060, 1100]: gap 20 < 40
    data = _run(tmp_path, {"baseline": [1000, 1040], "ngram-8": [1060, 1100]}, config={"min_repeats": 2})
    assert not level_settled(data, 1) and open_levels(data) == [1]


def test_ranges_apart_by_more_than_their_width_and_the_drift_settle_a_win(tmp_path: Path) -> None:
    data = _run(tmp_path, {"baseline": [1000, 1010], "ngram-8": [1200, 1215]}, config={"min_repeats": 2})
    assert level_settled(data, 1)


def test_a_clear_gap_inside_the_drift_is_not_settled(tmp_path: Path) -> None:
    # both settings lost ~20% between the repeats: the 2-repeat ranges are apart, but by less than the drift
    data = _run(tmp_path, {"baseline": [1000, 800], "ngram-8": [1300, 1040]}, config={"min_repeats": 2})
    assert not level_settled(data, 1)


def test_a_level_stopped_early_is_complete_evidence_with_its_peers_repeats(tmp_path: Path) -> None:
    data = _run(tmp_path, {"baseline": [1000, 1010], "ngram-8": [1200, 1215]}, config={"repeats": 3, "min_repeats": 2})
    assert data.incomplete_cells() == [] and all(data.is_evidence(c) for c in data.cells)
    short = _run(tmp_path / "b", {"baseline": [1000, 1010, 1005], "ngram-8": [1200, 1215]}, config={"min_repeats": 2})
    assert [c.setting for c in short.incomplete_cells()] == ["ngram-8"]


def test_four_repeats_compare_the_first_two_with_the_last_two(tmp_path: Path) -> None:
    # a load that came halfway: baseline 1000, 1000 -> 800, 800 (-20%); ngram-8 1300, 1100 -> 1000, 960
    data = _run(tmp_path, {"baseline": [1000, 1000, 800, 800], "ngram-8": [1300, 1100, 1000, 960]})
    (d,) = level_drifts(data)
    assert (d.low, d.high) == (pytest.approx(-0.2), pytest.approx(980 / 1200 - 1))
    assert d.beyond_noise and "repeats 1-2 vs 3-4" in drift_lines(data)[1]


def test_the_reports_show_the_drift_per_level_and_the_withdrawn_win(tmp_path: Path) -> None:
    import io

    from rich.console import Console

    from specfrontier.report import print_report, report_json, report_markdown

    data = _run(tmp_path, {"baseline": [1000, 900, 800], "ngram-8": [1250, 1040, 1010]})
    out = io.StringIO()
    print_report(data, Console(file=out, width=300))
    text = out.getvalue()
    assert "Drift" in text and "drift at C=1: -19.6%" in text and "BEYOND THE NOISE" in text
    assert "DRIFT: the difference at C=1" in text
    exported = report_json(data)
    assert exported["drift_control"] == "interleave"
    (d,) = exported["drift"]
    assert d["level"] == 1 and d["beyond_noise"] and d["low"] == pytest.approx(-0.2)
    assert exported["best_per_concurrency"][0]["drift_withdrawn"] is True
    assert "### Drift" in report_markdown(data)
