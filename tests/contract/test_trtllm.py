"""TensorRT-LLM under the engine contract: the real adapter's argv, options file and readers against the
simulator's face that speaks trtllm-serve (`specfrontier.sim.trtllm_serve`); TensorRT-LLM itself needs an
NVIDIA GPU."""

from __future__ import annotations

import sys
from typing import Any, ClassVar

from contract.engine_contract import LiveEngineContract


class TestTrtllmContract(LiveEngineContract):
    engine = "trtllm"
    options: ClassVar[dict[str, Any]] = {
        "name": "trtllm",
        "model": "/models/target",
        "speculative_model": "/models/eagle3",
        "launcher": [sys.executable, "-m", "specfrontier.sim.trtllm_serve"],
        "startup_timeout_s": 30,
        "extra_args": ["--sim_time_scale", "20"],
    }
    baseline: ClassVar[dict[str, Any]] = {"name": "baseline"}
    speculative: ClassVar[dict[str, Any]] = {"name": "eagle3-3", "decoding_type": "Eagle3", "max_draft_len": 3}
