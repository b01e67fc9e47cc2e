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
  `setting_cycle_ms(B)`; each request then streams one chunk of `1 + accepted` tokens, drafts being
  accepted depth by depth until the first rejection (acceptance.py); a request ends at its `stop_at`
  length (max_tokens with ignore_eos, else its sampled natural EOS), extra accepted tokens discarded.

Determinism: the k-th request created gets its own numpy Generator seeded with (seed, k), and every draw
about it (natural EOS, acceptance spread, acceptance per cycle) comes from that stream. A request's fate
therefore does not depend on event order, so a small change of a cost parameter moves timings only:
the predictions are smooth enough to calibrate against, and identical for identical inputs.

Speed: under a static setting (no schedule) a request's tokens per decode cycle depend on its own stream
only, so they are drawn once, vectorised, when its prefill ends (`_token_plan`), and `advance` runs a
stretch of decode cycles over an unchanged batch in one go (until a request ends or the caller's next
send is due) instead of one Python iteration per cycle and request. The records are identical to those of
`step()` called cycle by cycle: both read the same plan, and a scheduled setting (whose depth depends on
the batch) is still drawn cycle by cycle.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from specfrontier.records import RequestRecord, RequestSpecStats
from specfrontier.sim.acceptance import request_miss_scale, scaled_rates, workload_rates
from specfrontier.sim.costs import capacity, prefill_time_ms, setting_cycle_ms, zero_step_extend_ms
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
    """Scheduled settings: the block of uniforms `_accepted` draws its cycles from, a row a cycle."""
    _next_uniform: int = 0
    plan: list[int] = field(default_factory=list)
    """Static settings: tokens of each decode cycle, drawn when the prefill ends (`_token_plan`)."""
    cursor: int = 0
    """Decode cycles of `plan` already run."""

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


def _cycle_tokens(uniforms: np.ndarray, rates: list[float]) -> np.ndarray:
    """Tokens per decode cycle, one cycle per row of `uniforms`: 1 + the drafts accepted depth by depth until
    the first rejection (a draw passes when u < a), as `ServerCore._accepted` counts one row."""
    rows, width = len(uniforms), len(rates)
    passes = np.zeros((rows, width + 1), dtype=bool)  # a last column that always fails ends every row
    np.less(uniforms[:, :width], np.asarray(rates, dtype=np.float64), out=passes[:, :width])
    tokens: np.ndarray = passes.argmin(axis=1) + 1  # argmin: the first rejection
    return tokens


def _token_plan(request: SimRequest) -> list[int]:
    """The tokens of each decode cycle the request will run, from its `generated` count to its `stop_at`.

    Why: under a static setting a cycle's tokens depend on the request's own stream only, so drawing them all
    at once (vectorised) gives the very numbers `_accepted` would draw cycle by cycle. The uniforms are the same
    ones in the same order (one row of len(rates) per cycle; blocks of `_UNIFORM_BLOCK` rows continue one
    stream); rows drawn beyond the last cycle are never read, and the stream serves nothing after its cycles.
    Cycles that start before the natural EOS use `rates`, the others `post_eos_rates`; the last is cut at
    `stop_at`."""
    generated, stop, natural = request.generated, request.stop_at, request.natural_eos
    if generated >= stop:
        return []
    if not request.rates:  # no speculation: one token a cycle, nothing drawn
        return [1] * (stop - generated)
    rows = -(-(stop - generated) // _UNIFORM_BLOCK) * _UNIFORM_BLOCK  # every cycle makes at least one token
    uniforms = request.rng.random((rows, len(request.rates)))
    before_eos = _cycle_tokens(uniforms, request.rates)
    after_eos = before_eos
    if natural < stop and request.post_eos_rates != request.rates:
        after_eos = _cycle_tokens(uniforms, request.post_eos_rates)
    plan: list[int] = []
    row = 0
    while generated < stop:
        tokens, limit = (after_eos, stop) if generated >= natural else (before_eos, min(natural, stop))
        ends = np.cumsum(tokens[row:]) + generated  # ends[j]: generated after cycle row + j
        # this phase's cycles: those that start below `limit` (the first always does)
        cycles = min(int(np.searchsorted(ends, limit, side="left")) + 1, len(ends))
        taken: list[int] = tokens[row : row + cycles].tolist()
        generated = int(ends[cycles - 1])
        if generated > stop:
            taken[-1] -= generated - stop
            generated = stop
        plan += taken
        row += cycles
    return plan


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
        self._rates: dict[tuple[int, float], tuple[WorkloadModel, list[float], list[float]]] = {}

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
        base, base_post = self._workload_rates(workload, temperature)
        rates, post = scaled_rates(base, scale), scaled_rates(base_post, scale)
        return SimRequest(request_id, send_ns, prompt_tokens, max_tokens, stop_at, natural, reason, rates, post, rng)

    def _workload_rates(self, workload: WorkloadModel, temperature: float) -> tuple[list[float], list[float]]:
        """The workload's mean rates before and after the natural EOS, computed once per workload and temperature
        (they are the same for every request; only the per-request spread differs)."""
        key = (id(workload), temperature)
        cached = self._rates.get(key)
        if cached is None or cached[0] is not workload:
            head = self.profile.model.draft_head
            rates = workload_rates(workload, self.setting, temperature, draft_head=head)
            post = workload_rates(workload, self.setting, temperature, after_eos=True, draft_head=head)
            cached = self._rates[key] = (workload, rates, post)
        return cached[1], cached[2]

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
        if self._prefill_due():
            return self._prefill()
        if self.running:
            return self._decode()
        raise RuntimeError("step() called on an idle server; check `busy` first")

    def advance(self, next_send_ns: int | None = None) -> tuple[SimRequest, ...]:
        """Run one iteration, or, when it is a decode under a static setting, every decode iteration over the
        same batch up to the first that ends a request or the last that starts before `next_send_ns` (the
        caller's next send, which may change the batch); return the requests that ended.

        Why: a virtual-time client needs only the iterations where something changes; the state and records
        are exactly those of calling `step()` that many times, in a few list operations per request."""
        if self._schedule is not None or self._prefill_due() or not self.running:
            return self.step().finished
        cycles = min(len(r.plan) - r.cursor for r in self.running)
        duration = self._cycle_duration_ns(len(self.running), self._steps)
        if next_send_ns is not None and duration > 0:
            # iteration j starts at now + (j - 1) * duration; the send is submitted before the first at or after it
            cycles = min(cycles, max(1, -(-(next_send_ns - self.now_ns) // duration)))
        return self._decode_static(cycles).finished

    def _prefill_due(self) -> bool:
        """Whether the next iteration prefills: a prompt is in progress, or a waiting request has a free slot."""
        return bool(self.prefilling or (self.waiting and len(self.running) + len(self.prefilling) < self.capacity))

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
                if self._schedule is None:  # a scheduled depth depends on the batch: drawn cycle by cycle
                    request.plan = _token_plan(request)
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
            ms = setting_cycle_ms(self.profile, setting, batch)
            if self.setting.schedule and depth == 0:  # SGLang still runs the draft's extend at 0 steps
                ms += zero_step_extend_ms(self.profile, batch)
            duration = round(ms * _NS_PER_MS)
            self._cycle_ns[batch, depth] = duration
        return duration

    def _accepted(self, request: SimRequest, depth: int) -> int:
        """Drafts accepted this cycle of a scheduled setting: depth by depth until the first rejection, over
        only its `depth` first positions (a static setting's cycles are drawn ahead: `_token_plan`)."""
        rates = request.post_eos_rates if request.generated >= request.natural_eos else request.rates
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
        """One decode iteration: read from the requests' plans under a static setting, drawn now under a schedule."""
        if self._schedule is None:
            return self._decode_static(1)
        start = self.now_ns
        batch = len(self.running)
        depth = self._depth(batch)
        end = start + self._cycle_duration_ns(batch, depth)
        drafts = depth
        still: list[SimRequest] = []
        finished: list[SimRequest] = []
        drafted_accepted = 0
        for request in self.running:
            drawn = self._accepted(request, depth)
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
        self._schedule.controller(batch).observe(drafted_accepted / batch if depth else 0.0)
        self.running = still
        self.now_ns = end
        return StepResult("decode", start, end, batch, tuple(finished), depth)

    def _decode_static(self, cycles: int) -> StepResult:
        """`cycles` decode iterations over the running batch under a static setting, each request's tokens read
        from its plan; the caller makes sure no request ends before the last of them (so the batch, and with it
        the cycle time, stays the same). Returned as one result spanning them all."""
        start = self.now_ns
        batch = len(self.running)
        depth = self._steps
        duration = self._cycle_duration_ns(batch, depth)
        end = start + cycles * duration
        stamps = range(start + duration, end + 1, duration) if duration > 0 else [end] * cycles
        drafts = self.setting.num_draft_tokens - 1 if self.setting.speculative else 0
        still: list[SimRequest] = []
        finished: list[SimRequest] = []
        for request in self.running:
            first = request.cursor
            request.cursor = last = first + cycles
            tokens = request.plan[first:last]
            made = sum(tokens)
            request.generated += made
            request.chunk_ns.extend(stamps)
            request.chunk_tokens.extend(tokens)
            if depth:
                request.verify_steps += cycles
                request.accepted += made - cycles
                request.drafted += drafts * cycles
            if last >= len(request.plan):
                request.end_ns = end
                finished.append(request)
            else:
                still.append(request)
        self.running = still
        self.now_ns = end
        return StepResult("decode", start, end, batch, tuple(finished), depth)


__all__ = ["ServerCore", "SimRequest", "StepResult"]
