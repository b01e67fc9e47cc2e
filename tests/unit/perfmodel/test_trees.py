"""The model fits SGLang trees: tau per shape from the measured acceptance, the rank share from trees, the
cycle with verify tokens D and draft tokens topk; a shape or a drafter it never measured is not predicted.

The ground truth is the theory's own tree (theory.acceptance.tree_tau) and a cycle with both the MoE
expert coverage and a compute ridge, the simulator's seed-like deployment."""

from __future__ import annotations

import math

import pytest

from specfrontier.errors import ConfigError
from specfrontier.perfmodel import ModelCell, SettingParams, fit_model
from specfrontier.theory.acceptance import tree_tau
from specfrontier.theory.cycle import expert_coverage_fraction

ALPHA, SHARE, RHO = 0.85, 0.35, 8 / 256


def _cycle_ms(b: int, p: SettingParams) -> float:
    n = b * p.verified
    return 15.0 + 0.1 * b + p.steps * 0.08 * b * p.topk + 5.0 * expert_coverage_fraction(n, RHO) + 0.4 * max(0, n - 48)


def _tau(p: SettingParams) -> float:
    return tree_tau([ALPHA] * p.steps, p.topk, p.verified - 1, SHARE)


def _capacity(p: SettingParams) -> int:
    return math.floor(106 / (2 + p.verified))


def _cells(settings: list[SettingParams], *, reported: bool = True) -> list[ModelCell]:
    out = []
    for p in settings:
        for c in (1, 4, 16, 64):
            b = min(c, _capacity(p))
            v = 1000 * _tau(p) / _cycle_ms(b, p)
            out.append(
                ModelCell(
                    p.label,
                    p,
                    c,
                    per_request_tok_s=v if reported else None,
                    aggregate_tok_s=b * v,
                    capacity=_capacity(p) if reported else None,
                    acceptance_length=_tau(p) if reported else None,
                )
            )
    return out


def _p(steps: int, topk: int = 1, draft: int | None = None) -> SettingParams:
    return SettingParams(steps=steps, topk=topk, draft_tokens=draft, family="EAGLE3")


FITTED = [_p(1), _p(3), _p(5), _p(2, 4, 8), _p(4, 2, 8), _p(3, 8, 16)]
UNSEEN = [_p(6), _p(3, 4, 16), _p(5, 8, 32), _p(2, 2, 4), _p(6, 4, 8)]


def test_a_fitted_family_predicts_its_other_tree_shapes() -> None:
    model = fit_model(_cells(FITTED), rho=RHO)
    fam = model.acceptance["EAGLE3"]
    assert fam.rank_share == pytest.approx(SHARE, abs=0.01) and fam.alpha == pytest.approx(ALPHA, abs=0.005)
    assert model.form == "moe-roofline"
    for p in UNSEEN:
        assert model.tau(p) == pytest.approx(_tau(p), rel=0.005)
        for c in (1, 4, 16, 64):
            b = min(c, _capacity(p))
            expected = 1000 * b * _tau(p) / _cycle_ms(b, p)
            assert model.predict(p, c, stated=False).aggregate_tok_s == pytest.approx(expected, rel=0.02), (p.label, c)


def test_trees_of_a_family_measured_only_as_chains_are_not_predictable() -> None:
    model = fit_model(_cells([_p(1), _p(2), _p(3)]), rho=RHO)
    assert model.predict(_p(4), 4, stated=False).aggregate_tok_s > 0  # its chains are
    with pytest.raises(ConfigError, match=r"not predictable.*measure one tree setting of EAGLE3"):
        model.predict(_p(3, 4, 16), 4)
    assert any("trees (topk > 1) not predictable" in line for line in model.describe())


def test_a_drafter_never_measured_is_a_reason_to_measure() -> None:
    model = fit_model(_cells(FITTED), rho=RHO)
    with pytest.raises(ConfigError, match="fix: measure"):
        model.predict(SettingParams(steps=3, topk=4, draft_tokens=16, family="EAGLE"), 4)


def test_rank_share_is_fitted_from_throughput_when_no_acceptance_is_reported() -> None:
    model = fit_model(_cells(FITTED, reported=False), rho=RHO, forms=("moe-roofline",), infer_capacity_law=False)
    fam = model.acceptance["EAGLE3"]
    assert fam.rank_share is not None and "throughput" in fam.rank_source
    errors = []
    for p in UNSEEN:
        for c in (1, 4):  # below every capacity: no law is given without read-back
            errors.append(
                abs(model.predict(p, c, stated=False).aggregate_tok_s / (1000 * c * _tau(p) / _cycle_ms(c, p)) - 1)
            )
    assert max(errors) < 0.05


def test_plan_offers_untested_trees_of_a_family_whose_trees_were_measured() -> None:
    from specfrontier.perfmodel.plan import candidates

    model = fit_model(_cells(FITTED), rho=RHO)
    offered = {c.params for c in candidates(model, _cells(FITTED)) if not c.measured}
    assert _p(5, 4, 8) in offered and _p(6, 8, 16) in offered  # measured shapes at other depths
    assert _p(1, 8, 16) not in offered  # beyond SGLang's bound: 15 > 8 + 0 * 64
    chains_only = fit_model(_cells([_p(1), _p(2)]), rho=RHO)
    assert all(c.params.topk == 1 for c in candidates(chains_only, _cells([_p(1), _p(2)])))
