"""Time units, defined once.

Every stamp specfrontier takes is an integer of `time.perf_counter_ns()` nanoseconds; reports speak in
milliseconds (latencies) and seconds (windows, rates). The conversions used to be a private `1e6` or
`1_000_000` in each module, which invites a slip of three zeros in one of them; here they are named once.

The constants are integers on purpose: dividing an integer nanosecond count by them is exact up to the
final rounding, and gives the same float as dividing by `1e6` / `1e9` did (counts here stay below 2**53,
about 104 days), so no stored or reported figure moves. Numpy arrays divide by them the same way.
"""

from __future__ import annotations

NS_PER_MS = 1_000_000
"""Nanoseconds per millisecond."""
NS_PER_S = 1_000_000_000
"""Nanoseconds per second."""
MS_PER_S = 1_000
"""Milliseconds per second."""


def ns_to_ms(ns: float) -> float:
    """A nanosecond duration (or difference of stamps) in milliseconds."""
    return ns / NS_PER_MS


def ns_to_s(ns: float) -> float:
    """A nanosecond duration (or difference of stamps) in seconds."""
    return ns / NS_PER_S


def s_to_ns(seconds: float) -> int:
    """Seconds as whole nanoseconds (rounded), e.g. to schedule against `perf_counter_ns`."""
    return round(seconds * NS_PER_S)


__all__ = ["MS_PER_S", "NS_PER_MS", "NS_PER_S", "ns_to_ms", "ns_to_s", "s_to_ns"]
