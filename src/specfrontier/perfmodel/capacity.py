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
        return "unknown: batch = concurrency"


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


__all__ = ["CapacityLaw", "fit_capacity"]
