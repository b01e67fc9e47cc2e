"""Cell sizing from the measured request lifetime (`runs.pacing.CellSizer`) and what `drift_control: auto`
resolves to per engine and config."""

from __future__ import annotations

from dataclasses import replace

import pytest

from builders import record_ms
from specfrontier.config.load import parse_config
from specfrontier.engines.registry import spec_of
from specfrontier.metrics.window import cell_metrics
from specfrontier.runs.cell import CellDone
from specfrontier.runs.pacing import CellSizer, drift_mode


def _done(setting: str, level: int, e2e_ms: int) -> CellDone:
    metrics = replace(cell_metrics([record_ms(0, 10, e2e_ms, 10)], level), e2e_p50_ms=float(e2e_ms))
    return CellDone(setting, level, 0, metrics, None, workload="w")


def test_without_cell_lifetimes_the_fixed_duration_applies() -> None:
    sizer = CellSizer(None, 25.0)
    sizer.warmed_up([record_ms(0, 10, 3000, 10)], 4)
    assert sizer.duration_s("a", "w", 1) == 25.0
    assert CellSizer(None, None).duration_s("a", "w", 4) is None


def test_a_launch_interpolates_from_its_first_request_to_its_warmup() -> None:
    sizer = CellSizer(8, None)
    sizer.first_request(record_ms(0, 10, 1000, 10))
    sizer.warmed_up([record_ms(0, 10, 3000, 10), record_ms(0, 10, 3000, 10)], 4)
    assert sizer.duration_s("a", "w", 1) == pytest.approx(4.0)  # C = 1: no ramp, half the lifetimes
    assert sizer.duration_s("a", "w", 2) == pytest.approx(8 * (1 + 2 / 3))
    assert sizer.duration_s("a", "w", 4) == pytest.approx(24.0)


def test_a_measured_cell_sizes_the_next_cell_of_its_level_and_the_cap_holds() -> None:
    sizer = CellSizer(8, 20.0)
    sizer.warmed_up([record_ms(0, 10, 3000, 10)], 4)
    assert sizer.duration_s("a", "w", 4) == 20.0  # 24 s from the warmup alone, capped
    sizer.cell_done(_done("a", 2, 1200))
    assert sizer.duration_s("a", "w", 2) == pytest.approx(9.6)
    assert sizer.duration_s("b", "w", 2) == pytest.approx(9.6)  # another setting: the level's last cell
    sizer.cell_done(_done("b", 2, 1000))
    assert sizer.duration_s("a", "w", 2) == pytest.approx(9.6)  # its own last cell first
    assert sizer.duration_s("b", "w", 2) == pytest.approx(8.0)


def test_auto_interleaves_where_the_engine_relaunches_cheaply_and_the_config_allows() -> None:
    base = {"settings": [{"name": "baseline"}], "store": "x.db"}
    llama = parse_config({**base, "engine": {"name": "llamacpp"}})
    assert drift_mode(llama, spec_of(llama).adapter(llama.engine)) == "interleave"
    off = parse_config({**base, "engine": {"name": "llamacpp"}, "drift_control": "off"})
    assert drift_mode(off, spec_of(off).adapter(off.engine)) == "off"
    vllm = parse_config({"engine": {"name": "vllm", "model": "m"}, "settings": [{"name": "baseline"}]})
    # a relaunch costs minutes: one launch per setting and one more at the end, the drift reference (issue 39)
    assert drift_mode(vllm, spec_of(vllm).adapter(vllm.engine)) == "reference"
    ray = parse_config(
        {"engine": {"name": "vllm", "model": "m"}, "settings": [{"name": "baseline"}], "executor": {"kind": "ray"}}
    )
    assert drift_mode(ray, spec_of(ray).adapter(ray.engine)) == "off"  # no machine of its own for a reference


def test_each_cell_size_says_why() -> None:
    """What the report's "How long each cell ran" shows (issue 39, item 7): the lifetimes, where the lifetime
    was read, and the cap when it bound."""
    sizer = CellSizer(8, 20.0, cap_name="--cell-duration")
    assert sizer.size("a", "w", 4).why == "--cell-duration = 20 s (no request lifetime measured yet)"
    sizer.warmed_up([record_ms(0, 10, 600, 10)], 64)
    size = sizer.size("a", "w", 16)
    assert size.duration_s == pytest.approx(4.8)
    assert size.why == "8 request lifetimes of 0.60 s (the median E2E of the warmup at C=64)"
    sizer.first_request(record_ms(0, 10, 500, 10))
    assert (
        sizer.size("a", "w", 1).why
        == "4 request lifetimes of 0.50 s (interpolated from the first request (C=1) to the warmup at C=64)"
    )
    sizer.cell_done(_done("a", 16, 3000))
    assert sizer.size("a", "w", 16).why == (
        "8 request lifetimes of 3.00 s (the median E2E of this setting's last cell at this level), capped by "
        "--cell-duration = 20 s"
    )
    assert sizer.size("b", "w", 16).why.endswith(
        "(the median E2E of the last cell at this level), capped by --cell-duration = 20 s"
    )
    assert sizer.size("a", "w", 16).facts() == {"send_s": 20.0, "sized_by": sizer.size("a", "w", 16).why}
    assert CellSizer(None, None).size("a", "w", 4).why == "the request count alone"
