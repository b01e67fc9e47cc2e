"""Measurement files: both accepted shapes, and precise errors for malformed ones."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specfrontier.errors import ConfigError
from specfrontier.sim import CalibrationCell, load_measurements, parse_measurements


def test_seed_shape() -> None:
    data = {
        "per_request_tok_s": {"1": {"1": 123, "4": 119}},
        "aggregate_tok_s": {"1": {"4": 400}},
        "max_running_requests": {"1": 26},
        "notes": ["ignored"],
    }
    m = parse_measurements(data)
    assert m.cells == (CalibrationCell(1, 1, 123.0, None), CalibrationCell(1, 4, 119.0, 400.0))
    assert m.max_running_requests == ((1, 26),)


def test_list_shape_and_cells_wrapper() -> None:
    cells = [
        {"steps": 2, "concurrency": 1, "per_request_tok_s": 186},
        {"steps": 2, "concurrency": 32, "aggregate_tok_s": 1900.5, "max_running_requests": 21},
    ]
    m = parse_measurements({"cells": cells})
    assert m.cells == (CalibrationCell(2, 1, 186.0, None), CalibrationCell(2, 32, None, 1900.5))
    assert m.max_running_requests == ((2, 21),)


@pytest.mark.parametrize(
    ("data", "needle"),
    [
        ({"hello": 1}, "top level = dict"),
        ([{"steps": 1}], "concurrency is missing"),
        ([{"steps": 1, "concurrency": 2, "tok_s": 3}], "tok_s = 3: unknown key"),
        ([{"steps": 1.5, "concurrency": 2, "per_request_tok_s": 3}], "steps = 1.5: not a whole number"),
        ([{"steps": 1, "concurrency": 2, "per_request_tok_s": -3}], "per_request_tok_s = -3: must be a positive"),
        ([{"steps": 1, "concurrency": 2}], "no per_request_tok_s or aggregate_tok_s"),
        ({"per_request_tok_s": {"1": [1, 2]}}, "must map C to a value"),
    ],
)
def test_malformed_measurements(data: object, needle: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_measurements(data, source="m.json")
    assert needle in str(info.value) and "fix:" in str(info.value)


def test_unreadable_and_invalid_files(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read it"):
        load_measurements(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json", encoding="utf-8")
    with pytest.raises(ConfigError, match="not valid JSON"):
        load_measurements(bad)
    good = tmp_path / "good.json"
    good.write_text(json.dumps([{"steps": 1, "concurrency": 1, "per_request_tok_s": 100}]), encoding="utf-8")
    assert load_measurements(good).cells == (CalibrationCell(1, 1, 100.0, None),)
