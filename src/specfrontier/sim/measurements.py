"""Measured cells to calibrate a profile against, read from JSON.

Two shapes are accepted, so published tables can be used as they are:

1. the seed's shape (shared/data/seed_frontier.json): `{"per_request_tok_s": {steps: {C: v}},
   "aggregate_tok_s": {steps: {C: v}}, "max_running_requests": {steps: v}, ...}` (other keys ignored);
2. a list of objects `{"steps": int, "concurrency": int, "per_request_tok_s"?: number,
   "aggregate_tok_s"?: number, "max_running_requests"?: int}` (or `{"cells": [...]}`).

Every problem raises ConfigError naming the file, the entry and the fix.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specfrontier.errors import ConfigError
from specfrontier.textfiles import MAX_DATA_BYTES, load_json, read_text_utf8

_SEED_KEYS = ("per_request_tok_s", "aggregate_tok_s", "max_running_requests")
_CELL_KEYS = {"steps", "concurrency", "per_request_tok_s", "aggregate_tok_s", "max_running_requests"}


@dataclass(frozen=True, slots=True)
class CalibrationCell:
    """One published or measured cell a profile is calibrated against: speculative steps x client concurrency,
    with the figures given (not a run's stored cell, `runs.cell.MeasuredCell`)."""

    steps: int
    concurrency: int
    per_request_tok_s: float | None = None
    aggregate_tok_s: float | None = None


@dataclass(frozen=True, slots=True)
class Measurements:
    """Cells plus the server's reported max_running_requests per steps value."""

    cells: tuple[CalibrationCell, ...]
    max_running_requests: tuple[tuple[int, int], ...] = ()
    """(steps, max_running_requests) pairs, sorted by steps."""
    source: str = "measurements"


def _int(value: Any, where: str, field: str, *, minimum: int = 1) -> int:
    if isinstance(value, bool):
        raise ConfigError(f"{where}: {field} = {value!r}: not a whole number; fix: write a whole number")
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise ConfigError(f"{where}: {field} = {value!r}: not a whole number; fix: write a whole number") from None
    if number != value and not (isinstance(value, str) and value.strip() == str(number)):
        raise ConfigError(f"{where}: {field} = {value!r}: not a whole number; fix: write a whole number")
    if number < minimum:
        raise ConfigError(f"{where}: {field} = {value!r}: must be at least {minimum}; fix: correct the value")
    return number


def _rate(value: Any, where: str, field: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value <= 0:
        raise ConfigError(f"{where}: {field} = {value!r}: must be a positive number; fix: correct the value or drop it")
    return float(value)


def _from_seed(data: dict[str, Any], source: str) -> Measurements:
    figures: dict[tuple[int, int], dict[str, float]] = {}
    for key in ("per_request_tok_s", "aggregate_tok_s"):
        table = data.get(key, {})
        if not isinstance(table, dict):
            raise ConfigError(
                f"{source}: {key} = {type(table).__name__}: must map steps to {{C: value}}; fix: use that shape"
            )
        for steps_key, row in table.items():
            steps = _int(steps_key, source, f"{key} key")
            if not isinstance(row, dict):
                raise ConfigError(
                    f"{source}: {key}[{steps_key}] = {row!r}: must map C to a value; fix: use {{C: value}}"
                )
            for c_key, value in row.items():
                where = f"{source}: {key}[{steps_key}][{c_key}]"
                rate = _rate(value, where, "value")
                if rate is not None:
                    figures.setdefault((steps, _int(c_key, where, "concurrency")), {})[key] = rate
    mrr_table = data.get("max_running_requests", {})
    if not isinstance(mrr_table, dict):
        raise ConfigError(f"{source}: max_running_requests: must map steps to a number; fix: use {{steps: value}}")
    mrr = {
        _int(k, source, "max_running_requests key"): _int(v, source, f"max_running_requests[{k}]")
        for k, v in mrr_table.items()
    }
    cells = tuple(
        CalibrationCell(s, c, f.get("per_request_tok_s"), f.get("aggregate_tok_s"))
        for (s, c), f in sorted(figures.items())
    )
    return Measurements(cells, tuple(sorted(mrr.items())), source)


def _from_list(items: list[Any], source: str) -> Measurements:
    cells: list[CalibrationCell] = []
    mrr: dict[int, int] = {}
    for i, item in enumerate(items):
        where = f"{source}: [{i}]"
        if not isinstance(item, dict):
            raise ConfigError(f'{where} = {item!r}: not an object; fix: write {{"steps": .., "concurrency": ..}}')
        unknown = sorted(set(item) - _CELL_KEYS)
        if unknown:
            raise ConfigError(
                f"{where}: {unknown[0]} = {item[unknown[0]]!r}: unknown key; fix: use only {sorted(_CELL_KEYS)}"
            )
        for key in ("steps", "concurrency"):
            if key not in item:
                raise ConfigError(f'{where}: {key} is missing; fix: add "{key}"')
        steps = _int(item["steps"], where, "steps")
        concurrency = _int(item["concurrency"], where, "concurrency")
        per_request = _rate(item.get("per_request_tok_s"), where, "per_request_tok_s")
        aggregate = _rate(item.get("aggregate_tok_s"), where, "aggregate_tok_s")
        if item.get("max_running_requests") is not None:
            mrr[steps] = _int(item["max_running_requests"], where, "max_running_requests")
        if per_request is not None or aggregate is not None:
            cells.append(CalibrationCell(steps, concurrency, per_request, aggregate))
    return Measurements(tuple(cells), tuple(sorted(mrr.items())), source)


def parse_measurements(data: Any, *, source: str = "measurements") -> Measurements:
    """Measurements from parsed JSON in either accepted shape; ConfigError when neither fits or nothing is measured."""
    if isinstance(data, dict) and "cells" in data:
        data = data["cells"]
    if isinstance(data, dict) and any(k in data for k in _SEED_KEYS):
        result = _from_seed(data, source)
    elif isinstance(data, list):
        result = _from_list(data, source)
    else:
        raise ConfigError(
            f"{source}: top level = {type(data).__name__}: neither the seed table shape nor a list of cells; "
            'fix: write a list of {"steps", "concurrency", "per_request_tok_s"|"aggregate_tok_s"} objects'
        )
    if not result.cells:
        raise ConfigError(f"{source}: no per_request_tok_s or aggregate_tok_s value found; fix: add measured cells")
    return result


def load_measurements(path: Path) -> Measurements:
    """Read and parse a measurements JSON file; unreadable or malformed files raise ConfigError."""
    text = read_text_utf8(path, "calibrate: path", max_bytes=MAX_DATA_BYTES, too_big_fix="pass the measured cells only")
    try:
        data = load_json(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path}: not valid JSON ({exc.msg}, line {exc.lineno}); fix: correct the JSON") from exc
    return parse_measurements(data, source=str(path))


__all__ = ["CalibrationCell", "Measurements", "load_measurements", "parse_measurements"]
