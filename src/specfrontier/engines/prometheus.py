"""A minimal reader of the Prometheus text exposition format (what `/metrics` endpoints return).

Why not `prometheus_client`'s parser: we need a dozen counters from one response and nothing else
(no registry, no HTTP server), and a strict reader here lets a malformed response become a precise
EngineResponseError instead of a third-party exception.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from specfrontier.errors import EngineResponseError

_SAMPLE = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)(?:\{([^}]*)\})?\s+(\S+)(?:\s+\S+)?$")
_LABEL = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"')


@dataclass(frozen=True, slots=True)
class Sample:
    name: str
    labels: tuple[tuple[str, str], ...]
    value: float

    def label(self, key: str) -> str | None:
        return dict(self.labels).get(key)


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
        name, label_text, value_text = match.groups()
        try:
            value = float(value_text)
        except ValueError as exc:
            raise EngineResponseError(
                f"{source}: line {number}: value = {value_text!r} of {name} is not a number"
            ) from exc
        labels = tuple(sorted(_LABEL.findall(label_text or "")))
        samples.append(Sample(name, labels, value))
    return samples


def counter(samples: list[Sample], name: str) -> float | None:
    """Sum of all samples called `name` (over label sets), or None when the server has no such metric."""
    values = [s.value for s in samples if s.name == name]
    if not values:
        return None
    total = math.fsum(values)
    return total


__all__ = ["Sample", "counter", "parse_metrics"]
