"""Sampling profiles: how a workload's requests are decoded.

`greedy` is temperature 0 (the seed's setting and the literature's); `t0.6` and `t1.0` are production
sampling with nucleus top-p 0.95. Sampling lowers acceptance: a draft token is accepted only when the
target's sampled token matches it, and more randomness means fewer matches. Every profile stops at the
model's natural EOS with `max_tokens` as a cap, except the `synthetic-greedy` best case (ignore_eos).
"""

from __future__ import annotations

import zlib
from typing import Literal

from specfrontier.records import Sampling

SamplingName = Literal["greedy", "t0.6", "t1.0"]

SAMPLING_PROFILES: dict[str, Sampling] = {
    "greedy": Sampling(temperature=0.0),
    "t0.6": Sampling(temperature=0.6, top_p=0.95),
    "t1.0": Sampling(temperature=1.0, top_p=0.95),
}


def request_seed(base: int, prompt_id: str) -> int:
    """A per-request seed from the workload's seed and the prompt id: stable across settings and runs
    (crc32, not `hash()`, which is salted per process), within the 31-bit range engines accept."""
    return (zlib.crc32(prompt_id.encode("utf-8")) ^ (base * 2654435761)) & 0x7FFFFFFF


__all__ = ["SAMPLING_PROFILES", "SamplingName", "request_seed"]
