"""The records the performance model reads and returns.

Kept free of store and engine imports so a caller (guided search, `plan`, tests) can build cells by
hand: the model only needs a setting's shape (`SettingParams`) and a cell's measured figures.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class SettingParams:
    """The shape of one speculative setting, as the model sees it (engine spellings mapped by `cells.py`).

    `steps` is the draft depth s (SGLang `num_steps`, vLLM `num_speculative_tokens`, llama.cpp per spec type:
    `draft_n_max` of a draft model, an n-gram type's own length; 0 = no speculation), `topk` the branching
    per step, `draft_tokens` the tokens verified per request per cycle (D; a chain verifies s + 1), `family`
    the drafter (EAGLE3, ngram-simple, ...): acceptance and draft cost are fitted per family.
    `max_running_requests` is a user cap on running requests (None: only the engine's capacity law limits
    them).
    """

    steps: int = 0
    topk: int = 1
    draft_tokens: int | None = None
    family: str = "none"
    max_running_requests: int | None = None

    @property
    def speculative(self) -> bool:
        return self.steps > 0

    @property
    def verified(self) -> int:
        """D: tokens verified per request per cycle (1 without speculation)."""
        if not self.speculative:
            return 1
        if self.draft_tokens is not None:
            return self.draft_tokens
        return self.steps + 1 if self.topk == 1 else self.steps * self.topk + 1

    @property
    def label(self) -> str:
        """Short name for tables, e.g. `EAGLE3 s4` or `EAGLE3 s5 k4 d16`; `no-spec` without speculation."""
        if not self.speculative:
            return "no-spec"
        parts = [self.family, f"s{self.steps}"]
        if self.topk != 1:
            parts += [f"k{self.topk}", f"d{self.verified}"]
        if self.max_running_requests is not None:
            parts.append(f"mrr{self.max_running_requests}")
        return " ".join(parts)


@dataclass(frozen=True, slots=True)
class ModelCell:
    """One measured (setting, concurrency) cell: what the model is fitted to.

    Figures are medians over repeats. `per_request_tok_s` is the decode rate of one request (tokens
    after the first / time after the first token), `aggregate_tok_s` all output tokens / window.
    `acceptance_per_position[i]` is P(draft position i+1 accepted) per verification step (so it already
    includes every earlier position being accepted); `acceptance_length` is tau incl. the bonus token.
    """

    setting: str
    params: SettingParams
    concurrency: int
    per_request_tok_s: float | None = None
    aggregate_tok_s: float | None = None
    capacity: int | None = None
    acceptance_length: float | None = None
    acceptance_per_position: tuple[float, ...] = ()
    flags: tuple[str, ...] = ()
    """Why a figure is doubtful (noisy repeats, client-limited): shown next to the cell, not hidden."""
    output_tokens: float | None = None
    """Mean output tokens per request. With it, an aggregate figure also fits the per-request turnaround
    overhead (TTFT, prefill, client gap) that a decode-only model misses; without it that term is 0."""


@dataclass(frozen=True, slots=True)
class Prediction:
    """The model's figures for one (setting, concurrency); intervals are (low, high) tok/s or None (no stated
    error).

    `batch` = min(C, capacity): running requests; `cycle_ms` = one draft+verify iteration at that batch.
    """

    concurrency: int
    batch: int
    capacity: int | None
    tau: float
    cycle_ms: float
    per_request_tok_s: float
    aggregate_tok_s: float
    per_request_interval: tuple[float, float] | None
    aggregate_interval: tuple[float, float] | None
    error_class: str = ""
    """What kind of prediction this is (`perfmodel.calibration`: a measured setting at another level, an
    unmeasured chain or tree, ...): its stated error is calibrated on held-out predictions of that kind."""
    halfwidth: float | None = None
    """The stated relative error (the intervals are the prediction x (1 +/- it)); None: not known."""
    halfwidth_against_best: float | None = None
    """For an unmeasured setting at a fitted level: the stated error of its prediction's ratio to the model's
    prediction of the best fitted setting there (a comparison, whose shared error cancels); None otherwise."""


__all__ = ["ModelCell", "Prediction", "SettingParams"]
