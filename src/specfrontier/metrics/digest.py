"""A stored repeat's figures, computed once when it is recorded, so reports need not re-read its requests.

A report of a million-request sweep cannot afford to decode every chunk time of every request each time
it is run; the figures of one repeat (its window metrics, per-second time slices and latency spikes)
depend on nothing but that repeat's requests, so the store keeps them beside the requests
(`cell_digest`). They are the exact values `cell_metrics`, `time_slices` and `spikes` return: a digest
is a cache, never a second definition. `DIGEST_VERSION` names the definitions it was computed with; a
digest of another version, or whose fields do not match today's dataclasses, is ignored and the figures
are computed again from the stored requests (they always remain).
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Any

from specfrontier.metrics.specs import ADDED_METRICS, metric_revisions
from specfrontier.metrics.timeslices import Spike, TimeSlice, spikes, time_slices
from specfrontier.metrics.window import CellMetrics, cell_metrics
from specfrontier.records import RequestRecord, session_turn

DIGEST_VERSION = 1
"""The digest's own format, and the definitions behind TimeSlice and Spike: bump when one changes. A
metric's definition is versioned by its declaration instead (`MetricSpec.revision`, `metric_revisions`):
a digest records the revised ones, and one computed with other revisions, or without a metric declared
since, is recomputed. Digests written before revisions existed hold none: all at 1, still valid."""


@dataclass(frozen=True, slots=True)
class CellDigest:
    """The figures of one stored repeat of a cell (see the module docstring)."""

    metrics: CellMetrics
    """`cell_metrics(requests, C)` of a closed-loop cell, `cell_metrics(requests)` of an open-loop one."""
    slices: tuple[TimeSlice, ...]
    spikes: tuple[Spike, ...]
    session_turns: bool
    """Whether any request is a session-replay turn (`<session>#t<turn>`): only those cells are re-read
    for the per-turn figures."""


def digest_requests(requests: Sequence[RequestRecord], concurrency: int | None) -> CellDigest:
    """The digest of one repeat; `concurrency` is None for an open-loop cell (no steady span)."""
    slices = tuple(time_slices(requests))
    return CellDigest(
        metrics=cell_metrics(requests, concurrency),
        slices=slices,
        spikes=tuple(spikes(requests, slices)),
        session_turns=any(session_turn(r.prompt_id) is not None for r in requests),
    )


def try_digest(requests: Sequence[RequestRecord], concurrency: int | None) -> CellDigest | None:
    """`digest_requests`, or None where the figures cannot be computed (records no server sends, such as
    times centuries apart). A digest is a cache: failing to fill it must not lose the measured cell it
    belongs to, so the store keeps the cell without one and readers compute (and report) the error."""
    try:
        return digest_requests(requests, concurrency)
    except Exception:  # any failure of a cache fill leaves the cell stored without it
        return None


def _flat(item: CellMetrics | TimeSlice | Spike) -> dict[str, Any]:
    """A flat dataclass's fields (all scalars) as a dict: `asdict` deep-copies every value, which costs
    more than the figures themselves for a cell's few hundred slices."""
    return {f.name: getattr(item, f.name) for f in fields(item)}


def pack_digest(digest: CellDigest) -> bytes:
    """A digest as the store keeps it: zlib-compressed JSON (`unpack_digest` reads it back)."""
    return zlib.compress(_to_json(digest).encode())


def unpack_digest(packed: bytes) -> CellDigest | None:
    """A stored digest, or None when it cannot be read (a damaged blob) or was computed by other
    definitions: a digest is a cache of figures the cell's requests still hold, so readers then compute
    them again."""
    try:
        return _from_json(zlib.decompress(packed).decode())
    except (zlib.error, UnicodeDecodeError, ValueError, KeyError, TypeError):
        return None


def _to_json(digest: CellDigest) -> str:
    data: dict[str, Any] = {
        "version": DIGEST_VERSION,
        "metrics": _flat(digest.metrics),
        "slices": [_flat(s) for s in digest.slices],
        "spikes": [_flat(s) for s in digest.spikes],
        "session_turns": digest.session_turns,
    }
    if revisions := metric_revisions():  # only when a metric was revised: earlier digests stay as they were
        data["revisions"] = revisions
    return json.dumps(data, separators=(",", ":"))


_ADDED = {m.name for m in ADDED_METRICS}


def _matches(cls: type, values: dict[str, Any]) -> bool:
    return {f.name for f in fields(cls)} == set(values)


def _from_json(text: str) -> CellDigest | None:
    """The digest in `text`, or None when it was computed by other definitions (then recompute it)."""
    data = json.loads(text)
    if data.get("version") != DIGEST_VERSION or data.get("revisions", {}) != metric_revisions():
        return None
    data["metrics"].setdefault("more", {})  # written before metrics could be declared in files of their own
    if not _matches(CellMetrics, data["metrics"]) or set(data["metrics"]["more"]) != _ADDED:
        return None
    if any(not _matches(TimeSlice, s) for s in data["slices"]) or any(not _matches(Spike, s) for s in data["spikes"]):
        return None
    return CellDigest(
        metrics=CellMetrics(**data["metrics"]),
        slices=tuple(TimeSlice(**s) for s in data["slices"]),
        spikes=tuple(Spike(**s) for s in data["spikes"]),
        session_turns=bool(data["session_turns"]),
    )


__all__ = ["DIGEST_VERSION", "CellDigest", "digest_requests", "pack_digest", "try_digest", "unpack_digest"]
