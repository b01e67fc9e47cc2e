"""The engine's capacity (max running requests) per setting, fitted from read-back capacities (theory 2.4).

Hybrid linear-attention models in SGLang lose running slots to speculation: every running request holds
S0 recurrent-state slots plus one per verified draft token, so `MRR(D) = floor(M / (S0 + D))` (the law
is `theory.capacity`'s, shared with the simulator). When the read-back capacities of two or more
speculative settings fall with D, the law is solved exactly (the first S0 on `theory.capacity.S0_GRID`,
0 to 16 in halves, that reproduces every reading, M in the middle of the feasible range). When they do
not depend on D (llama.cpp slots, a pure-attention KV pool), the capacity is a constant. Without readings the batch is
the client concurrency. A setting's own reading always wins over the law.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from specfrontier.perfmodel.types import ModelCell, SettingParams
from specfrontier.theory.capacity import S0_GRID, hybrid_state_capacity, solve_hybrid_state_law, with_user_cap


@dataclass(frozen=True, slots=True)
class CapacityLaw:
    """How capacity depends on the setting. `kind`: 'hybrid-state' (the law), 'constant', or 'unknown'."""

    kind: str
    state_slots: float | None = None
    slots_per_request: float | None = None
    constant: int | None = None
    no_spec: int | None = None
    note: str = ""

    def capacity(self, params: SettingParams) -> int | None:
        """Predicted running-request capacity of `params` (None: unbounded as far as the model knows)."""
        if not params.speculative and self.no_spec is not None:
            law: int | None = self.no_spec
        elif self.kind == "hybrid-state" and params.speculative:
            assert self.state_slots is not None and self.slots_per_request is not None
            law = hybrid_state_capacity(self.state_slots, self.slots_per_request, params.verified)
        else:
            law = self.constant
        return with_user_cap(law, params.max_running_requests)

    def describe(self) -> str:
        if self.kind == "hybrid-state":
            return f"MRR(D) = floor({self.state_slots:g} / ({self.slots_per_request:g} + D)) {self.note}".strip()
        if self.kind == "constant":
            return f"constant {self.constant} {self.note}".strip()
        return f"unknown: batch = concurrency {self.note}".strip()


SHORTFALL = 0.7
"""A cell whose running batch (aggregate / decode rate, over the setting's own ratio at its lowest level) is
below this share of its concurrency ran fewer requests than the clients sent: the server queued the rest.
Not closer to 1: a turnaround overhead that grows with the batch (prefill of the requests that join) lowers
the ratio gradually, by 10-20 % from C = 1 to 8 in a simulated truth with 30 ms per running request; the
queueing server of the public example ran at 0.55 of its clients."""


def running_short(cells: Sequence[ModelCell]) -> dict[SettingParams, int]:
    """Capacities read from cells that give both an aggregate and a decode rate: the running batch is
    B = aggregate / rate (X = B x v), corrected by the setting's own ratio at its lowest level (where B = C:
    TTFT and client gaps count in the aggregate only); a setting whose B falls short of C (SHORTFALL) runs at
    most the largest such B. Public example: speculators' DSpark at N = 128 ran about 70 requests
    (aggregate 3967 tok/s at 59.7 tok/s each) where its server's KV cache held 74 and queued the rest."""
    by_setting: dict[SettingParams, list[ModelCell]] = {}
    for c in cells:
        if c.aggregate_tok_s and c.per_request_tok_s and c.capacity is None:
            by_setting.setdefault(c.params, []).append(c)
    out = {}
    for params, own in by_setting.items():
        own.sort(key=lambda c: c.concurrency)
        first = own[0]
        ratio = (first.aggregate_tok_s or 0.0) / ((first.per_request_tok_s or 1.0) * first.concurrency)
        short = [
            running
            for c in own[1:]
            if (running := (c.aggregate_tok_s or 0.0) / ((c.per_request_tok_s or 1.0) * ratio))
            < SHORTFALL * c.concurrency
        ]
        if short:
            out[params] = max(1, round(max(short)))
    return out


def fit_capacity(cells: Sequence[ModelCell]) -> CapacityLaw:
    """Fit the law from the capacities read back per setting (one reading per distinct setting)."""
    readings: dict[SettingParams, int] = {}
    for c in cells:
        if c.capacity is not None:
            readings[c.params] = c.capacity
    no_spec = [cap for p, cap in readings.items() if not p.speculative]
    no_spec_cap = max(no_spec) if no_spec else None
    spec = [(p.verified, cap) for p, cap in readings.items() if p.speculative and p.max_running_requests is None]
    if not spec:
        spec = [(p.verified, cap) for p, cap in readings.items() if p.speculative]
    if not spec:
        if no_spec_cap is None:
            return CapacityLaw("unknown")
        return CapacityLaw("constant", constant=no_spec_cap, no_spec=no_spec_cap, note="(no speculative reading)")
    by_d: dict[int, int] = {}
    for d, cap in spec:
        by_d[d] = min(cap, by_d.get(d, cap))
    if len(set(by_d.values())) == 1:
        return CapacityLaw("constant", constant=next(iter(by_d.values())), no_spec=no_spec_cap)
    law = solve_hybrid_state_law(sorted(by_d.items()), S0_GRID)
    if law is not None:
        return CapacityLaw("hybrid-state", law[0], law[1], no_spec=no_spec_cap, note=f"(fits {len(by_d)} readings)")
    return CapacityLaw(
        "constant",
        constant=min(by_d.values()),
        no_spec=no_spec_cap,
        note="(readings vary with D but no floor(M/(S0+D)) law fits: smallest reading used)",
    )


__all__ = ["SHORTFALL", "CapacityLaw", "fit_capacity", "running_short"]
