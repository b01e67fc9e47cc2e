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
    assert drift_mode(vllm, spec_of(vllm).adapter(vllm.engine)) == "off"  # a relaunch costs minutes
