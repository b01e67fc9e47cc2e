"""A window's speculative counts: what the acceptance of exactly one measured window is.

The server's counters read before and after the window, differenced; an engine without window counters
(SGLang) or a server that could not be read gets the sum of the requests' own counts. Pure functions of
the records, shared by the measured cell (`runs.cell`) and the simulator's cells (`sim.cells`), which
sit on different rows: so they live here, below both (docs/architecture.md, "Layers").
"""

from __future__ import annotations

from collections.abc import Sequence

from specfrontier.records import RequestRecord, SpecCounters

PER_REQUEST_SOURCE = "per-request timings (sum over the window's requests; no verify-step count)"
PER_REQUEST_EXACT_SOURCE = "per-request meta_info (sum of correct drafts and verify steps over the window's requests)"


def window_counters(
    before: SpecCounters | None,
    after: SpecCounters | None,
    records: list[RequestRecord],
    counters_source: str,
) -> tuple[SpecCounters | None, str | None]:
    """Acceptance for exactly this window: the server's counter diff, else the per-request sums."""
    if before is not None and after is not None:
        return after.minus(before), counters_source
    counters = per_request_counters(records)
    if counters is None:
        return None, None
    return counters, PER_REQUEST_SOURCE if counters.verify_steps == 0 else PER_REQUEST_EXACT_SOURCE


def per_request_counters(records: Sequence[RequestRecord]) -> SpecCounters | None:
    """The window's speculative counts summed over its successful requests' own stats (None: none had any).

    Verify steps count only when every request reports them: a partial sum would bias the acceptance
    length, so it is 0 (unknown) then."""
    stats = [r.spec for r in records if r.ok and r.spec is not None]
    if not stats:
        return None
    verify = 0 if any(s.verify_steps is None for s in stats) else sum(s.verify_steps or 0 for s in stats)
    return SpecCounters(sum(s.draft_tokens for s in stats), sum(s.accepted_tokens for s in stats), verify)


__all__ = ["PER_REQUEST_EXACT_SOURCE", "PER_REQUEST_SOURCE", "per_request_counters", "window_counters"]
