"""benchmarks/model_public.py's core: the held-out definitions, the loss of the model's pick and the
guided-search replay, on one small table (made up for the test: not a public table)."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from types import ModuleType

import pytest

from builders import load_benchmark
from specfrontier.errors import ConfigError
from specfrontier.perfmodel import ModelCell, SettingParams

SMALL = (
    "engine,setting,method,num_speculative_tokens,adaptive,concurrency,aggregate_tok_s,per_request_tok_s,"
    "acceptance_length\n"
    """vllm,no-spec,,,,1,91.6,92.1,
vllm,no-spec,,,,8,670.8,84.4,
vllm,no-spec,,,,64,3666.4,57.7,
vllm,mtp-k1,mtp,1,,1,150.0,155.0,1.8
vllm,mtp-k1,mtp,1,,8,1100.0,140.0,1.8
vllm,mtp-k1,mtp,1,,64,4900.0,77.0,1.8
vllm,mtp-k2,mtp,2,,1,178.8,185.2,2.25
vllm,mtp-k2,mtp,2,,8,1272.8,163.3,2.29
vllm,mtp-k2,mtp,2,,64,5173.9,83.0,2.28
vllm,mtp-k2-adaptive,mtp,2,enable_adaptive_verification,1,180.0,186.0,2.3
"""
)


def _module() -> ModuleType:
    return load_benchmark("model_public")


def _cell(setting: str, steps: int, c: int, agg: float) -> ModelCell:
    return ModelCell(setting, SettingParams(steps=steps, family="mtp" if steps else "none"), c, aggregate_tok_s=agg)


def test_the_pick_loses_against_the_measured_best_and_a_refusal_is_no_claim() -> None:
    bench = _module()
    cells = (_cell("a", 0, 1, 100.0), _cell("b", 1, 1, 120.0), _cell("a", 0, 8, 700.0), _cell("b", 1, 8, 650.0))
    table = bench.Table("t", "vllm", cells, None, {"a": {}, "b": {}}, {})
    held = [
        bench.HeldOut("a", 1, "aggregate_tok_s", 100.0, 150.0, 140.0, 160.0, False),  # predicted above b
        bench.HeldOut("b", 1, "aggregate_tok_s", 120.0, 125.0, 115.0, 135.0, True),
        bench.HeldOut("a", 8, "aggregate_tok_s", 700.0, 690.0, 680.0, 700.0, False),
        bench.HeldOut("b", 8, "aggregate_tok_s", 650.0, None, None, None, True),  # refused
    ]
    one, eight = bench.picks(table, held)
    assert (one.best, one.pick) == ("b", "a")
    assert abs(one.loss_pct - 100 * 20 / 120) < 1e-9  # 16.7 % lost
    assert abs(one.stated_pct - 100 * 10 / 150) < 1e-9 and one.exceeds  # beyond its stated 6.7 %
    assert eight.pick == "a" and eight.loss_pct == 0.0 and eight.refused == ("b",) and not eight.exceeds
    # a lead within the pick's stated error is no claim (the model does not separate them): no loss counts
    held[0] = bench.HeldOut("a", 1, "aggregate_tok_s", 100.0, 130.0, 120.0, 140.0, False)  # 4 % ahead, +/-7.7 %
    one, _ = bench.picks(table, held)
    assert one.pick == "a" and not one.separated and not one.exceeds


def test_score_a_small_table(tmp_path: Path) -> None:
    bench = _module()
    path = tmp_path / "small.csv"
    path.write_text(SMALL, encoding="utf-8")
    s = bench.score(path)
    assert s.set_aside == {"mtp-k2-adaptive": s.set_aside["mtp-k2-adaptive"]} and s.cells == 9
    assert s.levels == [1, 8, 64] and s.settings == 3
    assert s.train_rms_pct is not None and s.train_rms_pct < 10
    # every figure is held out once per scheme: 9 cells x 2 figures
    assert len(s.loso) == 18 and len(s.lolo) == 18
    assert {h.setting for h in s.loso} == {"no-spec", "mtp-k1", "mtp-k2"}
    covered, n = bench._coverage(s.loso + s.lolo)
    assert 0 <= covered <= n <= 36
    assert [p.concurrency for p in s.picks_loso] == [1, 8, 64] == [p.concurrency for p in s.picks_lolo]
    g = s.guided
    assert g is not None and g.grid == 3 and g.outside == 0 and 2 <= g.launches <= 3
    assert set(g.regret_pct) == {1, 8, 64} and all(v >= 0 for v in g.regret_pct.values())
    assert "confirmed" in g.stop or "not confirmed" in g.stop
    line = bench.pooled_line([s])
    assert line.startswith("pooled over 1 tables: coverage") and "chains LOSO mean" in line
    assert bench.to_json([s])["tables"][0]["guided"]["grid"] == 3


def test_a_held_out_level_where_the_measured_best_flips_around_it_is_no_claim() -> None:
    bench = _module()
    cells = tuple(
        _cell(name, steps, c, agg)
        for name, steps, c, agg in (
            ("a", 0, 1, 100.0),
            ("b", 1, 1, 120.0),  # b best at C = 1
            ("a", 0, 8, 700.0),
            ("b", 1, 8, 650.0),  # a best at C = 8
            ("a", 0, 64, 3000.0),
            ("b", 1, 64, 2500.0),  # a best at C = 64
        )
    )
    table = bench.Table("t", "vllm", cells, None, {"a": {}, "b": {}}, {})
    held = [  # b predicted well ahead at C = 8 (beyond its +/-2 %), a well ahead at C = 64
        bench.HeldOut("a", 8, "aggregate_tok_s", 700.0, 600.0, 588.0, 612.0, False),
        bench.HeldOut("b", 8, "aggregate_tok_s", 650.0, 700.0, 686.0, 714.0, False),
        bench.HeldOut("a", 64, "aggregate_tok_s", 3000.0, 3000.0, 2940.0, 3060.0, False),
        bench.HeldOut("b", 64, "aggregate_tok_s", 2500.0, 2500.0, 2450.0, 2550.0, False),
    ]
    by_level = {p.concurrency: p for p in bench.picks(table, held, levels_held_out=True)}
    # C = 8 lies between C = 1 (b best) and C = 64 (a best): the model places no best there, and no loss counts
    assert by_level[8].pick == "b" and not by_level[8].separated and not by_level[8].exceeds
    # the same pick with the level measured for the other settings (a setting held out) is a claim, and loses
    assert bench.picks(table, held)[1].exceeds
    # C = 64 has no measured level above it: a claim, and right
    assert by_level[64].separated and by_level[64].loss_pct == 0.0


def test_a_set_aside_table_shows_what_its_fit_would_read(tmp_path: Path) -> None:
    bench = _module()
    rows = SMALL.splitlines()
    # mtp-k2 at C = 8 states tau 2.29 with per-position rates giving 1 + 0.9 + 0.8 = 2.7: 15 % apart
    rows = [r + (',"0.9;0.8"' if r.startswith("vllm,mtp-k2,mtp,2,,8,") else ",") for r in rows[1:]]
    path = tmp_path / "aside.csv"
    path.write_text(SMALL.splitlines()[0] + ",acceptance_per_position\n" + "\n".join(rows) + "\n", encoding="utf-8")
    s = bench.score(path, guided=False)
    assert s.contradictions and "1 + their sum = 2.700" in s.contradictions[0]
    assert s.train_rms_pct is None and s.loso == [] and s.lolo == []
    assert "set aside" in s.train_note and "fitted anyway: training RMS" in s.train_note


def _json_table(tmp_path: Path, set_aside: object) -> Path:
    """SMALL as a JSON table file with a `set_aside` map (what a table's source says is not a valid setting)."""
    rows = [{k: v for k, v in row.items() if v} for row in csv.DictReader(io.StringIO(SMALL))]
    for row in rows:
        for key in ("concurrency", "num_speculative_tokens"):
            if key in row:
                row[key] = int(row[key])
        for key in ("aggregate_tok_s", "per_request_tok_s", "acceptance_length"):
            if key in row:
                row[key] = float(row[key])
    path = tmp_path / "small.json"
    path.write_text(json.dumps({"engine": "vllm", "set_aside": set_aside, "cells": rows}), encoding="utf-8")
    return path


def test_a_setting_its_source_calls_invalid_is_quoted_and_never_fitted(tmp_path: Path) -> None:
    bench = _module()
    why = "a draft shorter than the block: the engine refuses it; measured with the check patched out"
    s = bench.score(_json_table(tmp_path, {"mtp-k1": why}), guided=False)
    assert s.set_aside["mtp-k1"] == f"the source: {why}" and "mtp-k2-adaptive" in s.set_aside
    assert s.cells == 6 and s.settings == 2
    assert {h.setting for h in s.loso + s.lolo} == {"no-spec", "mtp-k2"}  # never held out, never a best
    assert all(p.best != "mtp-k1" for p in s.picks_loso + s.picks_lolo)
    assert f"- set aside: mtp-k1: the source: {why}" in bench.detail_lines(s)


def test_a_set_aside_map_that_names_no_setting_of_the_table_is_refused_with_the_fix(tmp_path: Path) -> None:
    bench = _module()
    with pytest.raises(ConfigError, match=r"set_aside names mtp-k9, not settings of the table; fix: use one of"):
        bench.score(_json_table(tmp_path, {"mtp-k9": "why"}), guided=False)
    with pytest.raises(ConfigError, match=r"set_aside must map setting names to reasons"):
        bench.score(_json_table(tmp_path, ["mtp-k1"]), guided=False)
