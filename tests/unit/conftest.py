"""Fixtures shared by the unit tests: the command line in-process, a stored run, the simulator's HTTP face with
an orphan check, and the run the HTML report tests render (helpers that are not fixtures live in tests/builders.py)."""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from builders import Cli, SimFace, StoredRun, back_to_back, record_ms, run_cli, tagged_processes
from html_runs import build_run


@pytest.fixture
def cli(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> Cli:
    """`specfrontier ARGS` in-process (argv patched, output captured): (exit code, stdout, stderr), colour
    codes removed (`builders.run_cli`)."""
    return functools.partial(run_cli, monkeypatch, capsys)


@pytest.fixture
def no_orphans(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """Every process the test starts (servers, the children they fork, client workers) inherits a tag in its
    environment; the test fails if any of them is still alive when it ends. Yields the tag (NAME=VALUE).

    Processes found are killed by pid after they are counted, so one leak does not fail the next test too;
    nothing outside this test carries the tag, so nothing else is touched."""
    tag = f"SPECFRONTIER_UNIT_TEST={uuid.uuid4().hex}"
    key, value = tag.split("=")
    monkeypatch.setenv(key, value)
    yield tag
    left = tagged_processes(tag, b"")
    for pid in left:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    assert not left, f"processes left running: {left}"


@pytest.fixture
def sim_face(no_orphans: str) -> SimFace:
    """The simulator's HTTP face for this test, with the orphan check of `no_orphans`."""
    return SimFace()


@pytest.fixture
def stored_run(tmp_path: Path) -> tuple[Path, str]:
    """A store (closed) with one finished llama.cpp run: baseline and ngram at C = 1, 2, three repeats each,
    ngram delivering about twice the baseline's tok/s; each setting's command is `llama-server --alias NAME`."""
    run = StoredRun(tmp_path / "runs.db", environment={"engine_version": "b1"})
    for pos, name in enumerate(("baseline", "ngram")):
        run.setting(name, status="ok", command=("llama-server", "--alias", name), capacity=2)
        for c in (1, 2):
            for rep in range(3):
                tokens = 40 * (pos + 1) + rep
                run.cell(name, c, back_to_back([record_ms(0, 50, 1000, tokens) for _ in range(c)]), repeat=rep)
    return run.status("done").close()


@pytest.fixture(scope="session")
def html_run_data(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The run of tests/html_runs.py as the reports read it (`RunData`, frozen), built once per session."""
    from specfrontier.analysis import load_run

    store, run_id = build_run(tmp_path_factory.mktemp("html-run") / "s.db")
    data = load_run(store, run_id)
    store.close()
    return data
