"""The simulator's model of a per-batch-size speculation schedule: which depth each decode iteration runs.

SGLang's adaptive mode as its source has it (0.5.23: `srt/speculative/adaptive_spec_params.py`,
`AdaptiveStepSlot` and `AdaptiveSpeculativeParams._route`; docs/schedules.md cites the lines, and
tests/integration/test_sglang_schedule.py checks both step for step against that code): the running batch
size selects the config entry with the largest batch size not above it (a batch below the first entry uses
the first). Each entry keeps its own controller over its candidate steps, updated only by the verify steps
routed to it: an EMA (factor `ema_alpha` 0.2) of the accepted draft tokens per request (bonus token
excluded), starting at `steps - 1`; after `warmup_batches` (10) it is re-read every `update_interval` (5)
batches and the steps move down while the EMA is at or below the next lower candidate minus 0.5 (plus
`down_hysteresis`, -0.25), else up while it is above the current candidate minus 0.5 (plus `up_hysteresis`,
0); at 0 steps (no drafting, no signal) it probes one candidate up. One candidate pins the depth (what
`schedule` writes). The server sizes its buffers, and so its capacity, for the deepest candidate. Because
the running batch moves as requests end and new ones are admitted, a closed loop at C near an entry boundary
switches depth between iterations, as a real server would.

An iteration at 0 steps still pays the draft model's extend, as SGLang's does (`sim.core`,
`sim.costs.zero_step_extend_ms`). Not modelled: SGLang pads the batch size up to the next captured CUDA-graph
size before routing (the profile has no graph sizes), and the controller's `ceiling_coeff` (default 0, off).
These are model predictions, like everything in `sim/`.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass

Slots = tuple[tuple[int, tuple[int, ...]], ...]
"""(lowest batch size, candidate depths) per slot, sorted by batch size."""


def deepest(slots: Slots) -> int:
    return max(d for _, candidates in slots for d in candidates)


def normalise(entries: Sequence[tuple[int, Sequence[int]]]) -> Slots:
    """Slots sorted by batch size, candidates sorted and de-duplicated."""
    return tuple(sorted((int(lo), tuple(sorted({int(d) for d in c}))) for lo, c in entries))


@dataclass(frozen=True, slots=True)
class ControllerParams:
    """SGLang's adaptive controller knobs, at its defaults."""

    ema_alpha: float = 0.2
    update_interval: int = 5
    warmup_batches: int = 10
    down_hysteresis: float = -0.25
    up_hysteresis: float = 0.0


class SlotController:
    """One entry's controller: its steps now, moved by the EMA of accepted drafts per request."""

    def __init__(self, candidates: Sequence[int], initial: int, params: ControllerParams = ControllerParams()) -> None:
        self.candidates = sorted(candidates)
        self.steps = initial if initial in self.candidates else self.candidates[len(self.candidates) // 2]
        self.ema = float(self.steps - 1)
        self.batches = 0
        self.params = params

    def observe(self, accepted_per_request: float) -> None:
        """One verify step routed to this entry, with its mean accepted draft tokens per request."""
        p, c = self.params, self.candidates
        if self.steps > 0:
            self.ema = (1 - p.ema_alpha) * self.ema + p.ema_alpha * accepted_per_request
        self.batches += 1
        if self.batches <= p.warmup_batches or (self.batches - p.warmup_batches) % p.update_interval:
            return
        i, last = c.index(self.steps), len(c) - 1
        if self.steps == 0:  # no drafts, no signal: probe one candidate up
            i = min(i + 1, last)
            if c[i] > 0 and self.ema < 0:
                self.ema = float(c[i] - 1)
        else:
            moved = False
            while i > 0 and self.ema <= (0.5 if c[i - 1] == 0 else c[i - 1] - 0.5) + p.down_hysteresis:
                i -= 1
                moved = True
            if not moved:
                while i < last and self.ema > c[i] - 0.5 + p.up_hysteresis:
                    i += 1
        self.steps = c[i]


class ScheduleState:
    """Every entry's controller of one server; `depth(batch)` is the steps of the entry serving it."""

    def __init__(self, slots: Slots, initial: int) -> None:
        self.slots = slots
        self.controllers = {lo: SlotController(candidates, initial) for lo, candidates in slots}
        self._keys = [lo for lo, _ in slots]

    def controller(self, batch: int) -> SlotController:
        index = bisect_right(self._keys, batch) - 1
        return self.controllers[self._keys[max(0, index)]]


__all__ = [
    "ControllerParams",
    "ScheduleState",
    "SlotController",
    "Slots",
    "deepest",
    "normalise",
]
