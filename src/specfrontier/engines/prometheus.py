"""A strict reader of the Prometheus text exposition format (what `/metrics` endpoints return).

Why not `prometheus_client`'s parser (`prometheus_client.parser.text_string_to_metric_families`,
version 0.23.1, measured on a real llama-server /metrics response, tests/data/llamacpp_metrics.txt:
95 lines, 6.2 kB, Python 3.11):
- it rewrites what the server sent: label values are unescaped (`\\"` becomes `"`, `\\n` a newline;
  this reader keeps them raw, which tests/unit/engines/test_prometheus.py asserts), and a counter
  whose name lacks `_total` gets the suffix added to its samples (llama-server's
  `llamacpp:n_tokens_max` comes back as `llamacpp:n_tokens_max_total`);
- its errors are bare ValueErrors without a line number ("could not convert string to float: 'is'"
  for the line `this is not a metric`; an empty message for `# TYPE x`), while a malformed response
  must become an EngineResponseError naming the line;
- it is slower: 1.0 ms per response against 0.24 ms here (best of 7 x 3000 parses on a shared 2-core
  machine). That alone would not matter at one scrape per measurement window.
Both give the same counter values on that response (a test checks it), read NaN and +Inf/-Inf alike,
and reject malformed label blocks, duplicate labels and `1_000` values. Timestamps (integer ms) are
checked here and dropped; prometheus_client keeps them, in seconds.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from specfrontier.errors import EngineResponseError
from specfrontier.records import SpecCounters

_QUOTED = r'"(?:[^"\\]|\\.)*"'
# name, optional {label block} (a `}` inside a quoted value does not end it), value, optional ms timestamp
# (possessive quantifiers, Python 3.11+: no backtracking blow-up on an unclosed `{`)
_SAMPLE = re.compile(rf"^([A-Za-z_:][A-Za-z0-9_:]*)(?:\{{((?:[^\"}}]++|{_QUOTED})*+)\}})?\s+(\S+)(?:\s+(-?\d+))?$")
_LABEL = re.compile(r'\s*([A-Za-z_][A-Za-z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*(?:,|$)')


@dataclass(frozen=True, slots=True)
class Sample:
    name: str
    labels: tuple[tuple[str, str], ...]
    value: float

    def label(self, key: str) -> str | None:
        return dict(self.labels).get(key)


def _labels(text: str) -> dict[str, str] | str:
    """The label pairs of a `{...}` block (values kept escaped, as sent), or why the block is malformed."""
    labels: dict[str, str] = {}
    position = 0
    text = text.rstrip()
    while position < len(text):
        match = _LABEL.match(text, position)
        if match is None:
            return f"malformed label text {text[position : position + 40]!r}"
        key, value = match.groups()
        if key in labels:
            return f"label {key} appears twice"
        labels[key] = value
        position = match.end()
    return labels


def parse_metrics(text: str, *, source: str = "/metrics") -> list[Sample]:
    """Every sample in a Prometheus text response; comments and blank lines are skipped."""
    samples: list[Sample] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        match = _SAMPLE.match(line)
        if match is None:
            raise EngineResponseError(f"{source}: line {number} = {line[:80]!r}: not a Prometheus sample")
        name, label_text, value_text, _timestamp = match.groups()
        try:
            if "_" in value_text:  # float() takes "1_000"; the exposition format does not
                raise ValueError(value_text)
            value = float(value_text)
        except ValueError as exc:
            raise EngineResponseError(
                f"{source}: line {number}: value = {value_text!r} of {name} is not a number"
            ) from exc
        labels = _labels(label_text or "")
        if isinstance(labels, str):
            raise EngineResponseError(f"{source}: line {number} = {line[:80]!r}: {labels}")
        samples.append(Sample(name, tuple(sorted(labels.items())), value))
    return samples


def counter(samples: list[Sample], name: str) -> float | None:
    """Sum of all samples called `name` (over label sets), or None when the server has no such metric."""
    values = [s.value for s in samples if s.name == name]
    if not values:
        return None
    total = math.fsum(values)
    return total


def spec_decode_counters(samples: list[Sample], prefix: str) -> SpecCounters | None:
    """The `<prefix>spec_decode_*` counter family, summed over label sets (engines, models): drafts
    (verify steps), drafted and accepted tokens, accepted per position. vLLM defines it
    (`vllm/v1/spec_decode/metrics.py`) and llama-server exposes the same names under `llamacpp:`.
    None when the family is absent (speculation off on vLLM; an old llama-server)."""
    drafted = counter(samples, f"{prefix}spec_decode_num_draft_tokens_total")
    accepted = counter(samples, f"{prefix}spec_decode_num_accepted_tokens_total")
    steps = counter(samples, f"{prefix}spec_decode_num_drafts_total")
    if drafted is None or accepted is None or steps is None:
        return None
    per_position: dict[int, float] = {}
    for sample in samples:
        if sample.name == f"{prefix}spec_decode_num_accepted_tokens_per_pos_total":
            position = sample.label("position")
            if position is not None and position.isdigit():
                per_position[int(position)] = per_position.get(int(position), 0.0) + sample.value
    positions = tuple(int(per_position.get(i, 0)) for i in range(max(per_position, default=-1) + 1))
    return SpecCounters(int(drafted), int(accepted), int(steps), positions)


def counters_from_metrics(text: str, prefix: str, *, source: str = "/metrics") -> SpecCounters | None:
    """The `<prefix>spec_decode_*` counters of one /metrics response (`spec_decode_counters`); None where the
    family is absent. `source` names the endpoint in a malformed response's error."""
    return spec_decode_counters(parse_metrics(text, source=source), prefix)


__all__ = ["Sample", "counter", "counters_from_metrics", "parse_metrics", "spec_decode_counters"]
