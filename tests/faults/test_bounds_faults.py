"""Fault matrix, bounds (issue 39, items 1, 2, 4, 5 and 8): what a user hands the tool is bounded, and
nothing the user has is destroyed.

- an output path that holds a store (`report -o s.db`, `compare -o`, `schedule -o`, through a symlink, a
  store named like a text file) is refused with one line, exit 2, and the store keeps every byte;
- a YAML alias bomb (a config or a traffic profile of a few hundred bytes that expands to gigabytes) is
  one line, exit 2, in bounded memory and time;
- a `space:` or a settings list over `max_settings` is one line naming the count and the fix, before
  anything is written;
- a device, a FIFO or an oversized file where a file is read (a config, prompts, a traffic profile, an
  import table), and a prompts file of more prompts than one pass may hold, are one line each;
- a run id that is a path, an unknown run, a text file or a damaged store given as the store exit 2; a
  start failure names its log once; a config value of the wrong type, a level listed twice, and a config
  without settings (the engine's built-in ones run: said, in the output and the report).

Every case runs the real CLI process, under a memory limit where the fault used to take gigabytes.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from tests.faults.conftest import (
    checkpointed_run,
    cli,
    corrupt_request_pages,
    count_rows,
    latest_run,
    sim_config,
    write_config,
)

MEMORY_LIMIT = 2 * 2**30
"""Address space of a CLI run that must stay bounded (an alias bomb or /dev/zero took several GB before)."""


def _limited(*args: str, cwd: Path, timeout: float = 60.0) -> tuple[subprocess.CompletedProcess[str], float]:
    """`specfrontier ARGS` with its address space capped at MEMORY_LIMIT; the result and its wall time."""
    start = time.monotonic()
    done = cli(*args, cwd=cwd, timeout=timeout, memory_limit=MEMORY_LIMIT)
    return done, time.monotonic() - start


def _one_line(done: subprocess.CompletedProcess[str], code: int, kind: str) -> str:
    """Exit `code`, one `kind: ...` line on stderr, no traceback."""
    assert "Traceback" not in done.stderr, done.stderr[-2000:]
    assert done.returncode == code, done.stderr[-2000:]
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr[-2000:]
    assert lines[0].startswith(f"{kind}: "), lines[0][:2000]
    return lines[0]


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _virtual(store: Path, **more: Any) -> dict[str, Any]:
    """Two settings at C = 1, 2 on the virtual simulator: a run of a second or two."""
    return {
        "engine": {"name": "sim", "min_requests": 8},
        "concurrency": [1, 2],
        "repeats": 1,
        "workload": {"max_tokens": 16, "ignore_eos": True},
        "settings": [{"name": "no-spec"}, {"name": "s2", "algorithm": "EAGLE3", "num_steps": 2}],
        "store": str(store),
        **more,
    }


@pytest.fixture(scope="module")
def stored(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A stored virtual run, checkpointed into its main file (a test copies it)."""
    work = tmp_path_factory.mktemp("stored")
    return checkpointed_run(work, _virtual(work / "s.db"))


def _copy(stored: tuple[Path, str], target: Path) -> Path:
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(stored[0], target)
    return target


# -- item 1: an output path that holds a store ------------------------------------------------------------
_OUTPUTS: dict[str, Callable[[str, Path, Path], list[str]]] = {
    "report-html-own-store": lambda run, store, target: ["report", run, "--store", str(store), "-f", "html"],
    "report-json-other-store": lambda run, store, target: ["report", run, "--store", str(store), "-f", "json"],
    "report-terminal": lambda run, store, target: ["report", run, "--store", str(store)],
    "compare-html": lambda run, store, target: ["compare", run, run, "--store", str(store), "-f", "html"],
    "schedule": lambda run, store, target: ["schedule", run, "--engine", "sglang", "--store", str(store)],
}


@pytest.mark.parametrize("case", sorted(_OUTPUTS))
def test_an_output_path_that_holds_a_store_is_refused_and_the_store_kept(
    case: str, stored: tuple[Path, str], tmp_path: Path
) -> None:
    store = _copy(stored, tmp_path / "s.db")
    target = store if case == "report-html-own-store" else _copy(stored, tmp_path / "other" / "notes.txt")
    before = {p: _digest(p) for p in (store, target)}
    rows = count_rows(target)
    done = cli(*_OUTPUTS[case](stored[1], store, target), "-o", str(target), cwd=tmp_path)
    line = _one_line(done, 2, "ConfigError")
    assert line.startswith(f"ConfigError: -o = {str(target)!r}: is an SQLite database (a store?); writing there ")
    assert "fix: choose another file name" in line
    assert {p: _digest(p) for p in (store, target)} == before
    assert count_rows(target) == rows and rows.runs == 1


def test_an_output_symlink_to_a_store_is_refused_and_the_link_kept(stored: tuple[Path, str], tmp_path: Path) -> None:
    store = _copy(stored, tmp_path / "s.db")
    link = tmp_path / "report.html"
    link.symlink_to("s.db")
    before = _digest(store)
    done = cli("report", stored[1], "--store", str(store), "-f", "html", "-o", str(link), cwd=tmp_path)
    assert "is an SQLite database" in _one_line(done, 2, "ConfigError")
    assert link.is_symlink() and _digest(store) == before


# -- item 2: a YAML alias bomb ------------------------------------------------------------------------------
def _alias_bomb(levels: int, key: str) -> str:
    """`key: [&a [lol x 9], &b [*a x 9], &c [*b x 9], ...]`: 9**(levels+1) strings in ~300 bytes."""
    parts = ['&a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for previous, name in zip("abcdefghij", "bcdefghijk"[:levels], strict=False):
        parts.append(f"&{name} [" + ",".join([f"*{previous}"] * 9) + "]")
    return f"{key}: [" + ", ".join(parts) + "]\n"


def test_a_yaml_alias_bomb_in_a_config_is_refused_in_bounded_memory(tmp_path: Path) -> None:
    config = tmp_path / "c.yaml"
    config.write_text(_alias_bomb(8, "notes"))  # 332 bytes; quoted whole, it was over 6 GB
    assert config.stat().st_size < 600
    done, seconds = _limited("tune", "--config", str(config), cwd=tmp_path)
    line = _one_line(done, 2, "ConfigError")
    assert line.startswith(f"ConfigError: {config}: YAML aliases expand 21 nodes written into ")
    assert line.endswith("fix: write the repeated values out, or nest aliases less deeply (an anchor used as a "
                         "shorthand stays far under this)")  # fmt: skip
    assert seconds < 30, seconds  # 17.6 s and 720 MB for 7 levels before (2-core host, shared)
    assert list(tmp_path.iterdir()) == [config]


def test_a_yaml_alias_bomb_in_a_traffic_profile_is_refused(stored: tuple[Path, str], tmp_path: Path) -> None:
    profile = tmp_path / "day.yaml"
    profile.write_text(_alias_bomb(8, "concurrency"))
    done, _ = _limited("recommend", stored[1], "--store", str(stored[0]), "--traffic", str(profile), cwd=tmp_path)
    assert "YAML aliases expand" in _one_line(done, 2, "ConfigError")


def test_an_anchor_used_as_a_shorthand_is_still_read(tmp_path: Path) -> None:
    config = tmp_path / "c.yaml"
    config.write_text(
        f"engine: {{name: sim}}\nstore: {tmp_path / 's.db'}\nconcurrency: &levels [1, 2]\n"
        "search: {target_concurrency: *levels}\nsettings:\n  - &plain {name: no-spec}\n"
        "  - {<<: *plain, name: s2, algorithm: EAGLE3, num_steps: 2}\n"
    )
    done = cli("tune", "--config", str(config), "--dry-run", cwd=tmp_path)
    assert done.returncode == 0 and "2 setting(s)" in done.stdout, done.stderr


@pytest.mark.parametrize("where", ["config", "prompts", "traffic"])
def test_a_number_longer_than_python_reads_is_one_line(where: str, stored: tuple[Path, str], tmp_path: Path) -> None:
    """A 5,000-digit number: Python's int() refuses it with a plain ValueError, which the YAML and JSON
    readers let through as a traceback."""
    huge = "9" * 5000
    store = tmp_path / "s.db"
    if where == "config":
        config = tmp_path / "c.yaml"
        config.write_text(f"engine: {{name: sim}}\nstore: {store}\nconcurrency: [{huge}]\n")
        args = ["tune", "--config", str(config)]
    elif where == "prompts":
        prompts = tmp_path / "p.jsonl"
        prompts.write_text(json.dumps({"id": "a", "prompt": "say"})[:-1] + f', "n": {huge}}}\n')
        config = write_config(tmp_path / "c.yaml", _http(store, workload={"prompts": str(prompts)}))
        args = ["tune", "--config", str(config)]
    else:
        body = {"status": "success", "data": {"resultType": "matrix", "result": [
            {"metric": {"__name__": "vllm:num_requests_running"}, "values": [[0, "1"]]}]}}  # fmt: skip
        profile = tmp_path / "day.json"
        profile.write_text(json.dumps(body).replace("[[0, ", f"[[{huge}, "))
        args = ["recommend", stored[1], "--store", str(stored[0]), "--traffic", str(profile)]
    line = _one_line(cli(*args, cwd=tmp_path), 2, "ConfigError")
    assert "a number longer than 4300 digits" in line and "fix: " in line
    assert not store.exists()


# -- item 4: more settings than max_settings ----------------------------------------------------------------
def test_a_space_over_max_settings_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    store = tmp_path / "s.db"
    space = {"algorithm": "EAGLE3", "num_steps": list(range(1, 9)), "eagle_topk": [1, 2, 4, 8],
             "num_draft_tokens": [2, 4, 8, 16, 32, 64], "max_running_requests": [16, 32, 64]}  # fmt: skip
    data = {k: v for k, v in _virtual(store).items() if k != "settings"} | {"space": space}
    done = cli("tune", "--config", str(write_config(tmp_path / "c.yaml", data)), cwd=tmp_path)
    line = _one_line(done, 2, "ConfigError")
    assert " space: 576 combinations give " in line
    assert "settings, more than max_settings = 256 (a grid search launches a server for each: " in line
    assert "; fix: narrow the space (fewer values per knob), or set max_settings: " in line
    assert not store.exists()


def test_a_settings_list_over_max_settings_is_refused_and_a_raised_bound_takes_it(tmp_path: Path) -> None:
    store = tmp_path / "s.db"
    settings = [{"name": "no-spec"}] + [{"name": f"s{i}", "algorithm": "EAGLE3", "num_steps": 2, "eagle_topk": 1,
                                         "max_running_requests": i} for i in range(1, 300)]  # fmt: skip
    config = write_config(tmp_path / "c.yaml", _virtual(store, settings=settings))
    line = _one_line(cli("tune", "--config", str(config), cwd=tmp_path), 2, "ConfigError")
    assert line == (
        f"ConfigError: {config}: settings: 300 listed, more than max_settings = 256 (a grid search launches a server "
        "for each: 300 launches); fix: list fewer settings, or set max_settings: 300 to run them all"
    )
    assert not store.exists()
    config = write_config(tmp_path / "c.yaml", _virtual(store, settings=settings, max_settings=300))
    done = cli("tune", "--config", str(config), "--dry-run", cwd=tmp_path)
    assert done.returncode == 0 and "300 setting(s)" in done.stdout, done.stderr


# -- item 5: files read without bounds ----------------------------------------------------------------------
def _http(store: Path, **more: Any) -> dict[str, Any]:
    """`sim_config` with one setting (`workloads:` replaces its `workload:`)."""
    data = sim_config(store, **{"settings": [{"name": "no-spec"}], **more})
    if "workloads" in more:
        del data["workload"]
    return data


def _node(path: Path, kind: str) -> Path:
    """`path` as a FIFO, or as a symlink to /dev/zero (a command may read a file by its suffix)."""
    if kind == "fifo":
        os.mkfifo(path)
    else:
        path.symlink_to("/dev/zero")
    return path


@pytest.mark.parametrize("kind", ["device", "fifo"])
@pytest.mark.parametrize("where", ["config", "prompts", "workloads", "traffic", "import", "calibrate"])
def test_a_device_or_fifo_where_a_file_is_read_is_one_line(
    where: str, kind: str, tmp_path: Path, stored: tuple[Path, str]
) -> None:
    store = tmp_path / "s.db"
    if where == "config":
        node = Path("/dev/zero") if kind == "device" else _node(tmp_path / "c.yaml", kind)
        args = ["tune", "--config", str(node)]
    elif where in ("prompts", "workloads"):
        node = _node(tmp_path / "prompts.jsonl", kind)
        shape: dict[str, Any] = {"workload": {"prompts": str(node)}}
        if where == "workloads":
            shape = {"workloads": [{"source": str(node), "max_tokens": 16}]}
        args = ["tune", "--config", str(write_config(tmp_path / "t.yaml", _http(store, **shape)))]
    elif where == "traffic":
        node = _node(tmp_path / "day.yaml", kind)
        args = ["recommend", stored[1], "--store", str(stored[0]), "--traffic", str(node)]
    elif where == "import":
        args = ["import", str(_node(tmp_path / "table.csv", kind)), "--store", str(store)]
    else:
        args = ["calibrate", str(_node(tmp_path / "cells.json", kind))]
    done, seconds = _limited(*args, cwd=tmp_path, timeout=30)
    line = _one_line(done, 2, "ConfigError")
    what = "a character device" if kind == "device" else "a FIFO"
    assert f": {what}, not a regular file (it may never end); fix: pass a regular file" in line
    assert seconds < 20, seconds  # /dev/zero: a MemoryError after 17 s and 1.7 GB before; a FIFO: blocked for good
    assert not store.exists()


def test_a_file_over_its_bound_is_refused_by_its_size(tmp_path: Path) -> None:
    store = tmp_path / "s.db"
    prompts = tmp_path / "big.jsonl"
    with prompts.open("wb") as fh:
        fh.truncate(65 * 2**20)  # sparse: 65 MiB on paper, nothing on the disk
    config = write_config(tmp_path / "c.yaml", _http(store, workload={"prompts": str(prompts)}))
    done, _ = _limited("tune", "--config", str(config), cwd=tmp_path)
    assert _one_line(done, 2, "ConfigError") == (
        f"ConfigError: workload.prompts = '{prompts}': 65.0 MiB, over the 64.0 MiB this file may hold; fix: keep a "
        f"sample (e.g. `shuf -n 1000 {prompts} > sample.jsonl`)"
    )
    big = tmp_path / "big.yaml"
    with big.open("wb") as fh:
        fh.truncate(17 * 2**20)
    done, _ = _limited("tune", "--config", str(big), cwd=tmp_path)
    assert _one_line(done, 2, "ConfigError") == (
        f"ConfigError: --config = '{big}': 17.0 MiB, over the 16.0 MiB this file may hold; fix: pass the config "
        "meant here (a config is a few kilobytes)"
    )
    assert not store.exists()


def _prompts(path: Path, count: int) -> Path:
    path.write_text("".join(json.dumps({"id": f"p{i}", "prompt": f"say {i}"}) + "\n" for i in range(count)))
    return path


def test_a_pass_of_more_prompts_than_it_may_hold_is_refused_with_the_sample_fix(tmp_path: Path) -> None:
    store = tmp_path / "s.db"
    prompts = _prompts(tmp_path / "many.jsonl", 10_001)
    config = write_config(tmp_path / "c.yaml", _http(store, workload={"prompts": str(prompts)}))
    done = cli("tune", "--config", str(config), cwd=tmp_path)
    assert _one_line(done, 2, "ConfigError") == (
        f"ConfigError: workload.prompts = '{prompts}': 10001 prompts, more than the 10000 one pass may hold (every "
        f"cell sends whole passes: at least 10001 requests per cell); fix: keep a sample (e.g. `shuf -n 1000 "
        f"{prompts} > sample.jsonl`), or draw a seeded one with workloads: [{{source: {prompts}, prompts: 1000}}]"
    )
    wl = [{"source": str(prompts), "max_tokens": 16}]
    config = write_config(tmp_path / "c.yaml", _http(store, workloads=wl))
    line = _one_line(cli("tune", "--config", str(config), cwd=tmp_path), 2, "ConfigError")
    assert line.endswith("fix: draw a seeded sample with workloads[0].prompts: 1000")
    assert not store.exists()


def test_a_seeded_draw_from_a_big_prompts_file_is_measured(tmp_path: Path) -> None:
    store = tmp_path / "s.db"
    prompts = _prompts(tmp_path / "many.jsonl", 10_001)
    wl = [{"source": str(prompts), "prompts": 4, "max_tokens": 16, "ignore_eos": True}]
    data = _http(store, workloads=wl, concurrency=[1], repeats=1)
    done = cli("tune", "--config", str(write_config(tmp_path / "c.yaml", data)), "--quiet", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert count_rows(store).requests == 4  # one pass over the 4 prompts drawn, not over 10,001


# -- item 8: exit codes, the log named once, a strict config, the built-in settings said ----------------------
@pytest.mark.parametrize(
    "args",
    [["report", "./s.db"], ["report", "s.db", "--store", "s.db"], ["compare", "x", "runs/s.db"],
     ["schedule", "s.db", "--engine", "sglang"], ["tune", "--resume", "s.db"]],
    ids=["report-path", "report-store-as-run", "compare", "schedule", "resume"],
)  # fmt: skip
def test_a_run_id_that_is_a_path_is_refused_with_the_runs_command(
    args: list[str], stored: tuple[Path, str], tmp_path: Path
) -> None:
    _copy(stored, tmp_path / "s.db")
    line = _one_line(cli(*args, cwd=tmp_path), 2, "ConfigError")
    path = next(a for a in args if a.endswith(".db"))
    assert line == (
        f"ConfigError: run = {path!r}: a file path, not a run id (ids look like 20260101-120000-ab12); fix: list "
        f"the store's runs with `specfrontier runs --store {path}`, then pass one of them with --store {path}"
    )


@pytest.mark.parametrize("case", ["unknown-run", "missing-store", "text-file", "damaged-page"])
def test_a_store_or_run_that_cannot_be_used_exits_2(case: str, stored: tuple[Path, str], tmp_path: Path) -> None:
    store = _copy(stored, tmp_path / "s.db")
    run_id = stored[1]
    if case == "unknown-run":
        run_id = "20200101-000000-0000"
    elif case == "missing-store":
        store.unlink()
    elif case == "text-file":
        store.write_text("notes\n")
    else:
        corrupt_request_pages(store)
    done = cli("report", run_id, "--store", str(store), "-f", "json", cwd=tmp_path)
    line = _one_line(done, 2, "StoreRefused")
    expected = {
        "unknown-run": f"run = '20200101-000000-0000': not in store {str(store)!r} (latest: {stored[1]}); fix: ",
        "missing-store": f"--store = {str(store)!r}: no such file; fix: ",
        "text-file": f"store = {str(store)!r}: opening: file is not a database (SQLITE_NOTADB); fix: ",
        "damaged-page": f"store = {str(store)!r}, run = {stored[1]!r}: reading cells: database disk image is malformed",
    }[case]
    assert expected in line


def test_a_start_failure_names_its_log_once(tmp_path: Path) -> None:
    store = tmp_path / "s.db"
    settings = [{"name": "no-spec", "extra_args": ["--fail-at-start"]}]
    done = cli("tune", "--config", str(write_config(tmp_path / "c.yaml", _http(store, settings=settings))),
               cwd=tmp_path)  # fmt: skip
    assert done.returncode == 1, done.stderr[-2000:]
    failed = [line for line in done.stderr.splitlines() if line.startswith("FAILED:")]
    assert len(failed) == 1 and failed[0].count("(log: ") == 1, failed
    assert "no-spec.log)" in failed[0]
    shown = [line for line in done.stdout.splitlines() if "(log: " in line]
    assert shown and all(line.count("(log: ") == 1 for line in shown), shown


@pytest.mark.parametrize(
    ("field", "value", "expected"),
    [
        ("concurrency", [True], "concurrency[0] = True: Input should be a valid integer; fix: use a whole number, "
                                "without quotes (true and false are not numbers)"),
        ("concurrency", ["4"], "concurrency[0] = '4': Input should be a valid integer"),
        ("concurrency", [1.0], "concurrency[0] = 1.0: Input should be a valid integer"),
        ("concurrency", [4, 4], "concurrency = [4, 4]: 4 is listed twice; fix: list each level once (more "
                                "measurements of a level: raise repeats)"),
        ("repeats", True, "repeats = True: Input should be a valid integer"),
        ("workload", {"max_tokens": "16"}, "workload.max_tokens = '16': Input should be a valid integer"),
        ("workload", {"ignore_eos": "yes"}, "workload.ignore_eos = 'yes': Input should be a valid boolean; fix: use "
                                            "true or false, without quotes"),
    ],
    ids=["true", "quoted", "float", "twice", "repeats-bool", "max-tokens-quoted", "bool-quoted"],
)  # fmt: skip
def test_a_config_value_of_another_type_or_a_level_twice_is_refused(
    field: str, value: object, expected: str, tmp_path: Path
) -> None:
    store = tmp_path / "s.db"
    config = write_config(tmp_path / "c.yaml", _virtual(store) | {field: value})
    line = _one_line(cli("tune", "--config", str(config), cwd=tmp_path), 2, "ConfigError")
    assert line.startswith(f"ConfigError: {config}: {expected}"), line
    assert not store.exists()


def test_a_config_without_settings_says_the_built_in_ones_run(tmp_path: Path) -> None:
    store = tmp_path / "s.db"
    data = {k: v for k, v in _virtual(store).items() if k != "settings"} | {"concurrency": [1]}
    config = write_config(tmp_path / "c.yaml", data)
    done = cli("tune", "--config", str(config), cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    said = (
        f"settings: none in {config}, so the sim engine's 6 built-in settings run (no-spec, steps1, steps2, "
        "steps3, steps4, steps5); list `settings:` or a `space:` to choose them"
    )
    assert done.stderr.splitlines()[0] == said
    report = cli("report", latest_run(store), "--store", str(store), cwd=tmp_path)
    assert said in report.stdout.splitlines()[:4], report.stdout[:2000]
