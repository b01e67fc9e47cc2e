"""SGLang under the engine contract, live: SGLang 0.5.23's own server code from `.venv-sglang` (its parser,
start-up resolution, TokenizerManager, DetokenizerManager and FastAPI app) with the simulator standing in
for its scheduler (`specfrontier.sim.sglang_frontend`, `scripts/install.sh --sglang`; markers `sglang` and
`slow`: a launch imports SGLang in three processes, ~20-100 s on 2 cores). A missing `.venv-sglang` fails."""

from __future__ import annotations

import functools
from typing import Any, ClassVar

import pytest

from contract.engine_contract import LiveEngineContract
from sglang_frontend import frontend_engine, require_sglang
from specfrontier.engines import registry
from specfrontier.engines.base import EngineAdapter
from specfrontier.engines.probe import probe_help


@functools.cache
def _sglang_help() -> str:
    """SGLang's own `--help`, through the front end, once per session (it imports SGLang: ~15-30 s)."""
    require_sglang()
    options = frontend_engine()
    argv = [options["python"], "-m", options["launch_module"], "--help"]
    return probe_help(argv, timeout_s=300, where="engine", fix="scripts/install.sh --sglang")


@pytest.mark.sglang
@pytest.mark.slow
class TestSGLangContract(LiveEngineContract):
    engine = "sglang"
    options: ClassVar[dict[str, Any]] = frontend_engine()
    baseline: ClassVar[dict[str, Any]] = {"name": "no-spec"}
    speculative: ClassVar[dict[str, Any]] = {
        "name": "standalone-s2",
        "algorithm": "STANDALONE",
        "num_steps": 2,
        "eagle_topk": 1,
    }

    def make_adapter(self, spec: registry.EngineSpec, options: Any) -> EngineAdapter[Any]:
        """SGLang's adapter with SGLang's own `--help` (the probe a sweep's `prepare` runs, made once here)."""
        return spec.adapter(options, help_text=_sglang_help())  # type: ignore[call-arg]
