"""The discrete-event core: a MODEL of a continuous-batching speculative-decoding server (SGLang-like).

Nothing here is measured; it predicts what a server described by a `SimProfile` would do. The core
knows nothing about clocks or clients: it holds a virtual time `now_ns` and runs one scheduler
iteration per `step()`, so the virtual-time face can run a whole cell in milliseconds and an HTTP
face can pace the same steps against a wall clock.

Scheduling follows SGLang's defaults under speculation (engines.md 1.3, theory 2.1 and 2.5):

- at most `capacity` requests hold a slot (running or being prefilled); the rest wait, first come first
  served; requests submitted during an iteration are seen when the next one starts;
- a waiting request that fits is prefilled before the running batch decodes again (prefill has priority,
  and mixed prefill+decode batches are off under speculation), in iterations of at most
  `prefill.chunk_tokens` prompt tokens; the running batch stalls meanwhile; a request emits its first
  token when its prompt is done;
- a decode cycle drafts `num_steps` tokens and verifies `num_draft_tokens` for every running request in
  `cycle_time_ms(B)`; each request then streams one chunk of `1 + accepted` tokens, drafts being
  accepted depth by depth until the first rejection (acceptance.py); a request ends at its `stop_at`
  length (max_tokens with ignore_eos, else its sampled natural EOS), extra accepted tokens discarded.

Determinism: the k-th request created gets its own numpy Generator seeded with (seed, k), and every draw
about it (natural EOS, acceptance spread, acceptance per cycle) comes from that stream. A request's fate
therefore does not depend on event order, so a small change of a cost parameter moves timings only:
the predictions are smooth enough to calibrate against, and identical for identical inputs.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from specfrontier.records import RequestRecord, RequestSpecStats
from specfrontier.sim.acceptance import request_miss_scale, scaled_rates, workload_rates
from specfrontier.sim.costs import capacity, cycle_time_ms, prefill_time_ms
from specfrontier.sim.profile import SimProfile, WorkloadModel
from specfrontier.sim.schedule import ScheduleState
from specfrontier.sim.setting import ResolvedSetting

_NS_PER_MS = 1_000_000
_UNIFORM_BLOCK = 64


@dataclass(slots=True)
class SimRequest:
    """One request inside the model: its sampled fate and its progress."""

    request_id: str
    send_ns: int
    prompt_tokens: int
    max_tokens: int
    stop_at: int
    """Completion length at which it ends: max_tokens, or the natural EOS if that comes first."""
    natural_eos: int
    """Output length at which the model would emit EOS (beyond max_tokens when it never would)."""
    finish_reason: str
    rates: list[float]
    post_eos_rates: list[float]
    rng: np.random.Generator
    prefilled: int = 0
    generated: int = 0
    first_token_ns: int | None = None
    end_ns: int | None = None
    chunk_ns: list[int] = field(default_factory=list)
    chunk_tokens: list[int] = field(default_factory=list)
    verify_steps: int = 0
    accepted: int = 0
    drafted: int = 0
    _uniforms: list[list[float]] = field(default_factory=list)
    _next_uniform: int = 0

    def to_record(self, *, speculative: bool) -> RequestRecord:
        """The RequestRecord a streaming client would have built for this request (virtual-time stamps)."""
        if self.end_ns is None:
            raise ValueError(f"request {self.request_id} has not finished")
        spec = RequestSpecStats(self.drafted, self.accepted, self.verify_steps) if speculative else None
        return RequestRecord(
            prompt_id=self.request_id,
            send_ns=self.send_ns,
            end_ns=self.end_ns,
            first_token_ns=self.first_token_ns,
            chunk_ns=tuple(self.chunk_ns),
            chunk_tokens=tuple(self.chunk_tokens),
            prompt_tokens=self.prompt_tokens,
            completion_tokens=self.generated,
            spec=spec,
            finish_reason=self.finish_reason,
        )


@dataclass(frozen=True, slots=True)
class StepResult:
    """What one scheduler iteration did, for faces that pace or inspect the model."""

    kind: Literal["prefill", "decode"]
    start_ns: int
    end_ns: int
    batch: int
    """Requests in the iteration (prefilled, or decoded)."""
    finished: tuple[SimRequest, ...]
    depth: int = 0
    """A decode step's drafted depth (a scheduled setting's entry for this batch; 0 without speculation)."""


class ServerCore:
    """The modelled server: a waiting queue, slots limited by the capacity law, prefill and decode steps."""

    def __init__(self, profile: SimProfile, setting: ResolvedSetting, *, seed: int) -> None:
        self.profile = profile
        self.setting = setting
        self.capacity = capacity(profile, setting)
        self.seed = seed
        self.created = 0
        self.now_ns = 0
        self.waiting: deque[SimRequest] = deque()
        self.prefilling: list[SimRequest] = []
        self.running: list[SimRequest] = []
        self._cycle_ns: dict[tuple[int, int], int] = {}
        self._steps = setting.num_steps if setting.speculative else 0
        self._schedule = ScheduleState(setting.schedule, setting.schedule_start) if setting.schedule else None

    # -- requests -------------------------------------------------------------------------------
    def new_request(
        self,
        request_id: str,
        *,
        send_ns: int,
        workload: WorkloadModel,
        temperature: float,
        ignore_eos: bool,
        prompt_tokens: int,
        max_tokens: int,
    ) -> SimRequest:
        """Sample a request's natural EOS length and acceptance spread from its own seeded stream."""
        rng = np.random.default_rng((self.seed, self.created))
        self.created += 1
        natural = max(1, round(float(rng.lognormal(np.log(workload.output_median_tokens), workload.output_sigma))))
        if ignore_eos or natural >= max_tokens:
            stop_at, reason = max_tokens, "length"
        else:
            stop_at, reason = natural, "stop"
        scale = request_miss_scale(workload.request_dispersion, rng)
        head = self.profile.model.draft_head
        rates = scaled_rates(workload_rates(workload, self.setting, temperature, draft_head=head), scale)
        post = scaled_rates(workload_rates(workload, self.setting, temperature, after_eos=True, draft_head=head), scale)
        return SimRequest(request_id, send_ns, prompt_tokens, max_tokens, stop_at, natural, reason, rates, post, rng)

    def submit(self, request: SimRequest) -> None:
        """Queue a request; it is considered from the next iteration on."""
        self.waiting.append(request)

    @property
    def busy(self) -> bool:
        """Whether any request is waiting, being prefilled or running."""
        return bool(self.waiting or self.prefilling or self.running)

    # -- iterations -----------------------------------------------------------------------------
    def step(self) -> StepResult:
        """Run one scheduler iteration from `now_ns` (prefill if a waiting request fits, else decode)."""
        if self.prefilling or (self.waiting and len(self.running) + len(self.prefilling) < self.capacity):
            return self._prefill()
        if self.running:
            return self._decode()
        raise RuntimeError("step() called on an idle server; check `busy` first")

    def _prefill(self) -> StepResult:
        budget = self.profile.prefill.chunk_tokens
        batch: list[tuple[SimRequest, int]] = []
        for request in self.prefilling:
            take = min(budget, request.prompt_tokens - request.prefilled)
            batch.append((request, take))
            budget -= take
        while self.waiting and budget > 0 and len(self.running) + len(self.prefilling) < self.capacity:
            request = self.waiting.popleft()
            self.prefilling.append(request)
            take = min(budget, request.prompt_tokens)
            batch.append((request, take))
            budget -= take
        tokens = sum(take for _, take in batch)
        start = self.now_ns
        end = start + round(prefill_time_ms(self.profile, tokens) * _NS_PER_MS)
        finished: list[SimRequest] = []
        for request, take in batch:
            request.prefilled += take
            if request.prefilled < request.prompt_tokens:
                continue
            self.prefilling.remove(request)
            request.generated = 1
            request.first_token_ns = end
            request.chunk_ns.append(end)
            request.chunk_tokens.append(1)
            if request.stop_at <= 1:
                request.end_ns = end
                finished.append(request)
            else:
                self.running.append(request)
        self.now_ns = end
        return StepResult("prefill", start, end, len(batch), tuple(finished))

    def _depth(self, batch: int) -> int:
        """The depth this iteration runs: the schedule entry's steps for the running batch, else the setting's."""
        if self._schedule is None:
            return self._steps
        return self._schedule.controller(batch).steps

    def _cycle_duration_ns(self, batch: int, depth: int) -> int:
        duration = self._cycle_ns.get((batch, depth))
        if duration is None:
            setting = self.setting.at_depth(depth) if self.setting.schedule else self.setting
            duration = round(cycle_time_ms(self.profile, setting, batch) * _NS_PER_MS)
            self._cycle_ns[batch, depth] = duration
        return duration

    def _accepted(self, request: SimRequest, depth: int | None) -> int:
        """Drafts accepted this cycle: depth by depth until the first rejection (a scheduled iteration
        draws only its `depth` first positions; None: every position of the setting, a tree's too)."""
        rates = request.post_eos_rates if request.generated >= request.natural_eos else request.rates
        if depth is not None:
            rates = rates[:depth]
        if not rates:
            return 0
        if request._next_uniform >= len(request._uniforms):
            width = max(len(request.rates), len(rates))  # a block serves every depth a schedule may run
            request._uniforms = request.rng.random((_UNIFORM_BLOCK, width)).tolist()
            request._next_uniform = 0
        draws = request._uniforms[request._next_uniform]
        request._next_uniform += 1
        accepted = 0
        for u, a in zip(draws, rates, strict=False):
            if u >= a:
                break
            accepted += 1
        return accepted

    def _decode(self) -> StepResult:
        start = self.now_ns
        batch = len(self.running)
        depth = self._depth(batch)
        end = start + self._cycle_duration_ns(batch, depth)
        if self.setting.schedule:
            drafts = depth
        else:
            drafts = self.setting.num_draft_tokens - 1 if self.setting.speculative else 0
        still: list[SimRequest] = []
        finished: list[SimRequest] = []
        drafted_accepted = 0
        for request in self.running:
            drawn = self._accepted(request, depth if self.setting.schedule else None)
            drafted_accepted += drawn
            tokens = min(1 + drawn, request.stop_at - request.generated)
            request.generated += tokens
            request.chunk_ns.append(end)
            request.chunk_tokens.append(tokens)
            if depth:
                request.verify_steps += 1
                request.accepted += tokens - 1
                request.drafted += drafts
            if request.generated >= request.stop_at:
                request.end_ns = end
                finished.append(request)
            else:
                still.append(request)
        if self._schedule is not None:
            self._schedule.controller(batch).observe(drafted_accepted / batch if depth else 0.0)
        self.running = still
        self.now_ns = end
        return StepResult("decode", start, end, batch, tuple(finished), depth)


__all__ = ["ServerCore", "SimRequest", "StepResult"]
