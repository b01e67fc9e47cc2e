"""SGLang under the engine contract, static part only: SGLang itself is not installed here.

Its adapter builds its commands with the `--help` of the simulator's face, which takes SGLang's
spellings; SGLang's live interface is checked through the simulator's face (`test_sim.py`)."""

from __future__ import annotations

import subprocess
import sys
from typing import Any, ClassVar

from contract.engine_contract import EngineContract
from specfrontier.engines import registry
from specfrontier.engines.base import EngineAdapter


def _sim_help() -> str:
    done = subprocess.run(
        [sys.executable, "-m", "specfrontier.sim.serve", "--help"], capture_output=True, text=True, check=True
    )
    return done.stdout


class TestSGLangContract(EngineContract):
    engine = "sglang"
    options: ClassVar[dict[str, Any]] = {"name": "sglang", "model_path": "/models/target"}
    baseline: ClassVar[dict[str, Any]] = {"name": "no-spec"}
    speculative: ClassVar[dict[str, Any]] = {"name": "steps3", "algorithm": "EAGLE3", "num_steps": 3, "eagle_topk": 1}

    def make_adapter(self, spec: registry.EngineSpec, options: Any) -> EngineAdapter[Any]:
        """SGLang with the simulator face's --help (SGLang's spellings): no SGLang install needed."""
        return spec.adapter(options, help_text=_sim_help())  # type: ignore[call-arg]
