"""A deployment's load profile, read from a file: how much of the time it spends at each load.

Why one shape for every source: a deployment does not run at one concurrency, so a recommendation for it is
a sum over the loads it sees, weighted by the time it sees them. Every file becomes a `Profile`: shares of
time per concurrency level (a histogram, or a time series of running requests time-weighted into one), or
shares of time per request rate (a rate series or histogram, turned into concurrency per setting later by
Little's law: `traffic.figures`). Formats (docs/traffic.md):

- YAML: `concurrency: {1: 0.5, 4: 0.3, 16: 0.2}` or `rate_req_s: {0.5: 0.6, 4: 0.4}` (weights: shares,
  hours, anything; normalised to sum 1);
- CSV with a header: `concurrency,share`, `rate_req_s,share`, `timestamp,running` or `timestamp,rate_req_s`;
- JSON: the body of Prometheus's `/api/v1/query_range` (resultType matrix) for a running-requests gauge
  (`RUNNING_GAUGES`), values `[unix_ts, "value"]`.

A time series is time-weighted: each sample holds until the next one, and the last one (which has no next)
for the series' median step, so uneven scrapes do not over-count the dense part. Several series (one per
label set: replicas, engine cores) are pooled: the profile is the load one server sees. Values that are not
whole (an averaged query) are rounded to the nearest whole request.
"""

from __future__ import annotations

import csv
import io
import itertools
import json
import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from specfrontier.errors import ConfigError, shown_value
from specfrontier.textfiles import MAX_DATA_BYTES, load_json, read_text_utf8
from specfrontier.yamltext import load_yaml

RUNNING_GAUGES = ("vllm:num_requests_running", "sglang:num_running_reqs")
"""Prometheus gauges of requests running on one server (vLLM, SGLang): what a `query_range` file may hold."""
OPTION = "--traffic"
_FIX_FORMAT = "fix: see docs/traffic.md for the formats (YAML concurrency: {1: 0.5, 16: 0.5}, CSV, query_range JSON)"

ProfileKind = Literal["concurrency", "rate"]


@dataclass(frozen=True, slots=True)
class Profile:
    """Shares of time (summing to 1) per load level: concurrency C (whole, 0 = idle) or request rate (req/s)."""

    kind: ProfileKind
    shares: tuple[tuple[float, float], ...]
    """(level, share of time), levels ascending, shares > 0."""
    source: str
    """What the file was: 'histogram', 'running-requests series', 'query_range <metric>', 'rate series'."""
    samples: int = 0
    """Samples of a time series (0 for a histogram)."""
    seconds: float = 0.0
    """Time a series covers (its weights summed), 0 for a histogram."""

    def level_shares(self) -> dict[int, float]:
        """A concurrency profile's shares keyed by whole C."""
        return {int(level): share for level, share in self.shares}

    @property
    def idle_share(self) -> float:
        return sum(s for level, s in self.shares if level == 0)


class _Histogram(BaseModel):
    """A YAML histogram: exactly one of the two keys, level -> weight."""

    model_config = ConfigDict(extra="forbid")
    concurrency: dict[int, float] | None = Field(None, description="C -> share of time")
    rate_req_s: dict[float, float] | None = Field(None, description="req/s -> share of time")


class _Series(BaseModel):
    model_config = ConfigDict(extra="allow")
    metric: dict[str, str] = Field(default_factory=dict)
    values: list[tuple[float, str]]


class _MatrixData(BaseModel):
    resultType: Literal["matrix"]
    result: list[_Series]


class _QueryRange(BaseModel):
    """The body of Prometheus's /api/v1/query_range."""

    model_config = ConfigDict(extra="allow")
    status: str = "success"
    data: _MatrixData


def _fail(path: Path, problem: str, fix: str = _FIX_FORMAT) -> ConfigError:
    return ConfigError(f"{OPTION} = {str(path)!r}: {problem}; {fix}")


def _normalised(path: Path, kind: ProfileKind, weights: Iterable[tuple[float, float]], source: str) -> Profile:
    """Weights -> shares: every level finite and >= 0, every weight finite and >= 0, some weight > 0 at a
    level under load (C > 0, rate > 0).

    The weights are scaled by the largest before they are summed (`math.fsum`): weights are "shares, hours,
    anything", and 1e308 + 1e308 overflowed to inf, so every share came out 0 % and the answer was the
    first setting listed (exit 0). A profile with no time under load (all of it at C = 0) has no load to
    choose a setting for; it answered the first setting too."""
    what = "C" if kind == "concurrency" else "rate"
    pairs: list[tuple[float, float]] = []
    for level, weight in weights:
        if not math.isfinite(level):
            raise _fail(path, f"{what} = {level:g} is not a finite number", f"fix: a number, {what} >= 0")
        if level < 0:
            raise _fail(path, f"{what} = {level:g} is negative", f"fix: {what} >= 0")
        if kind == "concurrency" and level != int(level):
            raise _fail(path, f"C = {level:g} is not a whole number of requests", "fix: whole levels, e.g. 1, 4, 16")
        if not math.isfinite(weight):
            raise _fail(
                path, f"{what} = {level:g} has share {weight:g} (not a finite number)", "fix: a number, share >= 0"
            )
        if weight < 0:
            raise _fail(path, f"{what} = {level:g} has share {weight:g} (negative)", "fix: shares of time >= 0")
        pairs.append((level, weight))
    largest = max((w for _, w in pairs), default=0.0)
    if largest <= 0:
        raise _fail(path, "empty profile (no level with time > 0)", "fix: give at least one level a share > 0")
    pooled: dict[float, list[float]] = {}
    for level, weight in pairs:
        pooled.setdefault(level, []).append(weight / largest)  # each <= 1: no sum below can overflow
    scaled = {level: math.fsum(ws) for level, ws in pooled.items()}
    total = math.fsum(scaled.values())
    if not any(w > 0 for level, w in scaled.items() if level > 0):
        raise _fail(
            path,
            f"no time under load (every share is at {what} = 0: idle), so no setting serves anything",
            f"fix: give the levels the server is busy at a share > 0 ({what} = 0 is the idle time beside them)",
        )
    shares = tuple((level, w / total) for level, w in sorted(scaled.items()) if w > 0)
    return Profile(kind, shares, source)


def time_weighted(samples: Sequence[tuple[float, float]]) -> list[tuple[float, float]]:
    """(value, seconds held) per sample of one series: until the next sample; the last for the median step."""
    ordered = sorted(samples)
    if len(ordered) < 2:
        return [(v, 1.0) for _, v in ordered]  # one sample: all the time there is
    steps = [b[0] - a[0] for a, b in itertools.pairwise(ordered)]
    last = statistics.median(steps)
    return [(v, dt) for (_, v), dt in zip(ordered, [*steps, last], strict=True)]


def _series_profile(
    path: Path, kind: ProfileKind, series: Sequence[Sequence[tuple[float, float]]], source: str
) -> Profile:
    weights: list[tuple[float, float]] = []
    for one in series:
        if not all(math.isfinite(ts) for ts, _ in one):
            raise _fail(path, "a timestamp is not a finite number", "fix: timestamps in unix seconds")
        for value, dt in time_weighted(one):
            if not math.isfinite(dt):
                raise _fail(path, "timestamps too far apart to hold", "fix: timestamps in unix seconds")
            whole = kind == "concurrency" and math.isfinite(value) and value >= 0  # others: refused as they are
            weights.append((float(round(value)) if whole else value, dt))
    profile = _normalised(path, kind, weights, source)
    samples = sum(len(s) for s in series)
    seconds = sum(dt for _, dt in weights)
    return Profile(profile.kind, profile.shares, source, samples, seconds)


def _number(path: Path, text: str, where: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise _fail(path, f"{where} = {shown_value(text)} is not a number", "fix: plain numbers") from None


def _from_yaml(path: Path, text: str) -> Profile:
    raw = load_yaml(text, path)  # a syntax error or an alias bomb: one line naming the file
    if raw is None:
        raise _fail(path, "empty profile (the file is empty)", "fix: e.g. concurrency: {1: 0.5, 16: 0.5}")
    if not isinstance(raw, Mapping):
        raise _fail(path, "not a mapping")
    try:
        hist = _Histogram.model_validate(raw)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"])
        raise _fail(
            path, f"{where}: {err['msg']}", "fix: one key, concurrency or rate_req_s, of level: share"
        ) from None
    if (hist.concurrency is None) == (hist.rate_req_s is None):
        raise _fail(path, "needs exactly one of concurrency, rate_req_s", "fix: e.g. concurrency: {1: 0.5, 16: 0.5}")
    if hist.concurrency is not None:
        return _normalised(path, "concurrency", ((float(c), w) for c, w in hist.concurrency.items()), "histogram")
    assert hist.rate_req_s is not None
    return _normalised(path, "rate", hist.rate_req_s.items(), "rate histogram")


_CSV_KINDS: dict[tuple[str, str], tuple[ProfileKind, bool]] = {
    ("concurrency", "share"): ("concurrency", False),
    ("rate_req_s", "share"): ("rate", False),
    ("timestamp", "running"): ("concurrency", True),
    ("timestamp", "rate_req_s"): ("rate", True),
}


def _from_csv(path: Path, text: str) -> Profile:
    rows = [r for r in csv.reader(io.StringIO(text)) if r and any(cell.strip() for cell in r)]
    if not rows:
        raise _fail(path, "empty profile (the file is empty)", "fix: a header and at least one row")
    header = tuple(c.strip().lower() for c in rows[0])
    if len(header) != 2 or header not in _CSV_KINDS:
        known = "; ".join(",".join(h) for h in _CSV_KINDS)
        raise _fail(path, f"header {','.join(header)!r} is not one of the profile headers", f"fix: use one of {known}")
    kind, series = _CSV_KINDS[header]
    pairs: list[tuple[float, float]] = []
    for n, row in enumerate(rows[1:], start=2):
        if len(row) != 2:
            raise _fail(path, f"line {n} has {len(row)} fields", "fix: two fields per line")
        pairs.append((_number(path, row[0], f"line {n} {header[0]}"), _number(path, row[1], f"line {n} {header[1]}")))
    if not pairs:
        raise _fail(path, "empty profile (a header and no rows)", "fix: add rows under the header")
    if series:
        return _series_profile(path, kind, [pairs], f"{header[1]} series")
    return _normalised(path, kind, (p for p in pairs), "histogram" if kind == "concurrency" else "rate histogram")


def _from_query_range(path: Path, raw: Any) -> Profile:
    try:
        body = _QueryRange.model_validate(raw)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"]) or "body"
        raise _fail(
            path,
            f"not a Prometheus query_range matrix ({where}: {err['msg']})",
            "fix: save the JSON body of /api/v1/query_range for a running-requests gauge",
        ) from None
    if body.status != "success":
        raise _fail(path, f"status = {body.status!r}", "fix: save a successful query_range answer")
    names = {s.metric.get("__name__") for s in body.data.result}
    unknown = sorted(str(n) for n in names if n not in RUNNING_GAUGES)
    if unknown:
        raise _fail(
            path,
            f"metric = {unknown[0]!r} is not a running-requests gauge",
            f"fix: query one of {', '.join(RUNNING_GAUGES)} (keep __name__, e.g. query it bare, not through sum())",
        )
    series = []
    for s in body.data.result:
        series.append([(ts, _number(path, v, f"{s.metric.get('__name__')} sample at {ts:g}")) for ts, v in s.values])
    if not any(series):
        raise _fail(path, "empty profile (no samples in the result)", "fix: query a range in which the server ran")
    return _series_profile(path, "concurrency", series, f"query_range {sorted(str(n) for n in names)[0]}")


def read_profile(path: Path) -> Profile:
    """The profile in `path` (by suffix: .yaml/.yml, .csv, .json). Errors are one line naming the fix."""
    suffix = path.suffix.lower()
    if suffix not in (".yaml", ".yml", ".csv", ".json"):
        raise _fail(path, f"unknown suffix {suffix or '(none)'!r}", "fix: name it .yaml, .csv or .json by its format")
    text = read_text_utf8(
        path,
        OPTION,
        fix="pass a traffic profile file (docs/traffic.md)",
        max_bytes=MAX_DATA_BYTES,
        too_big_fix="query a coarser step or a shorter range (a histogram is a few lines)",
    )
    if suffix == ".csv":
        return _from_csv(path, text)
    if suffix == ".json":
        if not text.strip():
            raise _fail(path, "empty profile (the file is empty)", "fix: save the query_range JSON body")
        try:
            raw = load_json(text)
        except json.JSONDecodeError as exc:
            raise _fail(path, f"not valid JSON ({exc.msg} at line {exc.lineno})") from None
        return _from_query_range(path, raw)
    return _from_yaml(path, text)


__all__ = ["RUNNING_GAUGES", "Profile", "ProfileKind", "read_profile", "time_weighted"]
