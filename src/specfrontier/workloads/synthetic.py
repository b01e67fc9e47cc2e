"""`synthetic-greedy`: the seed's best case as a named workload.

The seed measured fixed-length prompts with temperature 0 and `ignore_eos`, so every request generates
exactly `max_tokens` tokens. A small model decoding greedily past its natural end falls into repeating
text, which drafts predict almost perfectly: acceptance near its maximum. That is the optimistic end of
the optimism-bias report, not a production workload.

Prompts are seeded pseudo-text (words drawn from a fixed list), so they are identical on every machine
and for every setting; lengths are estimated as characters / 4 (no tokenizer is loaded), which the
workload listing states.
"""

from __future__ import annotations

import random

from specfrontier.workloads.sources import SourcePrompt

CHARS_PER_TOKEN = 4
"""The length estimate used everywhere in workloads: tokens ~ characters / 4 (English text)."""

_WORD_LIST = (
    "the system request server model token batch cache memory draft verify accept reject queue latency "
    "throughput user session context prompt output input stream chunk step kernel thread core clock "
    "measure report table value figure median spread repeat window setting engine launch ready capacity "
    "slot process group signal file line word number river mountain city garden window paper light "
    "water stone market music letter story evening morning winter summer people table chair road bridge "
    "simple careful quiet bright early late small large green blue yellow open closed quick slow"
)
_WORDS = tuple(_WORD_LIST.split(" "))


def synthetic_prompts(count: int, input_tokens: int, seed: int) -> list[SourcePrompt]:
    """`count` prompts of about `input_tokens` tokens each (chars / 4), deterministic for a seed."""
    out = []
    for i in range(count):
        rng = random.Random(f"synthetic-greedy:{seed}:{i}")  # a str seed is hashed stably (not PYTHONHASHSEED)
        words: list[str] = []
        length = 0
        while length < input_tokens * CHARS_PER_TOKEN:
            word = rng.choice(_WORDS)
            length += len(word) + (1 if words else 0)  # the joining space
            words.append(word)
        text = " ".join(words)
        out.append(SourcePrompt(f"synthetic-{i:03d}", "synthetic", (("user", text),), completion_text=text))
    return out


def estimate_tokens(chars: int) -> int:
    return max(1, round(chars / CHARS_PER_TOKEN))


__all__ = ["CHARS_PER_TOKEN", "estimate_tokens", "synthetic_prompts"]
