"""The theory of SGLang's draft trees: acceptance, verify and draft cost, MoE coverage, capacity.

SGLang (python/sglang/srt/speculative/eagle_utils.py, `select_top_k_tokens` and `organize_draft_results`)
expands a beam of `topk` nodes per level over `num_steps` levels and verifies the `num_draft_tokens - 1`
best of the topk + (num_steps - 1) * topk^2 candidates; these tests pin the theory's reading of it."""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import pytest

from specfrontier.theory.acceptance import (
    chain_tau,
    conditional_rates,
    rank_probabilities,
    tree_nodes,
    tree_reach,
    tree_tau,
)
from specfrontier.theory.capacity import hybrid_state_capacity, kv_capacity, kv_reserved_tokens
from specfrontier.theory.cycle import cycle_time_ms, expert_coverage


def test_topk_1_tree_is_the_chain_with_per_depth_rates() -> None:
    rates = [0.9, 0.8, 0.7, 0.6]
    assert tree_tau(rates, 1, 4) == pytest.approx(chain_tau(rates))
    assert tree_reach(rates, 1, 4, 0.4) == pytest.approx([0.9, 0.72, 0.504, 0.3024])


def test_candidates_are_the_beam_sglang_scores() -> None:
    # topk + (steps - 1) * topk^2 candidates: 4 + 2 * 16 = 36 for (3, 4), 8 + 4 * 64 = 264 for (5, 8)
    assert len(tree_nodes([0.7] * 3, 4, 0.4)) == 36
    assert len(tree_nodes([0.7] * 5, 8, 0.4)) == 264
    # the beam keeps topk nodes per level: with topk 2 and 3 levels, 2 + 4 + 4 candidates, not 2 + 4 + 8
    assert [d for _, d in tree_nodes([0.7] * 3, 2, 0.4)].count(3) == 4


def test_tau_rises_with_draft_tokens_and_saturates_at_the_candidates() -> None:
    taus = [tree_tau([0.75] * 5, 4, d - 1) for d in (2, 4, 8, 16, 32, 64, 69)]
    assert taus == sorted(taus) and taus[0] < taus[-1]
    assert taus[0] == pytest.approx(1.75)  # one node: the top-1 candidate of depth 1
    assert tree_tau([0.75] * 5, 4, 68) == pytest.approx(tree_tau([0.75] * 5, 4, 500))  # no more candidates
    # a wider tree at the same verified tokens beats the chain of the same depth, and a deeper one more
    assert tree_tau([0.75] * 5, 4, 15) > chain_tau([0.75] * 5)
    assert tree_tau([0.75] * 6, 4, 15) >= tree_tau([0.75] * 5, 4, 15)


def test_theory_example_of_the_rank_model() -> None:
    # theory.md 1.3: alpha 0.75, steps 5, topk 4, m = 8/16/32/64 -> about 3.46 / 3.88 / 4.25 / 4.35 with
    # q2..q4 = 0.10, 0.04, 0.02; a share of 0.4 gives q2 = 0.10 and slightly larger q3, q4
    assert rank_probabilities(0.75, 4, 0.4)[:2] == pytest.approx([0.75, 0.10])
    got = [tree_tau([0.75] * 5, 4, m - 1, 0.4) for m in (8, 16, 32, 64)]
    assert got == pytest.approx([3.46, 3.90, 4.39, 4.53], abs=0.01)


def test_reach_is_a_distribution_the_simulator_can_draw_depth_by_depth() -> None:
    reach = tree_reach([0.7] * 3, 4, 7, 0.4)
    assert all(a >= b for a, b in itertools.pairwise(reach)) and reach[0] <= 1
    rates = conditional_rates(reach)
    assert chain_tau(rates) == pytest.approx(1 + sum(reach))
    assert conditional_rates([0.5, 0.0, 0.0]) == [0.5, 0.0, 0.0]


@dataclass(frozen=True)
class _Costs:
    base_ms: float = 10.0
    request_ms: float = 0.0
    spec_overhead_ms: float = 0.0
    draft_step_ms: float = 0.0
    draft_token_ms: float = 0.1
    expert_ms: float = 0.0
    verify_token_ms: float = 0.01
    compute_knee_tokens: float = 1e9
    compute_token_ms: float = 0.0


def test_verify_costs_draft_tokens_and_drafting_costs_topk_branches() -> None:
    costs = _Costs()
    chain = cycle_time_ms(costs, 4, True, 3, 1, 4, 1, 1)
    tree = cycle_time_ms(costs, 4, True, 3, 4, 16, 1, 1)
    # verify: B * D tokens (4 * 16 vs 4 * 4), not B * (steps + 1); draft: steps * B * topk tokens (3 * 4 * 4 vs 3 * 4)
    assert tree - chain == pytest.approx(0.01 * 4 * (16 - 4) + 0.1 * 3 * 4 * (4 - 1))


def test_moe_verify_touches_more_experts_as_more_tokens_are_verified() -> None:
    costs = _Costs(expert_ms=0.02, verify_token_ms=0.0, draft_token_ms=0.0)
    by_draft = [cycle_time_ms(costs, 1, True, 3, 4, d, 256, 8) for d in (4, 16, 64)]
    assert by_draft == sorted(by_draft)
    assert by_draft[1] - by_draft[0] == pytest.approx(0.02 * (expert_coverage(16, 256, 8) - expert_coverage(4, 256, 8)))
    # a dense target (every token reaches every expert) pays the same at every D
    assert cycle_time_ms(costs, 1, True, 3, 4, 64, 8, 8) == pytest.approx(cycle_time_ms(costs, 1, True, 3, 4, 4, 8, 8))


def test_capacity_reserves_per_request_for_the_tree() -> None:
    # hybrid state: one intermediate SSM state per verified draft token (theory 2.4)
    assert hybrid_state_capacity(106, 2, 16) == 5  # (3, 4, 16): floor(106 / 18)
    assert hybrid_state_capacity(106, 2, 4) == 17  # the chain of the same depth
    # KV pool: context + D verified + steps * topk drafted tokens per request
    assert kv_reserved_tokens(3, 4, 16) == 28 and kv_reserved_tokens(3, 1, 4) == 7 and kv_reserved_tokens(0, 1, 1) == 1
    assert kv_capacity(20000, 400, kv_reserved_tokens(3, 4, 16)) == 46  # floor(20000 / 428)
    assert kv_capacity(20000, 400, kv_reserved_tokens(3, 1, 4)) == 49  # floor(20000 / 407)
