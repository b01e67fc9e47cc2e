"""A discrete-event simulator of a continuous-batching speculative-decoding server (SGLang-like).

Everything this package returns is a MODEL PREDICTION, not a measurement: a profile (`profiles/*.json`)
describes a deployment by a capacity law, a draft/verify cycle cost with an MoE expert-coverage term,
a prefill cost and per-workload acceptance; the event loop (`core`) turns a setting and a load into
per-request timings. The formulas are the performance theory's (`specfrontier.theory`, shared with the
fitted model); `costs` maps a profile onto them. Use it to plan sweeps, to test the tool end to end
without a GPU, and to check a model against measured cells (`calibrate`), never in place of measuring
the real server.

- `profile`: `SimProfile`, `load_profile(name)`; `setting`: SGLang's flag rules (`SimSetting`);
- `core`: the event loop; `virtual`: closed-loop cells in virtual time returning `RequestRecord`s;
  `protocol`: how `tune --engine sim` drives and summarises a cell (shared with `calibrate`);
  `steady`: the closed-form surrogate used for fitting;
- `calibrate`: fit a profile to measured cells (`calibrate.calibrate`; not re-exported here, so the
  name `specfrontier.sim.calibrate` stays the module) and print the per-cell comparison.
"""

from specfrontier.sim.calibrate import (
    CalibrationTable,
    TableRow,
    calibrate_main,
    predict_table,
    render_table,
)
from specfrontier.sim.core import ServerCore, SimRequest, StepResult
from specfrontier.sim.costs import capacity, capacity_law, prefill_time_ms, setting_cycle_ms
from specfrontier.sim.measurements import CalibrationCell, Measurements, load_measurements, parse_measurements
from specfrontier.sim.profile import SimProfile, WorkloadModel, available_profiles, load_profile, parse_profile
from specfrontier.sim.protocol import CellFigures, CellProtocol, predict_figures, seed_protocol, simulate_repeat
from specfrontier.sim.setting import ResolvedSetting, SimSetting, resolve_setting
from specfrontier.sim.steady import SteadyCell, steady_cell
from specfrontier.sim.virtual import simulate_cell

__all__ = [
    "CalibrationCell",
    "CalibrationTable",
    "CellFigures",
    "CellProtocol",
    "Measurements",
    "ResolvedSetting",
    "ServerCore",
    "SimProfile",
    "SimRequest",
    "SimSetting",
    "SteadyCell",
    "StepResult",
    "TableRow",
    "WorkloadModel",
    "available_profiles",
    "calibrate_main",
    "capacity",
    "capacity_law",
    "load_measurements",
    "load_profile",
    "parse_measurements",
    "parse_profile",
    "predict_figures",
    "predict_table",
    "prefill_time_ms",
    "render_table",
    "resolve_setting",
    "seed_protocol",
    "setting_cycle_ms",
    "simulate_cell",
    "simulate_repeat",
    "steady_cell",
]
