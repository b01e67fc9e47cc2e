"""vLLM, known so far by how its settings spell the speculative parameters.

Tables measured on vLLM (`specfrontier import`) and the vLLM schedule format use these names; the
adapter that launches `vllm serve` per setting is not built yet (see the open issues).
"""

from __future__ import annotations

from specfrontier.engines.base import ParamNames
from specfrontier.engines.registry import register_names

VLLM_NAMES = ParamNames(
    depth=("num_speculative_tokens",),
    family=("method",),
    draft_length=("num_speculative_tokens",),
)

register_names("vllm", VLLM_NAMES)

__all__ = ["VLLM_NAMES"]
