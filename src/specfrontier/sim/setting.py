"""An SGLang-like speculative setting and the engine's resolution rules (engines.md 1.2-1.3).

The simulator applies the same rewrites and refusals SGLang applies at start-up, so a setting the
simulator accepts is one the real server would start with, and the resolved values (what the server
really runs) are what the model uses: `topk == 1` forces `num_draft_tokens = num_steps + 1`,
`num_draft_tokens <= topk + (num_steps - 1) * topk^2 + 1` (`theory.tree_bound`), an unset
`max_running_requests` becomes 48 under speculation, and a speculative setting without steps gets
SGLang's generic auto choice (3, 1, 4).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from specfrontier.errors import ConfigError
from specfrontier.sim.schedule import Slots, deepest, normalise
from specfrontier.theory.tree_bound import TREE_BOUND_TEXT, max_verified_tokens

SPEC_ALGORITHMS = ("EAGLE", "EAGLE3")
AUTO_PARAMS = (3, 1, 4)
"""SGLang's `_auto_choose_speculative_params` default for non-Llama targets: (steps, topk, draft tokens)."""


@dataclass(frozen=True, slots=True)
class SimSetting:
    """Server-side speculative flags, spelled as SGLang's `--speculative-*` and `--max-running-requests`."""

    algorithm: str | None = None
    num_steps: int | None = None
    eagle_topk: int | None = None
    num_draft_tokens: int | None = None
    max_running_requests: int | None = None
    adaptive: tuple[tuple[int, tuple[int, ...]], ...] = ()
    """`--speculative-adaptive` with its config: (batch size, candidate steps) per entry; empty = static."""

    @property
    def label(self) -> str:
        """Short name for tables, e.g. `EAGLE3 s4 k1 d5` or `no-spec`."""
        if self.algorithm is None:
            return "no-spec"
        parts = (f"s{self.num_steps}", f"k{self.eagle_topk}", f"d{self.num_draft_tokens}")
        return " ".join([self.algorithm, *(p for p in parts if not p.endswith("None"))])


@dataclass(frozen=True, slots=True)
class ResolvedSetting:
    """What the server runs after SGLang's rules: steps s, topk, draft tokens D (0/1/1 without speculation)."""

    speculative: bool
    num_steps: int
    eagle_topk: int
    num_draft_tokens: int
    max_running_requests: int | None
    """The user's cap, or SGLang's spec default (48) when unset; None = no cap but the capacity law."""
    notes: tuple[str, ...] = field(default=())
    """Rewrites applied, as the warnings SGLang would log."""
    algorithm: str | None = None
    """The drafter the server runs (EAGLE, EAGLE3); None without speculation or where the face does not
    name one (a profile's `draft_head` is then not checked)."""
    schedule: tuple[tuple[int, tuple[int, ...]], ...] = ()
    """A per-batch-size depth schedule of a chain: (lowest batch size, candidate depths) per slot, sorted
    by batch size; `num_steps` is then the deepest candidate (buffers and capacity are sized for it).
    Empty: a static depth."""
    schedule_start: int = 0
    """The steps every entry's controller starts from (`--speculative-num-steps`; SGLang takes the entry's
    middle candidate when it is not one of them)."""

    def at_depth(self, depth: int) -> ResolvedSetting:
        """The chain this scheduled setting runs in an iteration at `depth` (0: no speculation)."""
        return replace(self, speculative=depth > 0, num_steps=depth, eagle_topk=1, num_draft_tokens=depth + 1)


def _bad(field_name: str, value: object, what: str, fix: str) -> ConfigError:
    return ConfigError(f"sim setting: {field_name} = {value!r}: {what}; fix: {fix}")


def _positive(field_name: str, value: int | None) -> None:
    if value is not None and value < 1:
        raise _bad(field_name, value, "must be at least 1", f"set {field_name} to a positive integer")


def resolve_setting(setting: SimSetting, *, spec_default_cap: int = 48) -> ResolvedSetting:
    """Apply SGLang's resolution rules; raise ConfigError (naming the field and the fix) where it would refuse."""
    for name in ("num_steps", "eagle_topk", "num_draft_tokens", "max_running_requests"):
        _positive(name, getattr(setting, name))
    if setting.algorithm is None:
        for name in ("num_steps", "eagle_topk", "num_draft_tokens"):
            if getattr(setting, name) is not None:
                raise _bad(name, getattr(setting, name), "needs a speculative algorithm", "set algorithm to EAGLE3")
        return ResolvedSetting(False, 0, 1, 1, setting.max_running_requests)
    algorithm = setting.algorithm.upper()
    if algorithm not in SPEC_ALGORITHMS:
        raise _bad("algorithm", setting.algorithm, "not modelled", f"use one of {', '.join(SPEC_ALGORITHMS)} or None")
    notes: list[str] = []
    steps, topk, draft = setting.num_steps, setting.eagle_topk, setting.num_draft_tokens
    if steps is None:
        if topk is not None or draft is not None:
            raise _bad(
                "num_steps", None, "unset while eagle_topk/num_draft_tokens are set (SGLang asserts)", "set num_steps"
            )
        steps, topk, draft = AUTO_PARAMS
        notes.append(f"speculative params auto-chosen: steps={steps}, topk={topk}, draft tokens={draft}")
    topk = 1 if topk is None else topk
    if topk == 1:
        if draft is not None and draft != steps + 1:
            notes.append(f"num_draft_tokens {draft} rewritten to num_steps + 1 = {steps + 1} (topk == 1)")
        draft = steps + 1
    elif draft is None:
        raise _bad("num_draft_tokens", None, f"unset with eagle_topk = {topk}", "set num_draft_tokens (2 or more)")
    if draft < 2:
        raise _bad("num_draft_tokens", draft, "must be at least 2 with speculation", "set num_draft_tokens >= 2")
    bound = max_verified_tokens(steps, topk)
    if draft > bound:
        raise _bad(
            "num_draft_tokens",
            draft,
            f"exceeds {TREE_BOUND_TEXT} = {bound} (SGLang scores no more candidates; theory.tree_bound)",
            f"set num_draft_tokens <= {bound} or raise num_steps/eagle_topk",
        )
    cap = setting.max_running_requests
    if cap is None:
        cap = spec_default_cap
        notes.append(f"max_running_requests is reset to {spec_default_cap} for speculative decoding")
    if setting.adaptive:
        slots = _adaptive_slots(setting, steps, topk)
        top = deepest(slots)
        return ResolvedSetting(True, top, 1, top + 1, cap, tuple(notes), algorithm, slots, steps)
    return ResolvedSetting(True, steps, topk, draft, cap, tuple(notes), algorithm)


def _adaptive_slots(setting: SimSetting, steps: int, topk: int) -> Slots:
    """SGLang's start-up checks of an adaptive config (`check_server_args` and the config parser)."""
    if topk != 1:
        raise _bad("eagle_topk", topk, "adaptive speculation runs chains only", "set eagle_topk to 1")
    for lo, candidates in setting.adaptive:
        if lo < 1:
            raise _bad("adaptive batch size", lo, "must be at least 1", "key the config by batch sizes >= 1")
        if not candidates or any(d < 0 for d in candidates):
            raise _bad(
                f"adaptive[{lo}].candidate_steps", list(candidates), "must list steps >= 0", "list at least one step"
            )
    slots = normalise(setting.adaptive)
    if deepest(slots) == 0:
        raise _bad("adaptive", list(setting.adaptive), "drafts at no batch size", "run without speculation")
    if steps not in {d for _, c in slots for d in c}:
        raise _bad(
            "num_steps", steps, "is not among the adaptive candidate steps (SGLang checks at start-up)",
            "set num_steps to one of the candidates, e.g. the deepest",
        )  # fmt: skip
    return slots


__all__ = ["AUTO_PARAMS", "SPEC_ALGORITHMS", "ResolvedSetting", "SimSetting", "resolve_setting"]
