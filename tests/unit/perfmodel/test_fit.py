"""The model recovers a known ground truth: cells generated from chosen acceptance, capacity and cycle-time
parameters are fitted, and untested settings are predicted within a tight tolerance."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from specfrontier.errors import ConfigError
from specfrontier.perfmodel import ModelCell, SettingParams, fit_capacity, fit_model
from specfrontier.perfmodel.acceptance import FamilyAcceptance, solve_alpha
from specfrontier.perfmodel.calibration import (
    AGAINST_BEST,
    BEYOND,
    LEVEL_EXTRAPOLATED,
    LEVEL_INTERPOLATED,
    UNMEASURED_CHAIN,
    UNMEASURED_TREE,
    Z95,
    Calibration,
    HeldOutErrors,
)
from specfrontier.perfmodel.capacity import running_short
from specfrontier.theory.acceptance import chain_tau, tree_tau

RATES = (0.9, 0.85, 0.8, 0.8, 0.8, 0.8, 0.8, 0.8)


def _truth_cycle_ms(batch: int, p: SettingParams, *, moe: bool) -> float:
    n = batch * p.verified
    t = 10.0 + 0.05 * batch + p.steps * (0.6 + 0.02 * batch) + 0.01 * n
    if moe:
        t += 8.0 * (1 - (1 - 8 / 256) ** n)
    return t


def _truth_capacity(p: SettingParams) -> int:
    return 64 if not p.speculative else math.floor(106 / (2 + p.verified))


def _cells(steps: list[int], levels: list[int], *, moe: bool = False, with_acceptance: bool = True) -> list[ModelCell]:
    out = []
    for s in [0, *steps]:
        p = SettingParams(steps=s, family="EAGLE3") if s else SettingParams()
        tau = chain_tau(RATES[:s])
        positions = tuple(float(np.prod(RATES[: i + 1])) for i in range(s))
        for c in levels:
            b = min(c, _truth_capacity(p))
            v = 1000 * tau / _truth_cycle_ms(b, p, moe=moe)
            out.append(
                ModelCell(
                    f"s{s}",
                    p,
                    c,
                    per_request_tok_s=v,
                    aggregate_tok_s=b * v,
                    capacity=_truth_capacity(p),
                    acceptance_length=tau if with_acceptance and s else None,
                    acceptance_per_position=positions if with_acceptance else (),
                )
            )
    return out


def test_dense_ground_truth_predicts_untested_depth_within_one_percent() -> None:
    model = fit_model(_cells([1, 2, 3], [1, 4, 16, 32, 64]))
    assert model.train_rms < 1e-6
    target = SettingParams(steps=5, family="EAGLE3")
    for c in (1, 4, 16, 64):
        b = min(c, _truth_capacity(target))
        expected = 1000 * chain_tau(RATES[:5]) / _truth_cycle_ms(b, target, moe=False)
        got = model.predict(target, c, stated=False)
        assert got.batch == b
        assert got.per_request_tok_s == pytest.approx(expected, rel=0.01)
        assert got.aggregate_tok_s == pytest.approx(b * expected, rel=0.01)


def test_moe_form_is_chosen_for_moe_ground_truth_and_beats_dense_on_held_out_cells() -> None:
    model = fit_model(_cells([1, 2, 3, 4], [1, 2, 4, 8, 16, 32], moe=True), forms=("dense", "moe"))
    assert model.form == "moe"
    held_moe, held_dense = model.heldout_rms["moe"], model.heldout_rms["dense"]
    assert held_moe is not None and held_dense is not None and held_moe < held_dense


def test_capacity_law_is_recovered_and_predicts_the_unreported_depth() -> None:
    law = fit_capacity(_cells([1, 2, 3], [1]))
    assert law.kind == "hybrid-state"
    assert law.capacity(SettingParams(steps=4, family="EAGLE3")) == 15  # floor(106 / 7), as theory 2.4
    assert law.capacity(SettingParams()) == 64
    assert law.capacity(SettingParams(steps=4, family="EAGLE3", max_running_requests=8)) == 8


def test_constant_capacity_when_readings_do_not_depend_on_depth() -> None:
    cells = [ModelCell("a", SettingParams(steps=s, family="ngram"), 1, 10.0, 10.0, capacity=4) for s in (4, 8)]
    law = fit_capacity(cells)
    assert law.kind == "constant" and law.capacity(SettingParams(steps=16, family="ngram")) == 4


def test_acceptance_fitted_from_throughput_when_no_counters() -> None:
    model = fit_model(_cells([1, 2, 3, 4], [1, 4, 16], with_acceptance=False))
    fam = model.acceptance["EAGLE3"]
    assert "fitted from throughput" in fam.source
    assert 0.6 < fam.alpha < 1.0


def test_per_position_counters_give_conditional_rates() -> None:
    model = fit_model(_cells([1, 2, 3], [1, 4]))
    assert model.acceptance["EAGLE3"].conditional == pytest.approx(RATES[:3])
    # beyond the measured depth the last measured rate is reused
    assert model.tau(SettingParams(steps=5, family="EAGLE3")) == pytest.approx(chain_tau([0.9, 0.85, 0.8, 0.8, 0.8]))


def test_intervals_are_the_stated_error_of_the_prediction_kind() -> None:
    rng = np.random.default_rng(1)
    noisy = [
        dataclasses.replace(c, per_request_tok_s=c.per_request_tok_s * (1 + rng.normal(0, 0.03)), aggregate_tok_s=None)
        for c in _cells([1, 2, 3], [1, 4, 16])
        if c.per_request_tok_s is not None
    ]
    model = fit_model(noisy)
    measured = model.predict(SettingParams(steps=2, family="EAGLE3"), 4)  # a fitted setting at a fitted level
    assert measured.error_class == LEVEL_INTERPOLATED
    half = model.calibration.halfwidth(LEVEL_INTERPOLATED)
    assert half is not None and 0.0 < half < 0.5 and measured.halfwidth == half
    assert measured.per_request_interval is not None
    low, high = measured.per_request_interval
    assert low < measured.per_request_tok_s < high
    assert high / measured.per_request_tok_s - 1 == pytest.approx(half)
    deeper = model.predict(SettingParams(steps=4, family="EAGLE3"), 4)  # one step beyond every fitted depth
    assert deeper.error_class == UNMEASURED_CHAIN + BEYOND and deeper.halfwidth is not None
    # its ratio to the best fitted setting has a stated error of its own, from held-out settings' ratios
    assert UNMEASURED_CHAIN + BEYOND + AGAINST_BEST in model.calibration.errors
    assert deeper.halfwidth_against_best is not None and measured.halfwidth_against_best is None
    # the held-out errors behind each stated error are kept, by the groups (settings, levels) they came from
    assert model.calibration.errors[LEVEL_INTERPOLATED].groups >= 1
    assert "unmeasured chain beyond the fitted shapes +/-" in model.calibration.describe()


def test_a_stated_error_is_a_prediction_bound_over_held_out_groups() -> None:
    few = HeldOutErrors((0.02, -0.03, 0.01), groups=3)  # under SMALL_SAMPLE groups: at least the largest error
    rms = math.sqrt((0.02**2 + 0.03**2 + 0.01**2) / 3)
    assert few.bound() == pytest.approx(max(Z95 * rms * math.sqrt(1 + 1 / 3), 0.03))
    # ten errors from two levels left out are two pieces of evidence, not ten
    clustered = HeldOutErrors((0.05,) * 5 + (-0.05,) * 5, groups=2)
    assert clustered.bound() == pytest.approx(Z95 * 0.05 * math.sqrt(1.5))
    assert HeldOutErrors((0.05,), groups=1).bound() is None
    many = HeldOutErrors(tuple(0.04 * (-1) ** i for i in range(40)), groups=20)
    assert many.bound() == pytest.approx(Z95 * 0.04 * math.sqrt(1 + 1 / 20))  # no floor from 10 groups on
    # an interpolation with too few held-out groups takes its extrapolation's bound; nothing known: None
    cal = Calibration({LEVEL_EXTRAPOLATED: clustered, UNMEASURED_CHAIN: HeldOutErrors((0.01,), 1)})
    assert cal.halfwidth(LEVEL_INTERPOLATED) == cal.halfwidth(LEVEL_EXTRAPOLATED)
    assert cal.halfwidth(UNMEASURED_CHAIN) is None and cal.halfwidth(UNMEASURED_TREE) is None


def test_shapes_the_fit_did_not_measure_are_refused_with_the_reason() -> None:
    chains = fit_model([c for c in _cells([1, 2, 3], [1, 4, 16]) if c.params.speculative])
    with pytest.raises(ConfigError, match=r"no-spec: not predictable: no setting without speculation was fitted"):
        chains.predict(SettingParams(), 4)
    trees = []
    for steps, topk, draft in ((2, 2, 4), (3, 2, 6), (3, 4, 8), (4, 4, 12)):
        p = SettingParams(steps=steps, topk=topk, draft_tokens=draft, family="EAGLE3")
        tau = tree_tau([0.8] * steps, topk, draft - 1, 0.4)
        for c in (1, 4, 16):
            trees.append(ModelCell(p.label, p, c, per_request_tok_s=1000 * tau / _truth_cycle_ms(c, p, moe=True)))
            trees[-1] = dataclasses.replace(trees[-1], acceptance_length=tau)
    model = fit_model(trees)
    with pytest.raises(ConfigError, match=r"measured only as trees .*fix: measure one chain setting of EAGLE3"):
        model.predict(SettingParams(steps=3, family="EAGLE3"), 4)
    assert model.refusal(SettingParams(steps=3, topk=2, draft_tokens=6, family="EAGLE3")) is None


def test_a_prediction_without_a_stated_error_is_refused_unless_only_an_ordering_is_asked() -> None:
    # one speculative setting: nothing can be held out to say how wrong an unmeasured depth would be
    model = fit_model(_cells([2], [1, 4, 16]))
    deeper = SettingParams(steps=4, family="EAGLE3")
    with pytest.raises(ConfigError, match=r"no stated error for a prediction of this kind \(2 steps beyond the fitted"):
        model.predict(deeper, 4)
    ordering = model.predict(deeper, 4, stated=False)
    assert ordering.halfwidth is None and ordering.aggregate_interval is None and ordering.aggregate_tok_s > 0


def test_what_speculation_costs_whatever_its_depth_is_its_own_term() -> None:
    # Ground truth with a speculation overhead (the draft extend pass, tree building): 4 ms + 0.3 ms per request
    # per cycle for any depth. Without the term, no spec and the chains cannot both be fitted.
    def truth(b: int, p: SettingParams) -> float:
        return _truth_cycle_ms(b, p, moe=False) + ((4.0 + 0.3 * b) if p.speculative else 0.0)

    cells = []
    for s in (0, 1, 2, 3, 4):
        p = SettingParams(steps=s, family="EAGLE3") if s else SettingParams()
        tau = chain_tau(RATES[:s])
        for c in (1, 4, 16, 32):
            cells.append(ModelCell(f"s{s}", p, c, per_request_tok_s=1000 * tau / truth(c, p), acceptance_length=tau))
    model = fit_model(cells, forms=("dense",))
    assert model.train_rms < 1e-6
    terms = model.cycle.terms()
    assert terms["spec_fixed_ms[EAGLE3]"] == pytest.approx(4.0, rel=1e-3)
    assert terms["spec_request_ms[EAGLE3]"] == pytest.approx(0.3, rel=1e-3)
    # every cell speculating: the overhead is the fixed cost itself, left out without a word
    chains = fit_model([c for c in cells if c.params.speculative], forms=("dense",))
    assert chains.cycle.terms()["spec_fixed_ms[EAGLE3]"] == 0.0 and chains.train_rms < 1e-6
    assert not any(name.startswith("spec_") for group in chains.cycle.unidentified for name in group)


def test_a_prediction_the_cells_do_not_determine_has_no_stated_error() -> None:
    # AngelSlim #163's shape: the baseline at every level, the drafter's settings at one batch size only
    # (plus one at two). What speculation costs per running request is then seen only in sum with what it
    # costs per cycle: a drafter setting at C = 16 is not determined by these cells, whatever the fit says.
    def truth(b: int, p: SettingParams) -> float:
        return _truth_cycle_ms(b, p, moe=False) + ((4.0 + 0.3 * b) if p.speculative else 0.0)

    cells = []
    for s, levels in ((0, (1, 4, 16, 32)), (1, (1,)), (2, (1,)), (3, (1,)), (4, (1,))):
        p = SettingParams(steps=s, family="EAGLE3") if s else SettingParams()
        tau = chain_tau(RATES[:s])
        cells += [
            ModelCell(f"s{s}", p, c, per_request_tok_s=1000 * tau / truth(c, p), acceptance_length=tau) for c in levels
        ]
    model = fit_model(cells, forms=("dense",))
    chain = SettingParams(steps=2, family="EAGLE3")
    assert model.determined(chain, 1) and model.determined(SettingParams(), 16)
    assert not model.determined(chain, 16)
    with pytest.raises(ConfigError, match=r"the fitted cells do not determine it: it leans on costs they saw only"):
        model.predict(chain, 16)
    assert model.predict(chain, 16, stated=False).per_request_tok_s > 0  # an ordering is still given
    # two depths measured at a second batch size pin what the drafter costs per request and per step there
    extra = []
    for s in (1, 3):
        p = SettingParams(steps=s, family="EAGLE3")
        tau = chain_tau(RATES[:s])
        extra.append(ModelCell(f"s{s}", p, 16, per_request_tok_s=1000 * tau / truth(16, p), acceptance_length=tau))
    pinned = fit_model([*cells, *extra], forms=("dense",))
    assert pinned.determined(chain, 16)
    assert pinned.predict(chain, 16, stated=False).per_request_tok_s == pytest.approx(
        1000 * chain_tau(RATES[:2]) / truth(16, chain), rel=1e-3
    )


def test_acceptance_measured_per_level_is_used_at_that_level() -> None:
    # tau falls with load (3.9 at C=1 to 2.7 at C=16, as MTPLX's greedy table reads); cycle times are exact.
    taus = {1: 3.9, 2: 3.1, 4: 2.9, 8: 2.8, 16: 2.7}
    p = SettingParams(steps=3, family="mtp")
    cells = [
        ModelCell("mtp", p, c, aggregate_tok_s=1000 * c * t / _truth_cycle_ms(c, p, moe=False), acceptance_length=t)
        for c, t in taus.items()
    ]
    model = fit_model(cells, forms=("dense",))
    assert model.train_rms < 1e-6
    assert model.tau(p, 4) == pytest.approx(2.9) and model.tau(p, 32) == pytest.approx(2.7)
    assert model.tau(p, 6) == pytest.approx(2.9 + math.log(1.5) / math.log(2) * (2.8 - 2.9))


def test_a_server_that_queues_part_of_the_load_runs_aggregate_over_rate_requests() -> None:
    # Both figures at every level; at C = 64 the server runs 40 requests and queues the rest (its KV cache):
    # aggregate / decode rate says so, and the model runs 40 there, not 64.
    cells = []
    for s in (0, 2):
        p = SettingParams(steps=s, family="EAGLE3") if s else SettingParams()
        tau = chain_tau(RATES[:s])
        for c in (1, 4, 16, 32, 64):
            b = 40 if (s and c == 64) else c
            v = 1000 * tau / _truth_cycle_ms(b, p, moe=False)
            cells.append(ModelCell(f"s{s}", p, c, per_request_tok_s=v, aggregate_tok_s=b * v, acceptance_length=tau))
    assert running_short(cells) == {SettingParams(steps=2, family="EAGLE3"): 40}
    model = fit_model(cells, forms=("dense",))
    assert model.predict(SettingParams(steps=2, family="EAGLE3"), 64).batch == 40
    assert any(line.startswith("capacity inferred, not read back") for line in model.describe())


def test_chain_and_tree_tau() -> None:
    assert chain_tau([0.5, 0.5]) == pytest.approx(1.75)
    # topk 1 tree == chain with a constant rate
    assert tree_tau([0.8] * 3, 1, 3) == pytest.approx(chain_tau([0.8] * 3))
    # more verified nodes never lower tau; a wider tree beats the chain at the same depth
    wide = [tree_tau([0.75] * 5, 4, m - 1) for m in (2, 4, 8, 16, 32)]
    assert wide == sorted(wide)
    assert wide[-1] > chain_tau([0.75] * 5)
    p = SettingParams(steps=3, family="X")
    assert solve_alpha(p, FamilyAcceptance.constant(0.7, "").tau(p)) == pytest.approx(0.7, abs=1e-6)


def test_unfittable_inputs_raise_config_errors_naming_the_fix() -> None:
    with pytest.raises(ConfigError, match="at least 2"):
        fit_model(_cells([], [1]))
    model = fit_model(_cells([1, 2], [1, 4]))
    with pytest.raises(ConfigError, match="family = 'ngram'"):
        model.predict(SettingParams(steps=3, family="ngram"), 1)
    with pytest.raises(ConfigError, match="concurrency"):
        model.predict(SettingParams(), 0)


def test_turnaround_overhead_is_fitted_from_aggregates_with_output_lengths() -> None:
    # Ground truth: each request also spends O(B) = 200 + 30 * B ms outside decoding (TTFT, prefill, gaps),
    # so aggregate = B * L / (O + L / v) is well below B * v; per-request decode rates do not see it.
    length = 64.0
    cells = []
    for c in _cells([1, 2, 3], [1, 2, 4, 8]):
        assert c.per_request_tok_s is not None
        b = c.concurrency
        aggregate = b * length / ((200 + 30 * b) / 1000 + length / c.per_request_tok_s)
        cells.append(dataclasses.replace(c, aggregate_tok_s=aggregate, output_tokens=length, capacity=None))
    model = fit_model(cells, forms=("dense",))
    assert model.cycle.overhead_ms(4) == pytest.approx(200 + 30 * 4, rel=0.02)
    target = SettingParams(steps=4, family="EAGLE3")
    v = 1000 * chain_tau(RATES[:4]) / _truth_cycle_ms(6, target, moe=False)
    got = model.predict(target, 6, stated=False)
    assert got.per_request_tok_s == pytest.approx(v, rel=0.01)
    assert got.aggregate_tok_s == pytest.approx(6 * length / ((200 + 180) / 1000 + length / v), rel=0.01)


def test_a_ridge_between_powers_of_two_is_found_and_the_best_depth_is_right_at_every_level() -> None:
    # Ground truth: verification turns compute-bound at 45 verified tokens (not a power of two, where the
    # ridge grid used to be), aggregate tok/s only, no acceptance and no capacity: a public sweep's shape.
    def truth(b: int, p: SettingParams) -> float:
        n = b * p.verified
        return 15.0 + 0.1 * b + p.steps * 0.2 * b + 0.4 * max(0.0, n - 45)

    levels = (1, 2, 4, 8, 16, 32, 64)
    cells = []
    for s in range(1, 7):
        p = SettingParams(steps=s, family="EAGLE3")
        tau = chain_tau([0.93] * s)
        for c in levels:
            b = min(c, math.floor(106 / (2 + p.verified)))
            cells.append(ModelCell(f"s{s}", p, c, aggregate_tok_s=1000 * b * tau / truth(b, p)))
    model = fit_model([c for c in cells if c.params.steps <= 3])
    held = [c for c in cells if c.params.steps > 3]
    errors = [
        abs(model.predict(c.params, c.concurrency, stated=False).aggregate_tok_s / (c.aggregate_tok_s or 1) - 1)
        for c in held
    ]
    assert model.form == "roofline" and max(errors) < 0.05
    for c in levels:
        row = [x for x in cells if x.concurrency == c]
        best = max(row, key=lambda x: x.aggregate_tok_s or 0.0)
        chosen = max(row, key=lambda x: model.predict(x.params, c, stated=False).aggregate_tok_s)
        assert (chosen.aggregate_tok_s or 0.0) >= 0.99 * (best.aggregate_tok_s or 0.0), c


def test_each_drafter_family_gets_its_own_rate_when_no_acceptance_is_measured() -> None:
    # Two drafters with different true rates, tok/s only: one shared rate (the old behaviour) cannot fit both.
    truth_rate = {"EAGLE3": 0.85, "ngram": 0.55}

    def cycle(b: int, p: SettingParams) -> float:
        return 12.0 + 0.1 * b + p.steps * (0.5 + 0.05 * b) + 0.02 * b * p.verified

    cells = []
    for family, rate in truth_rate.items():
        for s in (1, 2, 3, 4):
            p = SettingParams(steps=s, family=family)
            tau = chain_tau([rate] * s)
            for c in (1, 2, 4, 8):
                v = 1000 * tau / cycle(c, p)
                cells.append(ModelCell(f"{family}-{s}", p, c, per_request_tok_s=v, aggregate_tok_s=c * v))
    model = fit_model(cells)
    fitted = {f: model.acceptance[f].alpha for f in truth_rate}
    assert all("fitted from throughput" in model.acceptance[f].source for f in truth_rate)
    assert fitted["EAGLE3"] == pytest.approx(0.85, abs=0.03) and fitted["ngram"] == pytest.approx(0.55, abs=0.05)
    assert model.train_rms < 0.01


def test_terms_the_cells_cannot_separate_are_named_not_split_arbitrarily() -> None:
    # topk 1: B*D = B*(s+1) = B + s*B, so the dense verify term is the per-request plus the draft-token term.
    cells = []
    for s in (1, 2, 3):
        p = SettingParams(steps=s, family="EAGLE3")
        tau = chain_tau([0.8] * s)
        for c in (1, 4, 16):
            v = 1000 * tau / (10 + 0.1 * c + s * (0.5 + 0.05 * c) + 0.02 * c * p.verified)
            cells.append(ModelCell(f"s{s}", p, c, per_request_tok_s=v, acceptance_length=tau))
    model = fit_model(cells, forms=("dense",))
    assert model.cycle.unidentified == (("per_request_ms", "draft_token_ms[EAGLE3]", "verify_token_ms"),)
    terms = model.cycle.terms()
    assert terms["verify_token_ms"] == 0.0  # left out, not an arbitrary share
    # the carriers hold its cost exactly: 0.1 + 0.02 per request, 0.05 + 0.02 per draft token
    assert terms["per_request_ms"] == pytest.approx(0.12) and terms["draft_token_ms[EAGLE3]"] == pytest.approx(0.07)
    assert any(line.startswith("not separable from these cells: verify_token_ms") for line in model.describe())
    assert model.predict(SettingParams(steps=5, family="EAGLE3"), 8, stated=False).per_request_tok_s > 0


def test_the_error_of_a_level_left_out_is_filed_as_a_level_prediction() -> None:
    # Exact truth except at C=32, where the figures are off by +/-6 %: the levels' stated error must carry it,
    # the unmeasured depths' must not be built from it alone.
    cells = []
    for c in _cells([1, 2, 3], [1, 4, 16, 32, 64]):
        if c.concurrency == 32:
            sign = 1 if c.params.steps % 2 else -1
            c = ModelCell(c.setting, c.params, 32, aggregate_tok_s=(c.aggregate_tok_s or 0) * (1 + 0.06 * sign))
        cells.append(c)
    model = fit_model(cells)
    interp = model.calibration.halfwidth(LEVEL_INTERPOLATED)
    assert interp is not None and interp > 0.03
    assert model.error_class(SettingParams(steps=2, family="EAGLE3"), 24) == LEVEL_INTERPOLATED
    assert model.error_class(SettingParams(steps=2, family="EAGLE3"), 128) == LEVEL_EXTRAPOLATED
    assert model.error_class(SettingParams(steps=2, family="EAGLE3", max_running_requests=4), 4) == UNMEASURED_CHAIN
    assert any(line.startswith("stated error (calibrated on the held-out errors") for line in model.describe())
