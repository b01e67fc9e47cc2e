"""vLLM under the engine contract: the real vLLM for the CPU (`scripts/install.sh --vllm`; markers `vllm`
and `slow`: each launch takes about a minute on 2 cores)."""

from __future__ import annotations

import functools
from typing import Any, ClassVar

import pytest

from contract.engine_contract import LiveEngineContract
from specfrontier.engines import registry
from specfrontier.engines.base import EngineAdapter
from specfrontier.engines.vllm import InstalledVllm, VllmAdapter, VllmEngine, resolve_python


@functools.cache
def _installed_vllm() -> InstalledVllm:
    """The real vLLM's probe, once per session (it imports vLLM: ~15-30 s)."""
    return VllmAdapter._probe(resolve_python(VllmEngine()))


@pytest.mark.vllm
@pytest.mark.slow
class TestVllmContract(LiveEngineContract):
    engine = "vllm"
    # --enforce-eager: ready in ~65 s instead of ~200 s of torch.compile warm-up on 2 cores
    options: ClassVar[dict[str, Any]] = {
        "name": "vllm",
        "model": "smollm2",
        "max_model_len": 1024,
        "cpu_kvcache_space_gib": 1,
        "extra_args": ["--enforce-eager"],
    }
    baseline: ClassVar[dict[str, Any]] = {"name": "baseline"}
    speculative: ClassVar[dict[str, Any]] = {
        "name": "ngram-k3",
        "method": "ngram",
        "num_speculative_tokens": 3,
        "prompt_lookup_max": 4,
        "prompt_lookup_min": 2,
    }

    def make_adapter(self, spec: registry.EngineSpec, options: Any) -> EngineAdapter[Any]:
        return spec.adapter(options, installed=_installed_vllm())  # type: ignore[call-arg]
