"""Correctness gate: at temperature 0 a speculative setting must produce the baseline's outputs.

Speculative decoding is lossless by construction: the target model verifies every drafted token, so a
greedy request must yield the same text with or without speculation. A setting whose outputs differ is
a bug users must see (n-gram speculation "corrupting output" has been reported), so it is marked
unsafe and left out of recommendations unless the config says `allow_unsafe: true`.

What counts as a difference: a speculative request whose output text matches none of the baseline's
outputs for the same prompt and workload. Every output the baseline itself produced, in any repeat and
at any concurrency level, is one the engine's numerics give without speculation (a batch of C requests
runs other matrix shapes than one request, and under continuous batching the batch a request shares
changes from repeat to repeat, and with it the rounding), so it is not held against the setting.
Measured on llama.cpp with SmolLM2: the baseline's greedy output for a prompt can differ between C = 1
and C = 4, and a speculative setting at C = 4 can return the baseline's C = 1 text. The baseline's own
divergence (its requests that differ from its most common output at that level) is reported beside
each result as the noise floor.

Why a tolerance (`divergence_tolerance`, default 0.1 = 10% of compared requests): engines do not
promise bit-exact greedy outputs across batch shapes. llama.cpp and vLLM both document that results
can differ with batch size, because floating-point reductions run in a different order; verifying k
drafted tokens at once is such a different shape, and a near-tie between two tokens can flip and then
the rest of the text diverges. A correct engine shows this rarely, a broken one on most requests. The
gate also reports the baseline's own divergence over its repeats, the noise floor the tolerance must
sit above; 10% is several times the rate seen from reduction order alone and far below the wholesale
divergence of a broken setting.

Batch nondeterminism is told from a speculation bug by comparing the baseline against itself: a setting is
unsafe when its divergence exceeds the tolerance plus the baseline's own divergence rate (`threshold`).
vLLM's CPU backend (bf16) shows why: its greedy output for a prompt changes with the batch it runs in,
so the baseline differs from its own most common output on some requests, and a correct speculative
setting meets the same variants (and new ones the baseline happened not to produce) at about that rate.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from specfrontier.store import CellRow
from specfrontier.store.cell_requests import request_heads, request_texts

DEFAULT_TOLERANCE = 0.1
MIN_DIVERGED_PROMPTS = 2
"""Unsafe needs differences on at least this many distinct prompts: the repeats of one prompt at
temperature 0 are one piece of evidence, not several, and a single prompt whose first tokens are a
near-tie can flip under batching (measured: one IFBench prompt at C = 4 gave three different greedy
texts over three runs of the baseline), while a broken setting changes many prompts."""


def is_greedy_workload(key: str) -> bool:
    """Temperature-0 workloads: `<name>@greedy` keys, and single-workload labels with `t=0.0`."""
    return key.endswith("@greedy") or "|t=0.0|" in key or "|t=0|" in key


@dataclass(frozen=True, slots=True)
class Divergence:
    """One request whose output differs from the baseline's (where the texts first differ)."""

    prompt_id: str
    level: float
    first_diff_char: int
    baseline_excerpt: str
    setting_excerpt: str


@dataclass(frozen=True, slots=True)
class GateResult:
    """One speculative setting on one greedy workload, compared request by request with the baseline."""

    setting: str
    workload: str
    compared: int
    diverged: int
    baseline_compared: int
    baseline_diverged: int
    """The baseline's own requests that differ from its reference (the noise floor)."""
    tolerance: float
    examples: tuple[Divergence, ...] = ()
    diverged_prompts: int = 0
    """Distinct prompts with at least one differing request."""

    @property
    def divergence_rate(self) -> float | None:
        return self.diverged / self.compared if self.compared else None

    @property
    def baseline_rate(self) -> float | None:
        return self.baseline_diverged / self.baseline_compared if self.baseline_compared else None

    @property
    def threshold(self) -> float:
        """The divergence rate above which the setting is unsafe: the tolerance above the baseline's own
        rate (its noise floor), so an engine whose greedy output moves with the batch is not a broken one."""
        return self.tolerance + (self.baseline_rate or 0.0)

    @property
    def unsafe(self) -> bool:
        rate = self.divergence_rate
        return rate is not None and rate > self.threshold and self.diverged_prompts >= MIN_DIVERGED_PROMPTS


def _first_diff(a: str, b: str) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))


def _excerpt(text: str, at: int) -> str:
    return text[max(0, at - 20) : at + 40]


def _level(row: CellRow) -> float:
    return row.request_rate if row.request_rate is not None else row.concurrency


class _Texts:
    """Output texts by hash, read only for the few shown as examples (a stored cell decodes only its text
    blob, and only when one of its outputs is shown)."""

    def __init__(self) -> None:
        self._where: dict[bytes, tuple[CellRow, int]] = {}

    def note(self, key: bytes, row: CellRow, index: int) -> None:
        self._where.setdefault(key, (row, index))

    def text(self, key: bytes) -> str:
        row, index = self._where[key]
        return request_texts(row.requests)[index]


def _greedy_outputs(rows: Iterable[CellRow], texts: _Texts) -> dict[tuple[str, str, float, str], list[bytes]]:
    """Hashes of every ok output with text, by (setting, workload, level, prompt), in stored order."""
    outputs: dict[tuple[str, str, float, str], list[bytes]] = defaultdict(list)
    for row in rows:
        if not is_greedy_workload(row.workload) or not row.requests:
            continue
        heads = request_heads(row.requests)
        for i, (prompt, error, length, key) in enumerate(
            zip(heads.prompt_ids, heads.errors, heads.text_lengths.tolist(), heads.text_hashes, strict=True)
        ):
            if error is None and length > 0:  # no text (a simulator, a failed stream): nothing to compare
                outputs[(row.setting_id, row.workload, _level(row), prompt)].append(key)
                texts.note(key, row, i)
    return outputs


def correctness_gate(
    rows: Iterable[CellRow], baseline: str | None, tolerance: float = DEFAULT_TOLERANCE, *, examples: int = 3
) -> list[GateResult]:
    """Compare every speculative setting's greedy outputs with the baseline's (see the module docstring).

    Outputs are compared by their stored hashes (equal texts, equal hashes); texts are read only for the
    examples shown."""
    if baseline is None:
        return []
    texts = _Texts()
    outputs = _greedy_outputs(rows, texts)
    reference = {
        (w, lv, p): Counter(keys).most_common(1)[0][0] for (s, w, lv, p), keys in outputs.items() if s == baseline
    }
    allowed: dict[tuple[str, str], set[bytes]] = defaultdict(set)
    for (s, w, _, p), keys in outputs.items():
        if s == baseline:
            allowed[(w, p)].update(keys)
    base_stats: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    stats: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0])
    found: dict[tuple[str, str], list[Divergence]] = defaultdict(list)
    prompts_hit: dict[tuple[str, str], set[str]] = defaultdict(set)
    for (s, w, lv, p), keys in sorted(outputs.items()):
        ref = reference.get((w, lv, p))
        if ref is None:
            continue
        for key in keys:
            if s == baseline:
                base_stats[w][0] += 1
                base_stats[w][1] += key != ref
                continue
            stats[(s, w)][0] += 1
            if key not in allowed[(w, p)]:
                stats[(s, w)][1] += 1
                prompts_hit[(s, w)].add(p)
                if len(found[(s, w)]) < examples:
                    ref_text, text = texts.text(ref), texts.text(key)
                    at = _first_diff(ref_text, text)
                    found[(s, w)].append(Divergence(p, lv, at, _excerpt(ref_text, at), _excerpt(text, at)))
    return [
        GateResult(
            s, w, n, d, base_stats[w][0], base_stats[w][1], tolerance, tuple(found[(s, w)]), len(prompts_hit[(s, w)])
        )
        for (s, w), (n, d) in sorted(stats.items())
    ]


def unsafe_settings(results: Sequence[GateResult]) -> frozenset[str]:
    """Settings unsafe on any greedy workload: a setting that changes outputs is wrong everywhere."""
    return frozenset(r.setting for r in results if r.unsafe)


__all__ = [
    "DEFAULT_TOLERANCE",
    "MIN_DIVERGED_PROMPTS",
    "Divergence",
    "GateResult",
    "correctness_gate",
    "is_greedy_workload",
    "unsafe_settings",
]
