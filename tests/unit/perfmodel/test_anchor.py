"""The baseline's misfit at n tokens moves a speculative prediction that verifies n tokens (anchor.py), and
nothing else: baseline predictions stay the form's, and n outside the baseline's range is not moved. A chain's
siblings' misfit at its batch moves it, shrunk by how much of the misfit the batches share; never its own."""

from __future__ import annotations

import math

import pytest

from specfrontier.perfmodel import FittedModel, ModelCell, SettingParams, fit_model
from specfrontier.perfmodel.anchor import SiblingAnchor, TokenAnchor, sibling_anchor
from specfrontier.perfmodel.cycle import CycleModel, CycleObservation
from specfrontier.theory.acceptance import chain_tau

RATES = (0.9, 0.85, 0.8)
BUMP_TOKENS = 8
"""The engine's forward of 8 tokens costs 3 ms more than the smooth form says (a kernel or graph quirk)."""


def _truth_cycle_ms(batch: int, p: SettingParams) -> float:
    n = batch * p.verified
    t = 10.0 + 0.05 * batch + 0.02 * n + (3.0 if n == BUMP_TOKENS else 0.0)
    return t + ((4.0 + 0.3 * batch + p.steps * (0.6 + 0.02 * batch)) if p.speculative else 0.0)


def _cell(steps: int, concurrency: int) -> ModelCell:
    p = SettingParams(steps=steps, family="EAGLE3") if steps else SettingParams()
    tau = chain_tau(RATES[:steps])
    rate = 1000 * tau / _truth_cycle_ms(concurrency, p)
    return ModelCell(f"s{steps}", p, concurrency, per_request_tok_s=rate, acceptance_length=tau if steps else None)


def _fitted(with_baseline: bool = True) -> tuple[list[ModelCell], FittedModel]:
    # No speculative cell verifies 8 tokens: s1 (D = 2) at 1, 2, 16, 32 and s3 (D = 4) at 1, 16, 32.
    cells = [_cell(1, c) for c in (1, 2, 16, 32)] + [_cell(3, c) for c in (1, 16, 32)]
    if with_baseline:
        cells += [_cell(0, c) for c in (1, 2, 4, 8, 16, 32)]
    return cells, fit_model(cells, forms=("dense",))


def test_a_baseline_misfit_at_n_tokens_moves_the_speculative_cycle_that_verifies_n_tokens() -> None:
    _, model = _fitted()
    assert model.anchor.misfit_at(BUMP_TOKENS) > 0.1  # the baseline at batch 8 is measured slower than fitted
    chain = SettingParams(steps=1, family="EAGLE3")  # at C = 4 it verifies 4 x 2 = 8 tokens
    anchored = model.predict(chain, 4, stated=False)
    form = model.cycle.cycle_ms(4, chain)
    assert anchored.cycle_ms - form == pytest.approx(
        model.anchor.misfit_at(BUMP_TOKENS) * model.cycle.forward_ms(4, chain), rel=1e-9
    )
    truth = _truth_cycle_ms(4, chain)
    assert abs(anchored.cycle_ms - truth) < 0.5 * abs(form - truth)  # the anchor carries the engine's cost
    # the same setting at a size no quirk sits at moves by the small misfit there only
    assert abs(model.predict(chain, 8, stated=False).cycle_ms - model.cycle.cycle_ms(8, chain)) < 0.5


def test_baseline_predictions_stay_the_parametric_form() -> None:
    cells, model = _fitted()
    baseline = SettingParams()
    for c in (1, 2, 4, 8, 16, 32):
        assert model.predict(baseline, c, stated=False).cycle_ms == model.cycle.cycle_ms(c, baseline)
    # so the baseline's own training cell at batch 8 keeps its misfit: training error is not faked away
    at_bump = next(c for c in cells if not c.params.speculative and c.concurrency == BUMP_TOKENS)
    predicted = model.predict(baseline, BUMP_TOKENS, stated=False).per_request_tok_s
    assert at_bump.per_request_tok_s is not None and predicted / at_bump.per_request_tok_s - 1 > 0.1


def test_no_anchor_outside_the_baseline_tokens_or_without_a_baseline() -> None:
    _, model = _fitted()
    deep = SettingParams(steps=3, family="EAGLE3")  # at C = 32: 128 verified tokens, beyond the baseline's 32
    assert model.anchor.offset_ms(model.cycle, 32, deep) == 0.0
    siblings = 1.0 + model.siblings.misfit_at(32, deep)  # s1 ran at 32 too: its misfit there, not the baseline's
    assert model.predict(deep, 32, stated=False).cycle_ms == pytest.approx(model.cycle.cycle_ms(32, deep) * siblings)
    _, spec_only = _fitted(with_baseline=False)
    assert spec_only.anchor == TokenAnchor()
    chain = SettingParams(steps=1, family="EAGLE3")
    assert spec_only.predict(chain, 4, stated=False).cycle_ms == spec_only.cycle.cycle_ms(4, chain)
    assert any(line.startswith("anchor: none") for line in spec_only.describe())


def test_the_misfit_is_interpolated_in_log_tokens_and_zero_outside() -> None:
    anchor = TokenAnchor((1.0, 16.0, 64.0), (0.0, 0.08, -0.02))
    assert anchor.misfit_at(16) == 0.08
    assert anchor.misfit_at(4) == pytest.approx(0.04)  # halfway from 1 to 16 in log n
    assert anchor.misfit_at(32) == pytest.approx(0.08 + (math.log(2) / math.log(4)) * (-0.10))
    assert anchor.misfit_at(0.5) == 0.0 and anchor.misfit_at(65) == 0.0
    assert TokenAnchor().misfit_at(8) == 0.0


EAGLE = "EAGLE3"
SLOW_LEVEL = 8
"""Every chain's cycle at 8 running requests is 6 % slower than the smooth form says (a level's own quirk)."""


def _chain(steps: int) -> SettingParams:
    return SettingParams(steps=steps, family=EAGLE)


def _chain_cell(steps: int, concurrency: int) -> ModelCell:
    p = _chain(steps)
    tau = chain_tau(RATES[:steps])
    t = _truth_cycle_ms(concurrency, p) * (1.06 if concurrency == SLOW_LEVEL else 1.0)
    return ModelCell(f"s{steps}", p, concurrency, per_request_tok_s=1000 * tau / t, acceptance_length=tau)


def test_siblings_at_a_batch_move_a_left_out_chain_there_and_its_own_cells_never_move_it() -> None:
    levels = (1, 2, 4, 8, 16, 32)
    cells = [_chain_cell(s, c) for s in (1, 3) for c in levels] + [_chain_cell(0, c) for c in levels]
    model = fit_model(cells, forms=("dense",))
    middle = _chain(2)  # left out: measured nowhere, between s1 and s3
    assert model.siblings.misfit_at(SLOW_LEVEL, middle) > 0.03  # both siblings ran 6 % slow at 8
    truth = _truth_cycle_ms(SLOW_LEVEL, middle) * 1.06
    moved = model.predict(middle, SLOW_LEVEL, stated=False).cycle_ms
    form = model.cycle.cycle_ms(SLOW_LEVEL, middle) + model.anchor.offset_ms(model.cycle, SLOW_LEVEL, middle)
    assert abs(moved - truth) < 0.5 * abs(form - truth)
    # s1 at 8 is moved by s3's misfit there (its sibling), not by its own measured misfit
    own = next(m for (_, b), rows in model.siblings.misfit if b == SLOW_LEVEL for p, m in rows if p == _chain(1))
    alone = SiblingAnchor((((EAGLE, SLOW_LEVEL), ((_chain(1), own),)),), model.siblings.level_share)
    assert own > 0.03 and alone.misfit_at(SLOW_LEVEL, _chain(1)) == 0.0
    assert any(line.startswith("sibling anchor: a chain's cycle") for line in model.describe())


def test_the_batch_effect_is_shrunk_by_its_share_and_nothing_moves_trees_or_the_baseline() -> None:
    a, b, c = _chain(1), _chain(2), _chain(3)
    groups = (((EAGLE, 4), ((a, 0.06), (b, 0.02), (c, 0.04))),)
    anchor = SiblingAnchor(groups, ((EAGLE, 0.0016, 0.0004),))  # batch sd 4 %, a setting's sd 2 %
    # b's siblings at 4 read 6 % and 4 %: mean 5 %, shrunk by 0.0016 / (0.0016 + 0.0004 / 2) = 8 / 9
    assert anchor.misfit_at(4, b) == pytest.approx(0.05 * 8 / 9)
    assert anchor.misfit_at(16, b) == 0.0  # no sibling ran at 16
    assert anchor.misfit_at(4, SettingParams(steps=2, topk=4, draft_tokens=8, family=EAGLE)) == 0.0  # a tree
    assert anchor.misfit_at(4, SettingParams()) == 0.0
    assert anchor.misfit_at(4, SettingParams(steps=2, family="MTP")) == 0.0  # another drafter
    assert SiblingAnchor(groups, ((EAGLE, 0.0, 0.0004),)).misfit_at(4, b) == 0.0  # batches share nothing


def test_batches_that_share_no_effect_give_no_shrink_weight() -> None:
    # At each batch one sibling reads +3 % and the other -3 %: every batch's mean is 0, so tau2 = 0.
    cycle = CycleModel("dense", None, (EAGLE,), (10.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0))
    obs = []
    for batch in (1, 4, 16):
        for steps, sign in ((1, 1.0), (3, -1.0)):
            p = _chain(steps)
            obs.append(CycleObservation(batch, p, cycle.cycle_ms(batch, p) * (1.0 + sign * 0.03)))
    anchor = sibling_anchor(cycle, TokenAnchor(), obs)
    assert [family for family, _, _ in anchor.level_share] == [EAGLE]
    assert anchor.level_share[0][1] == 0.0 and anchor.misfit_at(4, _chain(2)) == 0.0
