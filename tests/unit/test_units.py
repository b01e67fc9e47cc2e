"""Time units, written once (`specfrontier.units`): the integer constants divide as the float ones they
replaced did."""

from __future__ import annotations

from specfrontier.units import NS_PER_MS, NS_PER_S, ns_to_ms, ns_to_s, s_to_ns


def test_units_divide_as_the_float_constants_did() -> None:
    for ns in (0, 1, 999_999, 1_234_567_891, 86_400 * NS_PER_S + 7):
        assert ns_to_ms(ns) == ns / 1e6
        assert ns_to_s(ns) == ns / 1e9
    assert (NS_PER_MS, NS_PER_S, s_to_ns(0.005)) == (1_000_000, 1_000_000_000, 5_000_000)
