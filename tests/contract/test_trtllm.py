"""TensorRT-LLM under the engine contract: the real adapter's argv, options file and readers against the
simulator's face that speaks trtllm-serve (`specfrontier.sim.trtllm_serve`); TensorRT-LLM itself needs an
NVIDIA GPU."""

from __future__ import annotations

from typing import Any, ClassVar

from builders import trtllm_face_engine
from contract.engine_contract import LiveEngineContract


class TestTrtllmContract(LiveEngineContract):
    engine = "trtllm"
    options: ClassVar[dict[str, Any]] = trtllm_face_engine()
    baseline: ClassVar[dict[str, Any]] = {"name": "baseline"}
    speculative: ClassVar[dict[str, Any]] = {"name": "eagle3-3", "decoding_type": "Eagle3", "max_draft_len": 3}
