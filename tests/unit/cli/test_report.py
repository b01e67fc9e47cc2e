"""`specfrontier report` (and `compare`'s output paths) on a hand-built store (the `stored_run` fixture).

Most cases call `specfrontier.cli.main` in-process (argv patched, output captured); one runs it as a real
process, where the terminal renderer writes through a file the CLI opens itself.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from builders import Cli, cli_process
from specfrontier.analysis import load_run
from specfrontier.report import report_json
from specfrontier.store import Store


# -- report ----------------------------------------------------------------------------------------
def test_report_json_equals_the_library_export(stored_run: tuple[Path, str], cli: Cli) -> None:
    path, run_id = stored_run
    code, out, err = cli("report", run_id, "--store", str(path), "--format", "json")
    assert (code, err) == (0, "")
    store = Store(path)
    expected = report_json(load_run(store, run_id))
    store.close()
    assert json.loads(out) == json.loads(json.dumps(expected))
    assert len(json.loads(out)["cells"]) == 4


def test_report_markdown(stored_run: tuple[Path, str], cli: Cli) -> None:
    path, run_id = stored_run
    code, out, _ = cli("report", run_id, "--store", str(path), "-f", "markdown")
    assert code == 0
    assert out.startswith(f"## specfrontier run {run_id}\n")
    assert "### Aggregate tok/s" in out
    assert "| C | baseline | ngram |" in out
    assert "llama-server --alias ngram" in out


def test_report_terminal(stored_run: tuple[Path, str], cli: Cli) -> None:
    path, run_id = stored_run
    code, out, _ = cli("report", run_id, "--store", str(path))
    assert code == 0
    assert f"run {run_id}" in out
    assert "Aggregate tok/s" in out
    assert "Recommendation" in out
    assert "C = 1, 2: ngram" in out
    assert "llama-server --alias ngram" in out


@pytest.mark.parametrize(
    ("fmt", "marker"), [("json", '"run_id"'), ("markdown", "### Recommendation"), ("csv", "run_id,setting,")]
)
def test_report_output_file(stored_run: tuple[Path, str], tmp_path: Path, fmt: str, marker: str, cli: Cli) -> None:
    path, run_id = stored_run
    target = tmp_path / f"report.{fmt}"
    code, out, _ = cli("report", run_id, "--store", str(path), "-f", fmt, "-o", str(target))
    assert (code, out) == (0, "")
    text = target.read_text(encoding="utf-8")
    assert marker in text
    assert run_id in text


def test_report_terminal_output_file(stored_run: tuple[Path, str], tmp_path: Path) -> None:
    # As a real process: the terminal renderer writes through a file the CLI opens itself.
    path, run_id = stored_run
    target = tmp_path / "report.txt"
    done = cli_process("report", run_id, "--store", str(path), "-o", str(target), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout == ""
    text = target.read_text(encoding="utf-8")
    assert "Recommendation" in text
    assert "llama-server --alias ngram" in text


def test_unknown_run_is_a_store_error(stored_run: tuple[Path, str], cli: Cli) -> None:
    path, run_id = stored_run
    code, _, err = cli("report", "nope", "--store", str(path))
    assert code == 2
    assert err.startswith("StoreRefused: run = 'nope'")
    assert run_id in err  # the known ids are listed


def test_report_html_to_a_file_and_next_to_the_store(stored_run: tuple[Path, str], tmp_path: Path, cli: Cli) -> None:
    path, run_id = stored_run
    target = tmp_path / "page.html"
    code, out, _ = cli("report", run_id, "--store", str(path), "-f", "html", "-o", str(target))
    assert code == 0 and str(target) in out
    assert target.read_text(encoding="utf-8").startswith("<!DOCTYPE html>")
    code, out, _ = cli("report", run_id, "--store", str(path), "-f", "html")
    beside = path.with_name(f"{path.stem}-{run_id}.html")
    assert code == 0 and beside.is_file() and beside.name in out.replace("\n", "")


# -- output paths ----------------------------------------------------------------------------------
def _files(folder: Path) -> list[str]:
    """What is in `folder` besides the store (and SQLite's -wal/-shm files)."""
    return sorted(p.name for p in folder.iterdir() if not p.name.startswith("runs.db"))


@pytest.mark.parametrize("fmt", ["terminal", "markdown", "json", "csv", "html"])
def test_report_to_a_directory_is_one_config_error_and_writes_nothing(
    stored_run: tuple[Path, str], tmp_path: Path, fmt: str, cli: Cli
) -> None:
    path, run_id = stored_run
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    before = _files(tmp_path)
    code, out, err = cli("report", run_id, "--store", str(path), "-f", fmt, "-o", str(out_dir))
    suffix = {"terminal": "txt", "markdown": "md"}.get(fmt, fmt)
    assert (code, out) == (2, "")
    assert (
        err == f"ConfigError: -o = '{out_dir}': is a directory; fix: give a file name, e.g. {out_dir}/report.{suffix}\n"
    )
    assert _files(tmp_path) == before  # no out.tmp, no HTML beside the store
    assert list(out_dir.iterdir()) == []


@pytest.mark.parametrize("command", [["report", "-f", "html"], ["report", "-f", "json"], ["compare", "-f", "html"]])
def test_output_in_a_missing_directory_is_one_config_error(
    stored_run: tuple[Path, str], tmp_path: Path, command: list[str], cli: Cli
) -> None:
    path, run_id = stored_run
    target = tmp_path / "missing" / "x.html"
    runs = [run_id, run_id] if command[0] == "compare" else [run_id]
    code, out, err = cli(command[0], *runs, *command[1:], "--store", str(path), "-o", str(target))
    assert (code, out) == (2, "")
    assert err == (
        f"ConfigError: -o = '{target}': directory {target.parent} does not exist; "
        "fix: create it or choose another path\n"
    )
    assert _files(tmp_path) == []


def test_compare_html_to_a_directory_is_one_config_error(
    stored_run: tuple[Path, str], tmp_path: Path, cli: Cli
) -> None:
    path, run_id = stored_run
    code, _, err = cli("compare", run_id, run_id, "--store", str(path), "-f", "html", "-o", str(tmp_path))
    assert code == 2
    assert (
        err
        == f"ConfigError: -o = '{tmp_path}': is a directory; fix: give a file name, e.g. {tmp_path}/comparison.html\n"
    )
    assert _files(tmp_path) == []


def test_report_file_is_replaced_whole_with_no_tmp_left(stored_run: tuple[Path, str], tmp_path: Path, cli: Cli) -> None:
    path, run_id = stored_run
    target = tmp_path / "r.md"
    target.write_text("stale")
    code, _, _ = cli("report", run_id, "--store", str(path), "-f", "markdown", "-o", str(target))
    assert code == 0
    assert "### Recommendation" in target.read_text(encoding="utf-8")
    assert _files(tmp_path) == ["r.md"]
