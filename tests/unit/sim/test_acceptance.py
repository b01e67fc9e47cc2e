"""Acceptance formulas: chain tau, temperature, tree widening, expert coverage."""

from __future__ import annotations

import pytest

from specfrontier.sim import SimSetting, load_profile, resolve_setting
from specfrontier.sim.acceptance import chain_rates, workload_rates
from specfrontier.theory.acceptance import chain_tau as acceptance_length
from specfrontier.theory.acceptance import tree_tau
from specfrontier.theory.cycle import expert_coverage


def test_chain_tau_matches_the_geometric_formula() -> None:
    alpha, steps = 0.8, 4
    expected = (1 - alpha ** (steps + 1)) / (1 - alpha)  # Leviathan eq. 1
    assert acceptance_length([alpha] * steps) == pytest.approx(expected)


def test_temperature_lowers_every_rate_and_last_rate_repeats() -> None:
    greedy = chain_rates([0.8, 0.7], 4, 0.0, 0.2)
    sampled = chain_rates([0.8, 0.7], 4, 0.7, 0.2)
    assert greedy == pytest.approx([0.8, 0.7, 0.7, 0.7])
    assert all(s < g for s, g in zip(sampled, greedy, strict=True))


def test_tree_beats_the_chain_and_the_simulator_draws_the_theory_tau() -> None:
    chat = load_profile("seed-qwen3.5-122b-a10b").workload("chat")
    chain = resolve_setting(SimSetting("EAGLE3", num_steps=3, eagle_topk=1))
    tree = resolve_setting(SimSetting("EAGLE3", num_steps=3, eagle_topk=4, num_draft_tokens=8))
    drawn = acceptance_length(workload_rates(chat, tree, 0.0))
    assert drawn > acceptance_length(workload_rates(chat, chain, 0.0))
    # the per-depth rates the event loop draws give exactly the tree's tau (theory.acceptance.tree_tau),
    # the one the fitted model uses
    top1 = chain_rates(chat.acceptance_per_position, 3, 0.0, chat.temperature_drop)
    assert drawn == pytest.approx(tree_tau(top1, 4, 7, chat.rank_share))


def test_expert_coverage_matches_theory_table() -> None:
    # theory.md 2.1: Qwen3.5-122B-A10B (E=256, k=8): Ncov(16) = 102, Ncov(64) = 222.
    assert expert_coverage(16, 256, 8) == pytest.approx(102, abs=0.5)
    assert expert_coverage(64, 256, 8) == pytest.approx(222, abs=0.5)
    assert expert_coverage(0, 256, 8) == 0.0
