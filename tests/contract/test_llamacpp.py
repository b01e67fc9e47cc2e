"""llama.cpp under the engine contract: the real llama-server (marker `engine`: scripts/install.sh builds it)."""

from __future__ import annotations

from typing import Any, ClassVar

import pytest

from contract.engine_contract import LiveEngineContract


@pytest.mark.engine
class TestLlamaCppContract(LiveEngineContract):
    engine = "llamacpp"
    options: ClassVar[dict[str, Any]] = {"name": "llamacpp", "ctx_size": 2048}
    baseline: ClassVar[dict[str, Any]] = {"name": "baseline"}
    speculative: ClassVar[dict[str, Any]] = {
        "name": "ngram",
        "spec_type": "ngram-simple",
        "ngram_size_n": 3,
        "ngram_size_m": 8,
    }
