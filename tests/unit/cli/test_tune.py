"""`specfrontier tune` failing fast on bad input: a config error exits 2 with one line naming the field and
the fix, before any server process is run and before a store is created.

Most cases call `specfrontier.cli.main` in-process (argv patched, output captured); one runs it as a real
process to check the exit code and stderr that a shell sees.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from builders import Cli, cli_process
from specfrontier.engines import registry


@pytest.fixture
def fake_server(tmp_path: Path) -> tuple[Path, Path]:
    """An executable stand-in for llama-server that leaves a marker file if anything ever runs it."""
    marker = tmp_path / "server-was-run"
    binary = tmp_path / "llama-server"
    binary.write_text(f"#!/bin/sh\ntouch '{marker}'\n", encoding="utf-8")
    binary.chmod(0o755)
    return binary, marker


def _tune_config(tmp_path: Path, binary: Path, body: str) -> Path:
    """Write `body` as the config; `{engine}` becomes an engine block with the fake binary and a model file."""
    model = tmp_path / "model.gguf"
    model.write_bytes(b"GGUF")
    path = tmp_path / "tune.yaml"
    engine = f"engine:\n  binary: {binary}\n  model: {model}\n"
    path.write_text(body.replace("{engine}", engine).replace("{binary}", str(binary)), encoding="utf-8")
    return path


BASE = "settings:\n  - name: baseline\n"
DRAFT = "  - name: draft\n    spec_type: draft-simple\n"
BAD_CONFIGS = {
    "unknown engine": (
        "engine:\n  name: exllamav2\n" + BASE,
        ["engine.name = 'exllamav2'", f"fix: use one of {', '.join(registry.engine_names())}"],
    ),
    "concurrency 0": ("{engine}" + BASE + "concurrency: [0, 2]\n", ["concurrency[0] = 0", "fix: use a larger value"]),
    "unknown spec type": (
        "{engine}" + BASE + "  - name: eagle\n    spec_type: eagle3\n",
        ["settings[1].spec_type = 'eagle3'", "fix: use one of the allowed values"],
    ),
    "unknown key": ("{engine}" + BASE + "repeat: 3\n", ["repeat = 3", "fix: remove this key"]),
    "draft-simple without draft model": (
        "{engine}" + BASE + DRAFT,
        ["engine.draft_model is unset", "fix: set engine.draft_model"],
    ),
    "missing model file": (
        "engine:\n  binary: {binary}\n  model: /nonexistent/target.gguf\n" + BASE,
        ["engine.model = '/nonexistent/target.gguf'", "not found", "fix:"],
    ),
    "missing draft model file": (
        "{engine}  draft_model: /nonexistent/draft.gguf\n" + BASE + DRAFT,
        ["engine.draft_model = '/nonexistent/draft.gguf'", "not found", "fix:"],
    ),
}


@pytest.mark.parametrize("case", list(BAD_CONFIGS))
def test_tune_with_a_bad_config_exits_2_before_any_process(
    tmp_path: Path, fake_server: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch, case: str, cli: Cli
) -> None:
    binary, marker = fake_server
    body, expected = BAD_CONFIGS[case]
    config = _tune_config(tmp_path, binary, body)
    monkeypatch.chdir(tmp_path)  # the default store, specfrontier.db, would land here
    code, out, err = cli("tune", "--config", str(config), "--quiet")
    assert code == 2, err
    assert out == ""
    assert err.count("\n") == 1, err
    assert err.startswith("ConfigError: "), err
    for part in expected:
        assert part in err, (part, err)
    assert not marker.exists()  # the server binary was never run, not even for --help
    assert not (tmp_path / "specfrontier.db").exists()


def test_tune_with_a_missing_config_file_exits_2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cli: Cli) -> None:
    monkeypatch.chdir(tmp_path)
    missing = tmp_path / "nope.yaml"
    code, out, err = cli("tune", "--config", str(missing))
    assert (code, out) == (2, "")
    assert err.count("\n") == 1
    assert err.startswith(f"ConfigError: --config = '{missing}': cannot read it")
    assert "fix: pass an existing file" in err
    assert list(tmp_path.iterdir()) == []  # no store, no log


def test_tune_config_error_from_a_real_process(tmp_path: Path, fake_server: tuple[Path, Path]) -> None:
    binary, marker = fake_server
    config = _tune_config(tmp_path, binary, "{engine}" + BASE + "concurrency: [0]\n")
    done = cli_process("tune", "--config", str(config), cwd=tmp_path)
    assert done.returncode == 2
    assert done.stdout == ""
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("ConfigError: ")
    assert "concurrency[0] = 0" in lines[0] and "fix:" in lines[0]
    assert not marker.exists()
    assert not (tmp_path / "specfrontier.db").exists()
    assert _processes_running(binary) == set()


def _processes_running(binary: Path) -> set[str]:
    """pids of running processes whose command line names `binary` (Linux /proc).

    Only this test's own fake server counts: a llama-server started by anything else on the machine
    (another test, another user) says nothing about whether this tune launched one.
    """
    pids = set()
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and str(binary).encode() in (entry / "cmdline").read_bytes():
                pids.add(entry.name)
        except OSError:
            continue
    return pids
