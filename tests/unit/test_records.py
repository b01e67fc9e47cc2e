"""Acceptance figures derived from speculative counters: one definition used by every report."""

from __future__ import annotations

import pytest

from specfrontier.records import SpecCounters


def test_acceptance_figures_from_counts() -> None:
    c = SpecCounters(draft_tokens=40, accepted_tokens=30, verify_steps=10, accepted_per_position=(9, 8, 7, 6))
    assert c.acceptance_rate == pytest.approx(0.75)
    assert c.acceptance_length == pytest.approx(4.0)  # 1 + 30 / 10
    assert c.per_position_rate == pytest.approx((0.9, 0.8, 0.7, 0.6))


def test_unknown_denominators_give_none_not_zero() -> None:
    c = SpecCounters(draft_tokens=0, accepted_tokens=0, verify_steps=0, accepted_per_position=(1,))
    assert c.acceptance_rate is None
    assert c.acceptance_length is None
    assert c.per_position_rate == ()
