"""A closed-form, steady-state approximation of the event loop (theory 6.1), used to fit profiles fast.

It is smooth in every profile parameter, which the event loop is not (random draws, event order), so
`calibrate` fits this surrogate and then corrects it cell by cell with the event loop's own predictions.
Like everything in `sim`, it is a model prediction, not a measurement.

Approximation: B = min(C, capacity) requests (`theory.throughput.running_requests`) run in lock step;
a wave prefills B prompts (chunked), then decodes `max_tokens - 1` tokens at tau tokens per cycle of
`setting_cycle_ms(B)` (the client sends the next request as soon as one ends, as `tune`'s does):

    per-request tok/s = 1000 * tau / T(B)
    aggregate tok/s   = 1000 * B * max_tokens / (prefill_ms(B prompts) + (max_tokens - 1) / tau * T(B))
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from specfrontier.sim.acceptance import workload_rates
from specfrontier.sim.costs import capacity, setting_cycle_ms
from specfrontier.sim.profile import SimProfile
from specfrontier.sim.setting import SimSetting, resolve_setting
from specfrontier.theory.acceptance import chain_tau
from specfrontier.theory.throughput import per_request_tok_s, running_requests


@dataclass(frozen=True, slots=True)
class SteadyCell:
    """Steady-state figures of one cell under the surrogate."""

    batch: int
    acceptance_length: float
    cycle_ms: float
    per_request_tok_s: float
    aggregate_tok_s: float


def steady_cell(
    profile: SimProfile,
    setting: SimSetting,
    *,
    concurrency: int,
    workload: str,
    temperature: float,
    input_tokens: int,
    max_tokens: int,
) -> SteadyCell:
    """The surrogate's prediction for one closed-loop cell with fixed-length (ignore_eos) outputs."""
    resolved = resolve_setting(setting, spec_default_cap=profile.capacity.spec_default_cap)
    batch = running_requests(concurrency, capacity(profile, resolved))
    tau = chain_tau(
        workload_rates(profile.workload(workload), resolved, temperature, draft_head=profile.model.draft_head)
    )
    cycle = setting_cycle_ms(profile, resolved, batch)
    prompt = batch * input_tokens
    chunks = max(1, math.ceil(prompt / profile.prefill.chunk_tokens))
    prefill = chunks * profile.prefill.batch_ms + profile.prefill.token_ms * prompt
    wave_ms = prefill + (max_tokens - 1) / tau * cycle
    return SteadyCell(
        batch=batch,
        acceptance_length=tau,
        cycle_ms=cycle,
        per_request_tok_s=per_request_tok_s(tau, cycle),
        aggregate_tok_s=1000.0 * batch * max_tokens / wave_ms,
    )


__all__ = ["SteadyCell", "steady_cell"]
