"""The virtual-time face: closed-loop cells run against the model in virtual time (no clock, no network).

Results are MODEL PREDICTIONS, not measurements. A cell is run the way a benchmark client runs it:
`concurrency` closed-loop workers each send a request, wait for its end, pause `client_gap_ms` (0 by
default, the project's own client; the seed protocol uses the profile's fitted `harness_gap_ms`), and
send the next. The `warmup_requests` run first, as their own closed-loop phase, and are left out; the
measured phase then starts with all C workers sending at once. Its window therefore holds what a real
harness's window holds: the ramp (a burst of prefills), queueing when C exceeds the capacity, the
prefill of every new request stalling the batch, slots left idle by the client turnaround when no
request is queued, and the drain at the end, when fewer than C requests are left. The records carry
virtual nanoseconds, so `specfrontier.metrics.cell_metrics` computes the figures.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass

from specfrontier.errors import ConfigError
from specfrontier.metrics.window import CellMetrics, cell_metrics
from specfrontier.records import RequestRecord
from specfrontier.sim.core import ServerCore, SimRequest
from specfrontier.sim.costs import capacity
from specfrontier.sim.profile import SimProfile, WorkloadModel
from specfrontier.sim.setting import SimSetting, resolve_setting

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
            for request in core.step().finished:
                done.append(request)
                assert request.end_ns is not None
                if sent + len(sends) < total or request.end_ns - start < min_duration_ns:
                    heapq.heappush(sends, (request.end_ns + self.gap_ns, sent + len(sends)))
        return done


def simulate_cell(
    profile: SimProfile,
    setting: SimSetting,
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


@dataclass(frozen=True, slots=True)
class SeedProtocol:
    """The seed benchmark as modelled (bench_qwen.py's exact protocol is unpublished: these are assumptions).

    Greedy, ignore_eos, fixed-length generation on the `synthetic` class; per concurrency C it runs
    `warmup_rounds * C` unmeasured requests then `max(min_requests, rounds * C)` measured ones, with the
    profile's `harness_gap_ms` as client turnaround unless `client_gap_ms` is given."""

    input_tokens: int = 128
    max_tokens: int = 512
    rounds: int = 4
    min_requests: int = 32
    warmup_rounds: int = 1
    workload: str = "synthetic"
    temperature: float = 0.0
    ignore_eos: bool = True
    client_gap_ms: float | None = None

    def num_requests(self, concurrency: int) -> int:
        return max(self.min_requests, self.rounds * concurrency)


SEED_STEPS = (1, 2, 3, 4, 5)
SEED_CONCURRENCY = (1, 4, 16, 32, 64)


@dataclass(frozen=True, slots=True)
class GridCell:
    """One predicted cell of a grid: setting steps x concurrency, with the figures the seed published."""

    steps: int
    concurrency: int
    capacity: int
    per_request_tok_s_p50: float
    aggregate_tok_s: float
    acceptance_length: float | None


def seed_setting(steps: int) -> SimSetting:
    """The seed's server setting at `steps`: SGLang EAGLE-3, topk 1, draft tokens steps + 1, MRR unset."""
    return SimSetting(algorithm="EAGLE3", num_steps=steps, eagle_topk=1, num_draft_tokens=steps + 1)


def simulate_seed_cell(
    profile: SimProfile, steps: int, concurrency: int, *, protocol: SeedProtocol | None = None, seed: int = 0
) -> CellMetrics:
    """One cell of the seed's grid under the seed protocol, as cell_metrics figures (a model prediction)."""
    proto = protocol or SeedProtocol()
    records = simulate_cell(
        profile,
        seed_setting(steps),
        concurrency=concurrency,
        num_requests=proto.num_requests(concurrency),
        workload=proto.workload,
        temperature=proto.temperature,
        ignore_eos=proto.ignore_eos,
        input_tokens=proto.input_tokens,
        max_tokens=proto.max_tokens,
        warmup_requests=proto.warmup_rounds * concurrency,
        seed=seed + 1000 * steps + concurrency,
        client_gap_ms=profile.harness_gap_ms if proto.client_gap_ms is None else proto.client_gap_ms,
    )
    return cell_metrics(records)


def run_grid(
    profile: SimProfile,
    *,
    steps: Sequence[int] = SEED_STEPS,
    concurrency: Sequence[int] = SEED_CONCURRENCY,
    protocol: SeedProtocol | None = None,
    seed: int = 0,
) -> list[GridCell]:
    """Predict the seed's grid (steps x C, by default 1-5 x 1, 4, 16, 32, 64) under the seed protocol."""
    cells: list[GridCell] = []
    for s in steps:
        resolved = resolve_setting(seed_setting(s), spec_default_cap=profile.capacity.spec_default_cap)
        cap = capacity(profile, resolved)
        for c in concurrency:
            m = simulate_seed_cell(profile, s, c, protocol=protocol, seed=seed)
            tau = None
            if m.accepted_tokens is not None:
                # Every completion is 1 prefill token + one token per verify step + the accepted drafts.
                verify_steps = m.output_tokens - m.ok_requests - m.accepted_tokens
                tau = 1.0 + m.accepted_tokens / verify_steps if verify_steps > 0 else None
            cells.append(GridCell(s, c, cap, m.per_request_tok_s_p50 or 0.0, m.aggregate_tok_s or 0.0, tau))
    return cells


def best_steps(cells: Sequence[GridCell], concurrency: int, metric: str = "per_request_tok_s_p50") -> int:
    """The steps value with the highest `metric` ("per_request_tok_s_p50" or "aggregate_tok_s") at `concurrency`."""
    row = [c for c in cells if c.concurrency == concurrency]
    if not row:
        raise ConfigError(f"best_steps: concurrency = {concurrency}: not in the grid; fix: use a simulated level")
    return max(row, key=lambda c: float(getattr(c, metric))).steps


__all__ = [
    "SEED_CONCURRENCY",
    "SEED_STEPS",
    "GridCell",
    "SeedProtocol",
    "best_steps",
    "run_grid",
    "seed_setting",
    "simulate_cell",
    "simulate_seed_cell",
]
