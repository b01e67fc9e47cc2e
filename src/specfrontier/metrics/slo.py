"""Goodput under latency SLOs: how much of a window's work met every target (docs/metrics.md).

Why two semantics: tools disagree. vLLM's `--goodput` (DistServe) counts requests whose own TTFT/TPOT/E2E
are within every threshold; AIPerf and SLO searches judge a cell by a percentile. A key such as
`ttft_p90_ms=500` carries both: the threshold (500 ms) for the per-request count, and the percentile (p90)
for the per-cell verdict. Failed requests are misses in both: a setting cannot improve its goodput by
failing the slow requests.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from specfrontier.errors import ConfigError
from specfrontier.metrics.specs import slo_uses
from specfrontier.records import RequestRecord
from specfrontier.units import ns_to_s

SloMetric = str
"""An SLO key's metric: one of the declared metrics' `slo.key` (`metrics.specs.slo_uses`: ttft, tpot, e2e, ...)."""

_USES = slo_uses()
_KEY = re.compile(rf"^({'|'.join(re.escape(key) for key in _USES)})_p(\d+(?:\.\d+)?)_ms$")
_EXAMPLE = "--slo ttft_p90_ms=500,tpot_p90_ms=50"


@dataclass(frozen=True, slots=True)
class Slo:
    """One target: `percentile` of `metric` at most `threshold_ms` (per request: the value itself)."""

    metric: SloMetric
    percentile: float
    threshold_ms: float

    @property
    def key(self) -> str:
        return f"{self.metric}_p{self.percentile:g}_ms"


def parse_slo(text: str | None, *, option: str = "--slo") -> tuple[Slo, ...]:
    """Parse `ttft_p90_ms=500,tpot_p90_ms=50`; empty or None gives no SLO. Errors name the key and the fix."""
    if text is None or not text.strip():
        return ()
    out: dict[str, Slo] = {}
    for part in text.split(","):
        item = part.strip()
        if not item:
            raise ConfigError(f"{option} = {text!r}: an empty item between commas; fix: e.g. {_EXAMPLE}")
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep:
            raise ConfigError(f"{option}: {item!r} has no '='; fix: write KEY=MILLISECONDS, e.g. {_EXAMPLE}")
        match = _KEY.match(key)
        if match is None:
            raise ConfigError(
                f"{option}: key = {key!r} is not <metric>_p<percentile>_ms with metric {_allowed()}; "
                f"fix: e.g. {_EXAMPLE}"
            )
        percentile = float(match.group(2))
        if not 0 < percentile < 100:
            raise ConfigError(f"{option}: {key} has percentile {percentile:g}; fix: use a percentile in (0, 100)")
        try:
            threshold = float(value)
        except ValueError:
            raise ConfigError(
                f"{option}: {key} = {value.strip()!r} is not a number; fix: milliseconds, e.g. {key}=500"
            ) from None
        if not math.isfinite(threshold) or threshold <= 0:
            raise ConfigError(f"{option}: {key} = {value.strip()}: must be > 0 ms; fix: e.g. {key}=500")
        slo = Slo(match.group(1), percentile, threshold)
        if slo.key in out:
            raise ConfigError(f"{option}: {slo.key} is given twice; fix: keep one value")
        out[slo.key] = slo
    return tuple(out.values())


def _allowed() -> str:
    """The SLO metrics in words: 'ttft, tpot or e2e'."""
    keys = list(_USES)
    return keys[0] if len(keys) == 1 else f"{', '.join(keys[:-1])} or {keys[-1]}"


def request_value_ms(r: RequestRecord, metric: SloMetric) -> float | None:
    """The request's own value of an SLO metric in ms, e.g. its TTFT (None: it has none, e.g. TPOT of a
    1-token answer); each metric's is declared with it (`metrics.specs`)."""
    return _USES[metric].value_ms(r)


def request_is_good(r: RequestRecord, slos: Sequence[Slo]) -> bool:
    """An ok request within every threshold. A request without a value passes a target whose metric says
    so (`SloUse.missing_passes`: no TPOT, < 2 tokens, means nothing was slow); an ok request with no first
    token at all fails a TTFT target."""
    if not r.ok:
        return False
    for slo in slos:
        value = request_value_ms(r, slo.metric)
        if value is None:
            if _USES[slo.metric].missing_passes:
                continue
            return False
        if value > slo.threshold_ms:
            return False
    return True


@dataclass(frozen=True, slots=True)
class SloCheck:
    """The per-cell verdict of one SLO on one window."""

    slo: Slo
    observed_ms: float | None
    """The percentile over all requests, failed ones counted as infinitely slow (None: infinite or no data)."""
    met: bool


@dataclass(frozen=True, slots=True)
class WindowGoodput:
    """Goodput of one window (one repeat of a cell)."""

    requests: int
    good: int
    good_tokens: int
    window_s: float
    checks: tuple[SloCheck, ...]

    @property
    def goodput_req_s(self) -> float | None:
        return self.good / self.window_s if self.window_s > 0 else None

    @property
    def goodput_tok_s(self) -> float | None:
        return self.good_tokens / self.window_s if self.window_s > 0 else None

    @property
    def good_fraction(self) -> float:
        return self.good / self.requests if self.requests else 0.0

    @property
    def slo_met(self) -> bool:
        return all(c.met for c in self.checks)


def _cell_check(records: Sequence[RequestRecord], slo: Slo) -> SloCheck:
    values: list[float] = []
    for r in records:
        if not r.ok:
            values.append(math.inf)
            continue
        v = request_value_ms(r, slo.metric)
        if v is None and not _USES[slo.metric].missing_passes:
            v = math.inf  # an ok stream with no text never reached its first token
        if v is not None:
            values.append(v)
    if not values:
        return SloCheck(slo, None, False)
    ordered = np.sort(np.asarray(values, dtype=np.float64))
    # numpy's linear interpolation, done by hand so an infinite neighbour gives inf, not NaN.
    rank = slo.percentile / 100.0 * (len(ordered) - 1)
    lo, hi = math.floor(rank), math.ceil(rank)
    a, b = float(ordered[lo]), float(ordered[hi])
    observed = a if lo == hi or a == b else (math.inf if math.isinf(b) else a + (rank - lo) * (b - a))
    finite = observed if math.isfinite(observed) else None
    return SloCheck(slo, finite, finite is not None and finite <= slo.threshold_ms)


def window_goodput(records: Sequence[RequestRecord], slos: Sequence[Slo]) -> WindowGoodput:
    """Goodput of one window: all its records (errors included), the window as in `metrics`."""
    if not records:
        raise ValueError("window_goodput needs at least one record")
    window_s = ns_to_s(max(r.end_ns for r in records) - min(r.send_ns for r in records))
    good = [r for r in records if request_is_good(r, slos)]
    return WindowGoodput(
        requests=len(records),
        good=len(good),
        good_tokens=sum(r.completion_tokens or 0 for r in good),
        window_s=window_s,
        checks=tuple(_cell_check(records, s) for s in slos),
    )


def slo_text(slos: Sequence[Slo]) -> str:
    """'ttft_p90_ms=500, tpot_p90_ms=50' for titles and notes."""
    return ", ".join(f"{s.key}={s.threshold_ms:g}" for s in slos)


__all__ = [
    "Slo",
    "SloCheck",
    "SloMetric",
    "WindowGoodput",
    "parse_slo",
    "request_is_good",
    "request_value_ms",
    "slo_text",
    "window_goodput",
]
