"""SGLang's own front end as the test double (`scripts/install.sh --sglang`, `specfrontier.sim.sglang_frontend`).

The engine options here launch SGLang 0.5.23's real server code (its argument parser and start-up resolution,
TokenizerManager, DetokenizerManager, FastAPI app) from `.venv-sglang`, with the simulator standing in for
its scheduler. A missing `.venv-sglang` fails the test with the fix, as a missing `.venv-vllm` does: CI must
never pass by skipping the SGLang tests."""

from __future__ import annotations

import contextlib
import json
import subprocess
import uuid
from collections.abc import AsyncIterator, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from builders import tagged_processes
from specfrontier.engines.sglang import SGLangAdapter
from specfrontier.errors import DependencyError
from specfrontier.process.launch import ServerProcess

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


TAG = f"SPECFRONTIER_SGLANG_FRONTEND_TEST={uuid.uuid4().hex}"
"""Carried in the environment of every process a module using `frontend_tagged` starts."""


@pytest.fixture(scope="module", autouse=True)
def frontend_tagged() -> Iterator[None]:
    """Imported by a test module (autouse there): every process it starts carries TAG, and none of SGLang's
    front end may outlive the module."""
    key, value = TAG.split("=")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(key, value)
        yield
    assert not tagged_processes(TAG, b"sglang_frontend"), "SGLang front-end processes left running"


@contextlib.asynccontextmanager
async def frontend_server(argv: Sequence[str], port: int, log: Path) -> AsyncIterator[ServerProcess]:
    """Start `argv` (a command that serves SGLang's front end on 127.0.0.1:`port`), wait until SGLang's own
    `/health_generate` answers (with the adapter's probe time), stop it by process group on the way out."""
    server = ServerProcess(list(argv), log)
    server.start()
    try:
        await server.wait_ready(
            f"http://127.0.0.1:{port}{SGLangAdapter.health_path}",
            timeout_s=float(frontend_engine()["startup_timeout_s"]),
            probe_timeout_s=SGLangAdapter.health_timeout_s,
        )
        yield server
    finally:
        server.stop()


RESOLVE = """
import json, sys
from specfrontier.sim.sglang_frontend import take_sim_options, with_defaults
from sglang.srt.arg_groups.overrides import resolved_view
from sglang.srt.server_args import prepare_server_args
KEYS = ("speculative_algorithm", "speculative_adaptive", "speculative_adaptive_config", "speculative_num_steps",
        "speculative_eagle_topk", "speculative_num_draft_tokens", "max_running_requests")
out = []
for argv in json.loads(sys.argv[1]):
    try:
        args = prepare_server_args(with_defaults(take_sim_options(argv)[0]))
        args.resolve_once()
        view = resolved_view(args)
        out.append({key: getattr(view, key) for key in KEYS})
    except Exception as exc:
        out.append({"error": type(exc).__name__, "message": str(exc)})
print("RESULT " + json.dumps(out))
"""
"""SGLang's own parse and start-up resolution of each command line, as `sim.sglang_frontend` runs them before
anything is served (`prepare_server_args`, then `ServerArgs.resolve_once`, the first step of `launch_server`:
srt/entrypoints/engine.py:1153): the resolved speculative settings, or SGLang's exception."""


PRELUDE = "import specfrontier.sim.sglang_scheduler\n"
"""Declares the torchvision operator schemas SGLang's import needs on CPU torch (`sglang_scheduler.
declare_torchvision_schemas`, at import), as the front end does before it imports SGLang."""


def run_in_sglang(code: str, payload: Any) -> Any:
    """Run `code` with SGLang 0.5.23 importable (`.venv-sglang`'s Python, after PRELUDE): it reads
    `json.loads(sys.argv[1])` and prints one line `RESULT <json>`, which is returned. One process: importing
    SGLang costs ~15 s."""
    require_sglang()
    done = subprocess.run(
        [str(SGLANG_PYTHON), "-c", PRELUDE + code, json.dumps(payload)], capture_output=True, text=True, timeout=600
    )
    line = next((ln for ln in done.stdout.splitlines() if ln.startswith("RESULT ")), None)
    assert done.returncode == 0 and line is not None, done.stderr[-3000:]
    return json.loads(line.removeprefix("RESULT "))


def resolve_with_sglang(commands: Sequence[Sequence[str]]) -> list[dict[str, Any]]:
    """SGLang 0.5.23's verdict on each launch command (`python -m MODULE ARGS...`: ARGS are resolved, `RESOLVE`)."""
    results: list[dict[str, Any]] = run_in_sglang(RESOLVE, [list(command[3:]) for command in commands])
    return results
