"""The 3-D tree space of benchmarks/model_accuracy_trees.py is the one issue 28 asks for: steps 1-6 x topk
1, 2, 4, 8 x draft tokens within SGLang's bound, at least 60 settings, fitted on at most a quarter."""

from __future__ import annotations

from types import ModuleType

from builders import load_benchmark


def _module() -> ModuleType:
    return load_benchmark("model_accuracy_trees")


def test_space_spans_every_dimension_within_sglangs_bound() -> None:
    bench = _module()
    settings = bench.space()
    assert len(settings) >= 60 and len(set(settings)) == len(settings)
    assert {p.steps for p in settings} == set(range(1, 7)) and {p.topk for p in settings} == {1, 2, 4, 8}
    for p in settings:
        # SGLang: num_draft_tokens - 1 <= topk + (num_steps - 1) * topk^2; a chain verifies steps + 1
        assert 2 <= p.verified <= p.topk + (p.steps - 1) * p.topk**2 + 1
        assert p.topk > 1 or p.verified == p.steps + 1
    # SGLang's documented examples are in the space
    assert {(p.steps, p.topk, p.verified) for p in settings} >= {(3, 4, 16), (5, 8, 64), (3, 2, 8)}


def test_fit_draws_use_at_most_a_quarter_with_every_topk() -> None:
    bench = _module()
    settings = bench.space()
    for draw in range(3):
        chosen = bench.fit_draw(settings, draw)
        assert len(chosen) <= 0.25 * len(settings)
        assert {p.topk for p in chosen} == {1, 2, 4, 8}
