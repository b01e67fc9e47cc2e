"""The simulator under the engine contract: its HTTP face, a real server process that also exercises
SGLang's interface (the simulator's adapter is SGLang's, launched as `python -m specfrontier.sim.serve`)."""

from __future__ import annotations

from typing import Any, ClassVar

from contract.engine_contract import LiveEngineContract


class TestSimContract(LiveEngineContract):
    engine = "sim"
    options: ClassVar[dict[str, Any]] = {"name": "sim", "face": "http", "time_scale": 20.0, "startup_timeout_s": 30}
    baseline: ClassVar[dict[str, Any]] = {"name": "no-spec"}
    speculative: ClassVar[dict[str, Any]] = {"name": "steps3", "algorithm": "EAGLE3", "num_steps": 3, "eagle_topk": 1}
