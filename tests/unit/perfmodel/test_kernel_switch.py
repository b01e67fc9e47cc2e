"""The kernel-switch form: a cost that steps down where the engine leaves a matrix-vector kernel for a tiled
matrix-matrix one (MLX's get_qmv_batch_limit) is fitted and chosen; a forward between the fitted counts around
the switch is refused, not guessed; smooth costs and a regime seen at one token count do not choose it."""

from __future__ import annotations

import pytest

from specfrontier.errors import ConfigError
from specfrontier.perfmodel import ModelCell, SettingParams, fit_model
from specfrontier.perfmodel.cycle import CycleObservation, fit_form
from specfrontier.theory.acceptance import chain_tau

RATES = (0.9, 0.85, 0.8, 0.8, 0.8)
SWITCH = 12


def _switch_cycle_ms(batch: int, p: SettingParams) -> float:
    n = batch * p.verified
    verify = 6.0 * n if n < SWITCH else 1.5 * n  # the tiled kernel is cheaper per row: the cost steps down
    return 20.0 + 1.0 * batch + p.steps * 0.8 + verify


def _cells(steps: list[int], levels: list[int]) -> list[ModelCell]:
    out = []
    for s in steps:
        p = SettingParams(steps=s, family="MTP")
        tau = chain_tau(RATES[:s])
        for c in levels:
            v = 1000 * tau / _switch_cycle_ms(c, p)
            out.append(ModelCell(f"s{s}", p, c, per_request_tok_s=v, aggregate_tok_s=c * v, acceptance_length=tau))
    return out


def test_a_cost_stepping_down_at_a_kernel_switch_is_fitted_and_predicted_on_both_sides() -> None:
    model = fit_model(_cells([1, 2, 3], [1, 2, 4, 8, 16]))
    assert model.form == "kernel-switch"
    assert model.train_rms < 0.01
    assert model.cycle.shape is not None and 8 < model.cycle.shape <= SWITCH
    deeper = SettingParams(steps=4, family="MTP")  # unmeasured: 5 verified tokens per request
    for c in (1, 4, 16):  # 5, 20 and 80 verified tokens: below and above the switch
        assert model.determined(deeper, c)
        assert model.cycle_ms(c, deeper) == pytest.approx(_switch_cycle_ms(c, deeper), rel=0.01)
    assert not model.determined(deeper, 2)  # 10 tokens: between the fitted 8 and 12, the switch unplaced
    assert any("kernel below" in line for line in model.describe())


def test_a_forward_between_the_fitted_counts_around_the_switch_is_refused_with_the_reason() -> None:
    model = fit_model(_cells([1, 2, 3], [1, 2, 8, 16]))  # 2-8 verified tokens, then 16-64: the switch in between
    assert model.form == "kernel-switch" and model.cycle.switch_gap == (8.0, 16.0)
    inside = SettingParams(steps=2, family="MTP")  # 12 verified tokens at C = 4
    assert not model.determined(inside, 4)
    with pytest.raises(ConfigError, match="where the kernel switch lies"):
        model.predict(inside, 4)
    assert model.determined(inside, 8)  # 24 tokens: above the gap


def test_a_smooth_cost_does_not_choose_the_switch() -> None:
    smooth = [
        ModelCell(
            c.setting,
            c.params,
            c.concurrency,
            per_request_tok_s=1000 * (c.acceptance_length or 1.0) / (20.0 + c.concurrency + 0.5 * c.params.verified),
            acceptance_length=c.acceptance_length,
        )
        for c in _cells([1, 2, 3], [1, 2, 4, 8, 16])
    ]
    assert fit_model(smooth).form != "kernel-switch"


def test_a_regime_seen_at_one_token_count_shows_no_step() -> None:
    chain = SettingParams(steps=1, family="MTP")
    obs = [
        CycleObservation(b, chain, _switch_cycle_ms(b, chain))
        for b in (1, 2, 3, 4, 16)  # 2, 4, 6, 8 verified tokens below a switch at 12, 32 alone above it
    ]
    model, _ = fit_form("kernel-switch", 12.0, ("MTP",), obs)
    assert model.switch_gap == (8.0, 32.0)
    assert model.switch_step == 0.0  # its own cost coefficient for one count: not evidence of a step
    two_above = [*obs, CycleObservation(24, obs[0].params, _switch_cycle_ms(24, obs[0].params))]
    stepped, _ = fit_form("kernel-switch", 12.0, ("MTP",), two_above)
    assert stepped.switch_step > 0.3  # 6 -> 1.5 ms per token at 32 tokens, against a cycle of ~101 ms
