"""Raw, immutable records that cross module boundaries during a sweep.

They hold times and counts exactly as observed; every derived figure (TTFT, TPOT, tok/s ...) is
computed from them in `metrics`, never stored twice. Times are `time.perf_counter_ns()` values
(CLOCK_MONOTONIC on Linux), taken when a network read returns.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

ApiKind = Literal["chat", "completion"]


MAX_PROMPTS = 10_000
"""Most prompts in one pass (`workload.prompts`, `bench --prompts`, what `workloads[]` draws). Every cell
sends whole passes over its prompts, so a pass of N prompts is at least N requests per cell and level: a
100 MB file of 100,000 prompts made every cell 100,000 requests long, with nothing printed for minutes
(issue 39). A sample (`workloads[].prompts`) keeps the mix and bounds the cell."""


@dataclass(frozen=True, slots=True)
class Prompt:
    """One request body to send: a chat conversation or a raw completion prompt."""

    prompt_id: str
    category: str
    api: ApiKind
    max_tokens: int
    messages: tuple[tuple[str, str], ...] = ()
    """(role, content) pairs, for `api == "chat"`."""
    text: str = ""
    """The raw prompt, for `api == "completion"`."""
    seed: int | None = None
    """Per-request sampling seed (overrides the cell's `Sampling.seed`): the same prompt gets the same
    seed under every setting, so sampled outputs differ by the setting, not by the draw."""


@dataclass(frozen=True, slots=True)
class Sampling:
    """Sampling parameters sent with every request of a cell (set explicitly: engine defaults differ)."""

    temperature: float = 0.0
    top_p: float | None = None
    ignore_eos: bool = False
    seed: int | None = None


@dataclass(frozen=True, slots=True)
class RequestSpecStats:
    """Per-request speculative counts reported by the server (llama.cpp `timings.draft_n*`)."""

    draft_tokens: int
    accepted_tokens: int
    verify_steps: int | None = None


SpecStatsExtractor = Callable[[Mapping[str, Any]], RequestSpecStats | None]
"""Engine-specific hook: given one parsed stream chunk, return the request's spec counts if present."""


@dataclass(frozen=True, slots=True)
class RequestRecord:
    """What one streamed request did, as seen by the client."""

    prompt_id: str
    send_ns: int
    """perf_counter_ns just before the request was written."""
    end_ns: int
    """perf_counter_ns when the stream ended (or failed)."""
    first_token_ns: int | None
    """Arrival of the first chunk with non-empty generated text; None if none arrived."""
    chunk_ns: tuple[int, ...] = ()
    """Arrival time of every chunk that carried generated text."""
    chunk_tokens: tuple[int, ...] | None = None
    """Tokens per content chunk when the server reports them; None when unknown."""
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    """From the server's `usage` (never from counting chunks: one chunk may carry several tokens)."""
    spec: RequestSpecStats | None = None
    finish_reason: str | None = None
    output_text: str = ""
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


TURN_SEPARATOR = "#t"
"""Session turns are stored as `<session id>#t<turn>` prompt ids (turn counted from 1)."""


def session_turn(prompt_id: str) -> int | None:
    """The turn number of a session-replay request's prompt id; None for any other request."""
    head, sep, tail = prompt_id.rpartition(TURN_SEPARATOR)
    return int(tail) if sep and head and tail.isdigit() else None


@dataclass(frozen=True, slots=True)
class SpecCounters:
    """A snapshot of an engine's cumulative speculative counters (diffed around a window)."""

    draft_tokens: int
    accepted_tokens: int
    verify_steps: int
    accepted_per_position: tuple[int, ...] = field(default_factory=tuple)

    @property
    def acceptance_rate(self) -> float | None:
        """Accepted draft tokens / drafted tokens (None when nothing was drafted)."""
        return self.accepted_tokens / self.draft_tokens if self.draft_tokens > 0 else None

    @property
    def acceptance_length(self) -> float | None:
        """tau = 1 + accepted drafts / verification steps, incl. the bonus token (None: steps unknown)."""
        return 1.0 + self.accepted_tokens / self.verify_steps if self.verify_steps > 0 else None

    @property
    def per_position_rate(self) -> tuple[float, ...]:
        """P(draft position i accepted) per verification step (empty when steps are unknown)."""
        if self.verify_steps <= 0:
            return ()
        return tuple(a / self.verify_steps for a in self.accepted_per_position)

    def minus(self, before: SpecCounters) -> SpecCounters:
        """Counts accumulated between `before` and this snapshot."""
        n = max(len(self.accepted_per_position), len(before.accepted_per_position))
        after_pos = self.accepted_per_position + (0,) * (n - len(self.accepted_per_position))
        before_pos = before.accepted_per_position + (0,) * (n - len(before.accepted_per_position))
        return SpecCounters(
            draft_tokens=self.draft_tokens - before.draft_tokens,
            accepted_tokens=self.accepted_tokens - before.accepted_tokens,
            verify_steps=self.verify_steps - before.verify_steps,
            accepted_per_position=tuple(a - b for a, b in zip(after_pos, before_pos, strict=True)),
        )


__all__ = [
    "MAX_PROMPTS",
    "TURN_SEPARATOR",
    "ApiKind",
    "Prompt",
    "RequestRecord",
    "RequestSpecStats",
    "Sampling",
    "SpecCounters",
    "SpecStatsExtractor",
    "session_turn",
]
