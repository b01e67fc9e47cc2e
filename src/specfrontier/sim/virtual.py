"""The virtual-time face: closed-loop cells run against the model in virtual time (no clock, no network).

Results are MODEL PREDICTIONS, not measurements. A cell is run the way a benchmark client runs it:
`concurrency` closed-loop workers each send a request, wait for its end, pause `client_gap_ms` (0 by
default, the project's own client, as `tune` and `calibrate` run it: `sim.protocol`), and send the
next. The `warmup_requests` run first, as their own closed-loop phase, and are left out; the measured
phase then starts with all C workers sending at once. Its window therefore holds what a real harness's
window holds: the ramp (a burst of prefills), queueing when C exceeds the capacity, the prefill of
every new request stalling the batch, slots left idle by a client turnaround when no request is
queued, and the drain at the end, when fewer than C requests are left. The records carry
virtual nanoseconds, so `specfrontier.metrics.window.cell_metrics` computes the figures.
"""

from __future__ import annotations

import heapq

from specfrontier.errors import ConfigError
from specfrontier.records import RequestRecord
from specfrontier.sim.core import ServerCore, SimRequest
from specfrontier.sim.profile import SimProfile, WorkloadModel
from specfrontier.sim.setting import ResolvedSetting, SimSetting, resolve_setting

_NS_PER_MS = 1_000_000


def _check_positive(name: str, value: int, minimum: int = 1) -> None:
    if value < minimum:
        raise ConfigError(
            f"simulate_cell: {name} = {value!r}: must be at least {minimum}; fix: pass {name} >= {minimum}"
        )


class _ClosedLoop:
    """Closed-loop workers over one ServerCore; each phase starts when the previous one has drained."""

    def __init__(
        self,
        core: ServerCore,
        workload: WorkloadModel,
        temperature: float,
        ignore_eos: bool,
        input_tokens: int,
        max_tokens: int,
        client_gap_ms: float,
    ) -> None:
        self.core = core
        self.workload = workload
        self.temperature = temperature
        self.ignore_eos = ignore_eos
        self.input_tokens = input_tokens
        self.max_tokens = max_tokens
        self.gap_ns = round(client_gap_ms * _NS_PER_MS)

    def run(self, prefix: str, total: int, concurrency: int, min_duration_ns: int = 0) -> list[SimRequest]:
        """Send `total` requests from `concurrency` workers starting now, and go on sending while less than
        `min_duration_ns` of virtual time has passed (the cell's duration bound: a finished request is
        replaced until then); return them once all have ended."""
        core = self.core
        start = core.now_ns
        sends = [(start, worker) for worker in range(min(concurrency, total))]
        heapq.heapify(sends)
        sent = 0
        done: list[SimRequest] = []
        while sends or core.busy:
            if not core.busy:
                core.now_ns = max(core.now_ns, sends[0][0])
            while sends and sends[0][0] <= core.now_ns:
                send_ns, _order = heapq.heappop(sends)
                core.submit(
                    core.new_request(
                        f"{prefix}-{sent}",
                        send_ns=send_ns,
                        workload=self.workload,
                        temperature=self.temperature,
                        ignore_eos=self.ignore_eos,
                        prompt_tokens=self.input_tokens,
                        max_tokens=self.max_tokens,
                    )
                )
                sent += 1
            if not core.busy:
                continue
            for request in core.advance(sends[0][0] if sends else None):
                done.append(request)
                assert request.end_ns is not None
                if sent + len(sends) < total or request.end_ns - start < min_duration_ns:
                    heapq.heappush(sends, (request.end_ns + self.gap_ns, sent + len(sends)))
        return done


def simulate_cell(
    profile: SimProfile,
    setting: SimSetting | ResolvedSetting,
    *,
    concurrency: int,
    num_requests: int,
    workload: str,
    temperature: float,
    ignore_eos: bool,
    input_tokens: int,
    max_tokens: int,
    warmup_requests: int = 0,
    seed: int = 0,
    client_gap_ms: float = 0.0,
    min_duration_s: float | None = None,
) -> list[RequestRecord]:
    """Run one closed-loop cell in virtual time and return the measured requests' records (a model prediction).

    A `SimSetting` is resolved by SGLang's start-up rules first; a `ResolvedSetting` (what the server runs) is
    taken as it is, for callers that build it themselves (trees, benchmarks over a whole space).
    `client_gap_ms` is each worker's pause between a request's end and its next send; `min_duration_s`
    keeps the measured phase sending until that much virtual time has passed (`cell_duration_s`). Deterministic:
    the same arguments give identical records. Raises ConfigError for an invalid setting, an unknown
    workload class or non-positive sizes.
    """
    _check_positive("concurrency", concurrency)
    _check_positive("num_requests", num_requests)
    _check_positive("input_tokens", input_tokens)
    _check_positive("max_tokens", max_tokens)
    _check_positive("warmup_requests", warmup_requests, 0)
    _check_positive("seed", seed, 0)
    if client_gap_ms < 0:
        raise ConfigError(
            f"simulate_cell: client_gap_ms = {client_gap_ms!r}: must be >= 0; fix: pass 0 for an ideal client"
        )
    if temperature < 0:
        raise ConfigError(f"simulate_cell: temperature = {temperature!r}: must be >= 0; fix: pass 0 for greedy")
    if isinstance(setting, ResolvedSetting):
        resolved = setting
    else:
        resolved = resolve_setting(setting, spec_default_cap=profile.capacity.spec_default_cap)
    workload_model = profile.workload(workload)
    core = ServerCore(profile, resolved, seed=seed)
    loop = _ClosedLoop(core, workload_model, temperature, ignore_eos, input_tokens, max_tokens, client_gap_ms)
    if warmup_requests:
        loop.run("warmup", warmup_requests, concurrency)
    finished = loop.run("req", num_requests, concurrency, round((min_duration_s or 0.0) * 1e9))
    records = [r.to_record(speculative=resolved.speculative) for r in finished]
    records.sort(key=lambda r: (r.send_ns, r.prompt_id))
    return records


__all__ = ["simulate_cell"]
