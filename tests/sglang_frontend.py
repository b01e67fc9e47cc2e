"""SGLang's own front end as the test double (`scripts/install.sh --sglang`, `specfrontier.sim.sglang_frontend`).

The engine options here launch SGLang 0.5.23's real server code (its argument parser and start-up resolution,
TokenizerManager, DetokenizerManager, FastAPI app) from `.venv-sglang`, with the simulator standing in for
its scheduler. A missing `.venv-sglang` fails the test with the fix, as a missing `.venv-vllm` does: CI must
never pass by skipping the SGLang tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from specfrontier.errors import DependencyError

ROOT = Path(__file__).resolve().parents[1]
SGLANG_VENV = ROOT / ".venv-sglang"
SGLANG_VERSION = "0.5.23"
"""The SGLang these tests speak to (pinned by scripts/install.sh --sglang)."""
FRONTEND_MODULE = "specfrontier.sim.sglang_frontend"
TIME_SCALE = "1"
"""The simulator runs in real time behind the front end: the SGLang adapter takes its timestamps as they come."""


SGLANG_PYTHON = SGLANG_VENV / "bin" / "python"
MODEL_DIR = SGLANG_VENV / "models" / "smollm2-135m-instruct"


def require_sglang() -> None:
    """DependencyError naming the fix when `.venv-sglang` or its model folder is missing (never a skip)."""
    if not SGLANG_PYTHON.is_file() or not (MODEL_DIR / "config.json").is_file():
        raise DependencyError(
            f"{SGLANG_VENV} (SGLang {SGLANG_VERSION}'s front end and the model's config) is missing; "
            "fix: scripts/install.sh --sglang"
        )


def frontend_engine(**overrides: Any) -> dict[str, Any]:
    """`engine:` options of the SGLang adapter serving SGLang's front end over the simulator (the target is
    also the STANDALONE drafter, as in a self-speculation run)."""
    engine: dict[str, Any] = {
        "name": "sglang",
        "python": str(SGLANG_PYTHON),
        "launch_module": FRONTEND_MODULE,
        "model_path": str(MODEL_DIR),
        "draft_model_path": str(MODEL_DIR),
        "startup_timeout_s": 600,
        "extra_args": ["--sim-time-scale", TIME_SCALE],
    }
    engine.update(overrides)
    return engine
