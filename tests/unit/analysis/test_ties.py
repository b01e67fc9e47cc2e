"""The tie rule and the cost order: a win inside the noise goes to the cheaper setting."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from builders import one_level_run
from specfrontier.analysis import RunData, best_per_concurrency, recommend
from specfrontier.analysis.decisions import draft_length, recommended_per_concurrency

SETTINGS: dict[str, dict[str, Any]] = {
    "baseline": {},
    "ngram-4": {"spec_type": "ngram-simple", "ngram_size_m": 4},
    "ngram-8": {"spec_type": "ngram-simple", "ngram_size_m": 8},
}


def _run(tmp_path: Path, aggs: dict[str, list[int]]) -> RunData:
    """C=1 cells: one request of `agg` tokens from 0 to 1000 ms per repeat, i.e. exactly `agg` tok/s."""
    data: RunData = one_level_run(tmp_path / "s.db", "llamacpp", SETTINGS, aggs)
    return data


def test_draft_length_reads_each_engines_parameter() -> None:
    assert draft_length({"draft_n_max": 8}) == 8
    assert draft_length({"num_speculative_tokens": 3}) == 3
    assert draft_length({"num_draft_tokens": 6, "num_steps": 3}) == 6
    assert draft_length({"num_steps": 3}) == 4  # SGLang topk-1 chain: steps + 1
    assert draft_length({"spec_type": "ngram-simple", "ngram_size_n": 3, "ngram_size_m": 16}) == 16
    # llama.cpp: each type drafts its own length (common/speculative.cpp common_speculative_n_max), draft_n_max
    # only for a draft model; unset, llama-server's default (size-m 48, ngram-mod 64; ngram-cache always 8)
    assert draft_length({"spec_type": "ngram-simple", "ngram_size_m": 16, "draft_n_max": 8}) == 16
    assert draft_length({"spec_type": "ngram-simple"}) == 48
    assert draft_length({"spec_type": "ngram-cache"}) == 8
    assert draft_length({"spec_type": "draft-simple"}) == 3
    assert draft_length({"method": "ngram"}) == math.inf  # unknown: assumed the most expensive


def test_tie_with_a_shorter_draft_goes_to_the_shorter_draft(tmp_path: Path) -> None:
    # ngram-8 105 [104, 106] best; ngram-4 104 [103, 105] overlaps it -> tie; baseline 101 [100, 102] is clear
    # of it (intervals apart and 105/101 - 1 = 4% > 1%).
    data = _run(tmp_path, {"baseline": [100, 101, 102], "ngram-4": [103, 104, 105], "ngram-8": [104, 105, 106]})
    (best,) = best_per_concurrency(data)
    assert (best.setting, best.runner_up, best.beyond_spread) == ("ngram-8", "ngram-4", False)
    (chosen,) = recommended_per_concurrency(data)
    assert (chosen.setting, chosen.aggregate_tok_s, chosen.runner_up) == ("ngram-4", 104.0, "ngram-8")
    assert chosen.speedup_vs_baseline == 104 / 101
    (rec,) = recommend(data)
    assert rec.setting == "ngram-4"
    assert "the cheaper setting is recommended" in rec.note


def test_medians_within_one_percent_are_a_tie_even_with_intervals_apart(tmp_path: Path) -> None:
    # every repeat identical: zero-width intervals, apart; 1005 / 1000 = +0.5% -> tie -> the baseline
    data = _run(tmp_path, {"baseline": [1000, 1000, 1000], "ngram-8": [1005, 1005, 1005]})
    (best,) = best_per_concurrency(data)
    assert (best.setting, best.beyond_spread) == ("ngram-8", False)
    (rec,) = recommend(data)
    assert rec.setting == "baseline"


def test_a_win_over_one_percent_with_intervals_apart_is_real(tmp_path: Path) -> None:
    # 1020 / 1000 = +2%, zero-width intervals apart: ngram-8 wins beyond the noise
    data = _run(tmp_path, {"baseline": [1000, 1000, 1000], "ngram-8": [1020, 1020, 1020]})
    (best,) = best_per_concurrency(data)
    assert (best.setting, best.beyond_spread) == ("ngram-8", True)
    (rec,) = recommend(data)
    assert (rec.setting, rec.beyond_spread) == ("ngram-8", True)
