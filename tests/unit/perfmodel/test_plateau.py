"""Capacity inferred from throughput plateaus when none is read back (aggregate-only sweeps, imported tables):
a ground truth with a hybrid-state capacity law is stripped to aggregate tok/s, and the model must find
the law, predict deeper settings at high concurrency and pick the right depth; a flat aggregate that is
compute saturation (no capacity limit) must not be read as a capacity."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest

from builders import run_cli as _cli
from specfrontier.perfmodel import ModelCell, SettingParams, fit_model
from specfrontier.perfmodel.plan import run_cells
from specfrontier.perfmodel.plateau import PLATEAU_GAIN, find_plateaus, fit_law
from specfrontier.store import Store
from specfrontier.theory.acceptance import chain_tau

ALPHA = 0.8
LEVELS = (1, 2, 4, 8, 16, 32, 64)


def _capacity(p: SettingParams) -> int:
    return math.floor(106 / (2 + p.verified))  # theory 2.4 with M = 106, S0 = 2


def _capped_cycle_ms(batch: int, p: SettingParams) -> float:
    return 10.0 + 0.05 * batch + p.steps * (0.6 + 0.02 * batch) + 0.01 * batch * p.verified


def _saturating_cycle_ms(batch: int, p: SettingParams) -> float:
    """A roofline with no capacity limit: past the ridge the aggregate is flat in the batch."""
    return max(10.0 + 0.6 * p.steps, 0.2 * batch * p.verified)


def _aggregate(p: SettingParams, c: int, *, capped: bool) -> float:
    batch = min(c, _capacity(p)) if capped else c
    cycle = _capped_cycle_ms(batch, p) if capped else _saturating_cycle_ms(batch, p)
    return batch * 1000 * chain_tau((ALPHA,) * p.steps) / cycle


def _cells(steps: tuple[int, ...], *, capped: bool = True) -> list[ModelCell]:
    """Aggregate tok/s only: no capacity, acceptance, per-request figure or output length."""
    out = []
    for s in steps:
        p = SettingParams(steps=s, family="EAGLE3")
        out += [ModelCell(f"s{s}", p, c, aggregate_tok_s=_aggregate(p, c, capped=capped)) for c in LEVELS]
    return out


def test_a_plateau_brackets_the_capacity_between_the_last_level_that_grew_and_the_first_flat_one() -> None:
    plateaus = {p.params.steps: p for p in find_plateaus(_cells((1, 2, 3, 4)))}
    assert set(plateaus) == {1, 2, 3, 4}
    for steps, plateau in plateaus.items():
        cap = _capacity(plateau.params)
        assert plateau.above < cap <= plateau.at_most, steps
        assert plateau.aggregate_tok_s == pytest.approx(_aggregate(plateau.params, 64, capped=True))


def test_a_tree_that_runs_one_request_is_flat_from_the_lowest_level_and_its_capacity_is_one() -> None:
    # (6, 4, 64) on the hybrid law: floor(106 / 66) = 1 running request at every C
    tree = SettingParams(steps=6, topk=4, draft_tokens=64, family="EAGLE3")
    assert _capacity(tree) == 1
    flat = [ModelCell("tree", tree, c, aggregate_tok_s=_aggregate(tree, c, capped=True)) for c in LEVELS]
    (plateau,) = find_plateaus(flat)
    assert (plateau.above, plateau.at_most) == (0, 1)


def test_a_setting_that_keeps_growing_has_no_plateau() -> None:
    p = SettingParams(steps=1, family="EAGLE3")
    growing = [ModelCell("s1", p, c, aggregate_tok_s=100.0 * c**0.5) for c in LEVELS]
    assert find_plateaus(growing) == []
    assert PLATEAU_GAIN < 2**0.5 - 1  # the slowest growth above still counts as growth


def test_the_law_is_solved_from_capacity_estimates_like_read_back_ones() -> None:
    estimates = {SettingParams(steps=s, family="EAGLE3"): _capacity(SettingParams(steps=s)) for s in (1, 2, 3)}
    law = fit_law(estimates)
    assert law is not None and law.kind == "hybrid-state"
    for s in (4, 5, 6):
        assert law.capacity(SettingParams(steps=s, family="EAGLE3")) == _capacity(SettingParams(steps=s))
    assert "no capacity was read back" in law.describe()
    assert fit_law({SettingParams(steps=1, family="EAGLE3"): 26}) is None  # one depth: no law
    flat = {SettingParams(steps=s, family="EAGLE3"): 20 for s in (1, 2)}
    assert fit_law(flat) is None  # capacities that do not fall with D: not this law


def test_aggregate_only_cells_give_the_capacity_law_and_the_right_depth_at_every_level() -> None:
    cells = _cells((1, 2, 3, 4, 5, 6))
    model = fit_model([c for c in cells if c.params.steps <= 3])
    assert model.capacity_law.kind == "hybrid-state"
    assert "inferred from where aggregate throughput stops growing" in " ".join(model.describe())
    for c in cells:
        assert model.capacity(c.params) == _capacity(c.params)
        assert model.predict(c.params, c.concurrency, stated=False).aggregate_tok_s == pytest.approx(
            c.aggregate_tok_s, rel=0.02
        )
    for level in LEVELS:
        row = [c for c in cells if c.concurrency == level]
        best = max(row, key=lambda c: c.aggregate_tok_s or 0.0)
        chosen = max(row, key=lambda c: model.predict(c.params, level, stated=False).aggregate_tok_s)
        assert chosen.params == best.params, level


def _per_request(p: SettingParams, c: int) -> float:
    return 1000 * chain_tau((ALPHA,) * p.steps) / _saturating_cycle_ms(c, p)


def test_compute_saturation_is_not_read_as_a_capacity_when_per_request_figures_tell_them_apart() -> None:
    """Past a compute ridge each request slows as the batch grows; under a capacity limit it does not."""
    cells = [
        ModelCell(c.setting, c.params, c.concurrency, c.per_request_tok_s or _per_request(c.params, c.concurrency),
                  c.aggregate_tok_s)
        for c in _cells((1, 2, 3), capped=False)
    ]  # fmt: skip
    assert find_plateaus(cells)  # the aggregate does lie flat past the ridge
    model = fit_model(cells)
    assert model.capacity_law.kind == "unknown"
    assert model.predict(SettingParams(steps=5, family="EAGLE3"), 64, stated=False).batch == 64


def test_aggregate_only_compute_saturation_may_read_as_a_capacity_but_picks_the_right_depth() -> None:
    """With aggregate tok/s alone, a ridge at B*D = 53 and a law floor(79 / (1 + D)) predict nearly the same
    figures: either reading must lead to the same decisions, and the report names the reading."""
    cells = _cells((1, 2, 3, 4, 5, 6), capped=False)
    model = fit_model([c for c in cells if c.params.steps <= 3])
    if model.capacity_law.kind != "unknown":
        assert "no capacity was read back" in model.capacity_law.describe()
    for level in LEVELS:
        row = [c for c in cells if c.concurrency == level]
        best = max(row, key=lambda c: c.aggregate_tok_s or 0.0)
        chosen = max(row, key=lambda c: model.predict(c.params, level, stated=False).aggregate_tok_s)
        assert chosen.params == best.params, level
        for c in row:
            assert model.predict(c.params, level, stated=False).aggregate_tok_s == pytest.approx(
                c.aggregate_tok_s, rel=0.06
            )


def test_read_back_capacities_are_never_replaced_by_an_inferred_law() -> None:
    cells = [
        ModelCell(c.setting, c.params, c.concurrency, aggregate_tok_s=c.aggregate_tok_s, capacity=40)
        for c in _cells((1, 2, 3))
    ]
    model = fit_model(cells)
    assert model.capacity_law.kind == "constant"
    assert model.capacity_law.constant == 40


def test_plan_on_an_imported_aggregate_only_table_says_the_capacity_was_inferred(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    table = tmp_path / "sweep.csv"
    rows = ["engine,algorithm,num_steps,eagle_topk,concurrency,aggregate_tok_s"]
    rows += [f"sglang,EAGLE3,{c.params.steps},1,{c.concurrency},{c.aggregate_tok_s:.2f}" for c in _cells((1, 2, 3, 4))]
    table.write_text("\n".join(rows) + "\n", encoding="utf-8")
    db = str(tmp_path / "t.db")
    code, out, _ = _cli(monkeypatch, capsys, "import", str(table), "--store", db)
    assert code == 0, out
    run_id = re.search(r"as run (\S+)", out).group(1)  # type: ignore[union-attr]
    fit_only = ",".join(sorted({c.setting for c in run_cells(Store(Path(db)), run_id).cells if c.params.steps < 4}))
    code, out, _ = _cli(monkeypatch, capsys, "plan", run_id, "--store", db, "--fit-only", fit_only)
    assert code == 0, out
    flat = " ".join(out.split())
    assert "floor(106 / (2 + D))" in flat
    assert "inferred from where aggregate throughput stops growing" in flat and "no capacity was read back" in flat
