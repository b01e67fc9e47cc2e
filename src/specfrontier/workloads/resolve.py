"""A workload entry of the config -> the exact prompts and sampling its cells send.

Selection is seeded and deterministic, so every setting, repeat and resumed run sends the same
prompts in the same order (the correctness gate compares outputs prompt by prompt). A mix draws from
each source in proportion to its weight and interleaves them, so request i mod n cycles through the
mix and every cell, whatever its request count in whole passes, measures the same proportions.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from specfrontier.config.workloads import SYNTHETIC, WorkloadSpec
from specfrontier.errors import ConfigError
from specfrontier.records import TURN_SEPARATOR, Prompt, Sampling
from specfrontier.workloads.builtin import SAMPLE, check_pass, load_prompts
from specfrontier.workloads.sampling import SAMPLING_PROFILES, request_seed
from specfrontier.workloads.sources import PACKAGE_SOURCES, Mode, SourcePrompt
from specfrontier.workloads.synthetic import CHARS_PER_TOKEN, synthetic_prompts

DEFAULT_SYNTHETIC_PROMPTS = 8
DEFAULT_SYNTHETIC_INPUT_TOKENS = 128


@dataclass(frozen=True, slots=True)
class ResolvedWorkload:
    """What a workload's cells send: `prompts` in order (request i uses prompt i mod n), one sampling."""

    key: str
    prompts: tuple[Prompt, ...]
    sampling: Sampling
    greedy: bool
    """Temperature 0: outputs are comparable with the baseline's (the correctness gate applies)."""
    sessions: tuple[tuple[Prompt, ...], ...] = ()
    """Agentic session replay: each session's turns in order (`prompts` is then every turn, flattened)."""


def _from_prompt(p: Prompt) -> SourcePrompt:
    if p.api == "chat":
        return SourcePrompt(p.prompt_id, p.category, p.messages)
    return SourcePrompt(p.prompt_id, p.category, (("user", p.text),), completion_text=p.text)


def natural_mode(source: str) -> Mode:
    if source in PACKAGE_SOURCES:
        return PACKAGE_SOURCES[source].natural_mode
    return "completion" if source == SYNTHETIC else "chat"


def load_source(source: str, spec: WorkloadSpec, *, where: str) -> list[SourcePrompt]:
    """All prompts of one source (before selection), or an error naming the package to install."""
    if source == SYNTHETIC:
        count = spec.prompts or DEFAULT_SYNTHETIC_PROMPTS
        return synthetic_prompts(count, spec.input_tokens or DEFAULT_SYNTHETIC_INPUT_TOKENS, spec.seed)
    if source in PACKAGE_SOURCES:
        return PACKAGE_SOURCES[source].load(where=where)
    loaded = load_prompts(source, max_tokens=spec.max_tokens, where=where, whole_pass=False)  # drawn from below
    return [_from_prompt(p) for p in loaded]


def _fits(p: SourcePrompt, limit: int | None) -> bool:
    return limit is None or p.chars <= limit * CHARS_PER_TOKEN


def select(spec: WorkloadSpec, pools: dict[str, list[SourcePrompt]]) -> list[tuple[str, SourcePrompt]]:
    """Seeded draw in proportion to the mix weights, interleaved so every prefix keeps the proportions."""
    weights = spec.sources
    total_w = sum(weights.values())
    # The largest total that no source's pool is too small for, unless `prompts` asks for fewer.
    cap = min(len(pools[s]) * total_w / w for s, w in weights.items())
    total = min(spec.prompts, int(cap)) if spec.prompts is not None else int(cap)
    drawn: dict[str, list[SourcePrompt]] = {}
    for s, w in weights.items():
        pool = list(pools[s])
        random.Random(f"{spec.seed}:{s}").shuffle(pool)
        drawn[s] = pool[: max(1, round(total * w / total_w))]
    # Interleave by position in each source's draw scaled to its share (a smooth round robin).
    order = sorted(
        ((i / len(ps), s, p) for s, ps in drawn.items() for i, p in enumerate(ps)),
        key=lambda x: (x[0], x[1]),
    )
    return [(s, p) for _, s, p in order]


def _to_prompt(p: SourcePrompt, spec: WorkloadSpec, source: str) -> Prompt:
    mode = spec.mode or natural_mode(source)
    seed = request_seed(spec.seed, p.prompt_id) if spec.sampling != "greedy" else None
    if mode == "completion":
        text = p.completion_text or "\n\n".join(c for _, c in p.messages)
        return Prompt(p.prompt_id, p.category, "completion", spec.max_tokens, text=text, seed=seed)
    return Prompt(p.prompt_id, p.category, "chat", spec.max_tokens, messages=p.messages, seed=seed)


def session_turns(p: SourcePrompt, limit: int | None, max_turns: int | None) -> list[SourcePrompt]:
    """The turns of one recorded session: turn t is the conversation up to its t-th user message, with
    the recorded assistant replies as context; stops before the context exceeds `limit` tokens."""
    users = [i for i, (role, _) in enumerate(p.messages) if role == "user"]
    turns: list[SourcePrompt] = []
    for t, end in enumerate(users, start=1):
        turn = SourcePrompt(f"{p.prompt_id}{TURN_SEPARATOR}{t:02d}", p.category, p.messages[: end + 1])
        if not _fits(turn, limit) or (max_turns is not None and t > max_turns):
            break
        turns.append(turn)
    return turns


def _resolve_sessions(spec: WorkloadSpec, where: str) -> ResolvedWorkload:
    loaded = load_source("agentic", spec, where=f"{where}.source")
    sessions = [t for p in loaded if (t := session_turns(p, spec.max_input_tokens, spec.max_turns))]
    if not sessions:
        raise ConfigError(
            f"{where}.max_input_tokens = {spec.max_input_tokens}: no session's first turn is that short; fix: raise it"
        )
    random.Random(f"{spec.seed}:sessions").shuffle(sessions)
    chosen = sessions[: spec.prompts] if spec.prompts is not None else sessions
    shaped = tuple(tuple(_to_prompt(t, spec, "agentic") for t in turns) for turns in chosen)
    profile = SAMPLING_PROFILES[spec.sampling]
    sampling = Sampling(profile.temperature, profile.top_p, spec.eos_ignored, None)
    flat = tuple(p for turns in shaped for p in turns)
    return ResolvedWorkload(spec.key, flat, sampling, greedy=profile.temperature == 0.0, sessions=shaped)


def resolve_workload(spec: WorkloadSpec, *, where: str = "workloads[]") -> ResolvedWorkload:
    """Load, filter, select and shape one workload; every failure names the field and the fix."""
    if spec.sessions:
        return _resolve_sessions(spec, where)
    pools: dict[str, list[SourcePrompt]] = {}
    for source in spec.sources:
        loaded = load_source(source, spec, where=f"{where}.source")
        fitting = [p for p in loaded if _fits(p, spec.max_input_tokens)]
        if not fitting:
            raise ConfigError(
                f"{where}.max_input_tokens = {spec.max_input_tokens}: no prompt of {source!r} is that short "
                f"(shortest ~{min(p.chars for p in loaded) // CHARS_PER_TOKEN} tokens); fix: raise it"
            )
        pools[source] = fitting
    prompts = tuple(_to_prompt(p, spec, source) for source, p in select(spec, pools))
    check_pass(
        len(prompts),
        where=f"{where}.source",
        source="+".join(spec.sources),
        fix=f"draw a seeded sample with {where}.prompts: {SAMPLE}",
    )
    profile = SAMPLING_PROFILES[spec.sampling]
    sampling = Sampling(profile.temperature, profile.top_p, spec.eos_ignored, None)
    return ResolvedWorkload(spec.key, prompts, sampling, greedy=profile.temperature == 0.0)


__all__ = [
    "TURN_SEPARATOR",
    "ResolvedWorkload",
    "load_source",
    "natural_mode",
    "resolve_workload",
    "select",
    "session_turns",
]
