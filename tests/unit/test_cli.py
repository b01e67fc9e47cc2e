"""The command line: `runs` and `report` on a hand-built store, and `tune` failing fast on bad input.

Most cases call `specfrontier.cli.main` in-process (argv patched, output captured); a few run it as a real
process to check the exit codes and stderr that a shell sees.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from builders import back_to_back
from builders import record_ms as _record
from builders import run_cli as _cli
from specfrontier.analysis import load_run
from specfrontier.engines import registry
from specfrontier.report import report_json
from specfrontier.store import Store

MS = 1_000_000  # ns per ms
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _process(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("FORCE_COLOR", "TTY_COMPATIBLE")}
    return subprocess.run(
        [sys.executable, "-c", "from specfrontier.cli import main; main()", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.fixture
def stored(tmp_path: Path) -> tuple[Path, str]:
    """A store with one finished run: baseline and ngram at C = 1, 2, three repeats each."""
    path = tmp_path / "runs.db"
    store = Store(path)
    run_id = store.create_run(engine="llamacpp", config={}, environment={"engine_version": "b1"})
    for pos, name in enumerate(("baseline", "ngram")):
        store.add_setting(run_id, setting_id=name, position=pos, name=name, params={}, speculative=pos > 0)
        store.update_setting(run_id, name, status="ok", command=("llama-server", "--alias", name), capacity=2)
        for c in (1, 2):
            for rep in range(3):
                tokens = 40 * (pos + 1) + rep  # ngram about twice the baseline's tok/s
                requests = back_to_back([_record(0, 50, 1000, tokens) for _ in range(c)])
                store.record_cell(
                    run_id,
                    setting_id=name,
                    workload="w",
                    concurrency=c,
                    repeat=rep,
                    requests=requests,
                    counters=None,
                    acceptance_source=None,
                )
    store.set_run_status(run_id, "done")
    store.close()
    return path, run_id


# -- runs ------------------------------------------------------------------------------------------
def test_runs_json_lists_the_runs(
    stored: tuple[Path, str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    path, run_id = stored
    code, out, err = _cli(monkeypatch, capsys, "runs", "--json", "--store", str(path))
    assert (code, err) == (0, "")
    (item,) = json.loads(out)
    assert set(item) == {"id", "engine", "status", "created"}
    assert (item["id"], item["engine"], item["status"]) == (run_id, "llamacpp", "done")
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+00:00", item["created"])


def test_runs_plain_and_empty(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    empty = tmp_path / "empty.db"
    Store(empty).close()
    assert _cli(monkeypatch, capsys, "runs", "--json", "--store", str(empty)) == (0, "[]\n", "")
    code, out, _ = _cli(monkeypatch, capsys, "runs", "--store", str(empty))
    assert (code, out.strip()) == (0, "no runs")


# -- report ----------------------------------------------------------------------------------------
def test_report_json_equals_the_library_export(
    stored: tuple[Path, str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    path, run_id = stored
    code, out, err = _cli(monkeypatch, capsys, "report", run_id, "--store", str(path), "--format", "json")
    assert (code, err) == (0, "")
    store = Store(path)
    expected = report_json(load_run(store, run_id))
    store.close()
    assert json.loads(out) == json.loads(json.dumps(expected))
    assert len(json.loads(out)["cells"]) == 4


def test_report_markdown(
    stored: tuple[Path, str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    path, run_id = stored
    code, out, _ = _cli(monkeypatch, capsys, "report", run_id, "--store", str(path), "-f", "markdown")
    assert code == 0
    assert out.startswith(f"## specfrontier run {run_id}\n")
    assert "### Aggregate tok/s" in out
    assert "| C | baseline | ngram |" in out
    assert "llama-server --alias ngram" in out


def test_report_terminal(
    stored: tuple[Path, str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    path, run_id = stored
    code, out, _ = _cli(monkeypatch, capsys, "report", run_id, "--store", str(path))
    assert code == 0
    assert f"run {run_id}" in out
    assert "Aggregate tok/s" in out
    assert "Recommendation" in out
    assert "C = 1, 2: ngram" in out
    assert "llama-server --alias ngram" in out


@pytest.mark.parametrize(
    ("fmt", "marker"), [("json", '"run_id"'), ("markdown", "### Recommendation"), ("csv", "run_id,setting,")]
)
def test_report_output_file(
    stored: tuple[Path, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    fmt: str,
    marker: str,
) -> None:
    path, run_id = stored
    target = tmp_path / f"report.{fmt}"
    code, out, _ = _cli(monkeypatch, capsys, "report", run_id, "--store", str(path), "-f", fmt, "-o", str(target))
    assert (code, out) == (0, "")
    text = target.read_text(encoding="utf-8")
    assert marker in text
    assert run_id in text


def test_report_terminal_output_file(stored: tuple[Path, str], tmp_path: Path) -> None:
    # As a real process: the terminal renderer writes through a file the CLI opens itself.
    path, run_id = stored
    target = tmp_path / "report.txt"
    done = _process("report", run_id, "--store", str(path), "-o", str(target), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout == ""
    text = target.read_text(encoding="utf-8")
    assert "Recommendation" in text
    assert "llama-server --alias ngram" in text


# -- errors ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("command", [["runs"], ["runs", "--json"], ["report", "some-run"]])
def test_missing_store_is_one_store_error_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], command: list[str]
) -> None:
    missing = tmp_path / "nope.db"
    code, out, err = _cli(monkeypatch, capsys, *command, "--store", str(missing))
    assert code == 2  # the store named cannot be used: bad input (issue 39)
    assert out == ""
    assert err.count("\n") == 1
    assert err.startswith("StoreRefused: --store = ")
    assert "nope.db" in err and "fix:" in err
    assert not missing.exists()  # reading never creates a store


def test_unknown_run_is_a_store_error(
    stored: tuple[Path, str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    path, run_id = stored
    code, _, err = _cli(monkeypatch, capsys, "report", "nope", "--store", str(path))
    assert code == 2
    assert err.startswith("StoreRefused: run = 'nope'")
    assert run_id in err  # the known ids are listed


def test_missing_store_from_a_real_process(tmp_path: Path) -> None:
    done = _process("runs", "--json", "--store", str(tmp_path / "nope.db"), cwd=tmp_path)
    assert done.returncode == 2
    assert done.stdout == ""
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("StoreRefused: ")
    assert "Traceback" not in done.stderr


# -- tune: config errors exit 2 before anything starts -----------------------------------------------
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
    tmp_path: Path,
    fake_server: tuple[Path, Path],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    case: str,
) -> None:
    binary, marker = fake_server
    body, expected = BAD_CONFIGS[case]
    config = _tune_config(tmp_path, binary, body)
    monkeypatch.chdir(tmp_path)  # the default store, specfrontier.db, would land here
    code, out, err = _cli(monkeypatch, capsys, "tune", "--config", str(config), "--quiet")
    assert code == 2, err
    assert out == ""
    assert err.count("\n") == 1, err
    assert err.startswith("ConfigError: "), err
    for part in expected:
        assert part in err, (part, err)
    assert not marker.exists()  # the server binary was never run, not even for --help
    assert not (tmp_path / "specfrontier.db").exists()


def test_tune_with_a_missing_config_file_exits_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    missing = tmp_path / "nope.yaml"
    code, out, err = _cli(monkeypatch, capsys, "tune", "--config", str(missing))
    assert (code, out) == (2, "")
    assert err.count("\n") == 1
    assert err.startswith(f"ConfigError: --config = '{missing}': cannot read it")
    assert "fix: pass an existing file" in err
    assert list(tmp_path.iterdir()) == []  # no store, no log


def test_tune_config_error_from_a_real_process(tmp_path: Path, fake_server: tuple[Path, Path]) -> None:
    binary, marker = fake_server
    config = _tune_config(tmp_path, binary, "{engine}" + BASE + "concurrency: [0]\n")
    done = _process("tune", "--config", str(config), cwd=tmp_path)
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


def test_report_html_to_a_file_and_next_to_the_store(
    stored: tuple[Path, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    path, run_id = stored
    target = tmp_path / "page.html"
    code, out, _ = _cli(monkeypatch, capsys, "report", run_id, "--store", str(path), "-f", "html", "-o", str(target))
    assert code == 0 and str(target) in out
    assert target.read_text(encoding="utf-8").startswith("<!DOCTYPE html>")
    code, out, _ = _cli(monkeypatch, capsys, "report", run_id, "--store", str(path), "-f", "html")
    beside = path.with_name(f"{path.stem}-{run_id}.html")
    assert code == 0 and beside.is_file() and beside.name in out.replace("\n", "")


# -- output paths ----------------------------------------------------------------------------------
def _files(folder: Path) -> list[str]:
    """What is in `folder` besides the store (and SQLite's -wal/-shm files)."""
    return sorted(p.name for p in folder.iterdir() if not p.name.startswith("runs.db"))


@pytest.mark.parametrize("fmt", ["terminal", "markdown", "json", "csv", "html"])
def test_report_to_a_directory_is_one_config_error_and_writes_nothing(
    stored: tuple[Path, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    fmt: str,
) -> None:
    path, run_id = stored
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    before = _files(tmp_path)
    code, out, err = _cli(monkeypatch, capsys, "report", run_id, "--store", str(path), "-f", fmt, "-o", str(out_dir))
    suffix = {"terminal": "txt", "markdown": "md"}.get(fmt, fmt)
    assert (code, out) == (2, "")
    assert (
        err == f"ConfigError: -o = '{out_dir}': is a directory; fix: give a file name, e.g. {out_dir}/report.{suffix}\n"
    )
    assert _files(tmp_path) == before  # no out.tmp, no HTML beside the store
    assert list(out_dir.iterdir()) == []


@pytest.mark.parametrize("command", [["report", "-f", "html"], ["report", "-f", "json"], ["compare", "-f", "html"]])
def test_output_in_a_missing_directory_is_one_config_error(
    stored: tuple[Path, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    command: list[str],
) -> None:
    path, run_id = stored
    target = tmp_path / "missing" / "x.html"
    runs = [run_id, run_id] if command[0] == "compare" else [run_id]
    code, out, err = _cli(monkeypatch, capsys, command[0], *runs, *command[1:], "--store", str(path), "-o", str(target))
    assert (code, out) == (2, "")
    assert err == (
        f"ConfigError: -o = '{target}': directory {target.parent} does not exist; "
        "fix: create it or choose another path\n"
    )
    assert _files(tmp_path) == []


def test_compare_html_to_a_directory_is_one_config_error(
    stored: tuple[Path, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    path, run_id = stored
    code, _, err = _cli(
        monkeypatch, capsys, "compare", run_id, run_id, "--store", str(path), "-f", "html", "-o", str(tmp_path)
    )
    assert code == 2
    assert (
        err
        == f"ConfigError: -o = '{tmp_path}': is a directory; fix: give a file name, e.g. {tmp_path}/comparison.html\n"
    )
    assert _files(tmp_path) == []


def test_report_file_is_replaced_whole_with_no_tmp_left(
    stored: tuple[Path, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    path, run_id = stored
    target = tmp_path / "r.md"
    target.write_text("stale")
    code, _, _ = _cli(monkeypatch, capsys, "report", run_id, "--store", str(path), "-f", "markdown", "-o", str(target))
    assert code == 0
    assert "### Recommendation" in target.read_text(encoding="utf-8")
    assert _files(tmp_path) == ["r.md"]
