"""Fault matrix, bad input: every case runs the real CLI process and expects exit 2 and ONE line
(`ConfigError: <where> = <value>: <what>; fix: <action>`), no traceback, and nothing done: no store
row, no server log folder, no file written, no network traffic.

Inputs: files that are not UTF-8 (a config, a prompts JSONL named by `workload.prompts`, by a
`workloads:` entry and by `bench --prompts`, an import CSV), output paths that cannot become a file
(`report`/`compare`/`schedule -o` naming a directory or a path in a missing one), `extra_args` that would
move a server off 127.0.0.1, and `bench` loads above the limits `tune` applies.
"""

from __future__ import annotations

import socket
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from tests.faults.conftest import cli, count_rows, latest_run, sim_config, write_config

from specfrontier.engines import registry

LATIN1_COMMENT = "# réglages du banc d'essai\n".encode("latin-1")
"""A YAML comment saved as Latin-1: the first non-UTF-8 byte (0xe9, 'é') is at offset 3 of line 1."""


def assert_one_config_error(done: subprocess.CompletedProcess[str], *parts: str) -> str:
    """Exit 2, nothing on stdout, one `ConfigError:` line on stderr containing every part."""
    assert "Traceback" not in done.stderr, done.stderr
    assert done.returncode == 2, done.stderr
    assert done.stdout == ""
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("ConfigError: "), lines[0]
    for part in parts:
        assert part in lines[0], (part, lines[0])
    return lines[0]


def assert_nothing_started(work: Path, store: Path) -> None:
    """No run stored (no store file at all) and no server log folder: nothing was launched."""
    assert count_rows(store).runs == 0
    assert not store.exists()
    assert not (work / "specfrontier-logs").exists()


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released): any traffic to it would fail loudly."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def latin1_jsonl(path: Path) -> Path:
    """Two prompts, the second saved as Latin-1: byte 0xe9 at offset 54, line 2."""
    path.write_bytes('{"id": "a", "prompt": "ok"}\n{"id": "b", "prompt": "caf\xe9"}\n'.encode("latin-1"))
    return path


@pytest.mark.parametrize("engine", [s.name for s in registry.specs() if s.default_config is None])
def test_an_engine_without_an_embedded_default_asks_for_a_config(tmp_path: Path, engine: str) -> None:
    """`tune --engine vllm` with no --config: the engine's server and model are the user's to name (every
    registered engine without a `default_config`)."""
    store = tmp_path / "s.db"
    done = cli("tune", "--engine", engine, "--store", str(store), cwd=tmp_path)
    embedded = " or ".join(sorted(s.name for s in registry.specs() if s.default_config is not None))
    line = assert_one_config_error(done, f"--engine = {engine!r} has no embedded default", f"engine.name: {engine}")
    assert line.endswith(f"or --engine {embedded}")  # the engines that have one, from the registry
    assert_nothing_started(tmp_path, store)


# -- files that are not UTF-8 --------------------------------------------------------------------
def test_a_non_utf8_config_is_refused_before_anything_starts(tmp_path: Path) -> None:
    store = tmp_path / "s.db"
    config = tmp_path / "latin1.yaml"
    config.write_bytes(LATIN1_COMMENT + yaml.safe_dump(sim_config(store)).encode())
    done = cli("tune", "--config", str(config), cwd=tmp_path)
    line = assert_one_config_error(done, f"--config = '{config}'", "(byte 0xe9 at offset 3, line 1)")
    assert line.endswith("fix: save it as UTF-8")
    assert_nothing_started(tmp_path, store)


def _with_workloads(store: Path, prompts: Path) -> dict[str, Any]:
    data = sim_config(store, workloads=[{"source": str(prompts)}])
    del data["workload"]
    return data


@pytest.mark.parametrize(
    ("shape", "where"),
    [("workload", "workload.prompts"), ("workloads", "workloads[0].source")],
)
def test_a_non_utf8_prompts_file_is_refused_before_any_server_starts(tmp_path: Path, shape: str, where: str) -> None:
    store = tmp_path / "s.db"
    prompts = latin1_jsonl(tmp_path / "prompts.jsonl")
    if shape == "workload":
        data = sim_config(store, workload={"prompts": str(prompts), "max_tokens": 32, "ignore_eos": True})
    else:
        data = _with_workloads(store, prompts)
    config = write_config(tmp_path / "c.yaml", data)
    done = cli("tune", "--config", str(config), cwd=tmp_path)
    assert_one_config_error(
        done, f"{where} = '{prompts}': not UTF-8 text (byte 0xe9 at offset 54, line 2); fix: save it as UTF-8"
    )
    assert_nothing_started(tmp_path, store)


def test_bench_with_a_non_utf8_prompts_file_contacts_no_server(tmp_path: Path) -> None:
    store = tmp_path / "s.db"
    prompts = latin1_jsonl(tmp_path / "prompts.jsonl")
    url = f"http://127.0.0.1:{closed_port()}"
    done = cli("bench", "--url", url, "--prompts", str(prompts), "--store", str(store), cwd=tmp_path)
    assert_one_config_error(done, f"--prompts = '{prompts}'", "offset 54, line 2", "fix: save it as UTF-8")
    assert_nothing_started(tmp_path, store)


def test_a_non_utf8_import_csv_stores_nothing(tmp_path: Path) -> None:
    store = tmp_path / "s.db"
    table = tmp_path / "excel.csv"
    table.write_bytes("engine,setting,concurrency,aggregate_tok_s\nsglang,caf\xe9,1,10\n".encode("cp1252"))
    done = cli("import", str(table), "--store", str(store), cwd=tmp_path)
    assert_one_config_error(
        done, f"import: path = '{table}': not UTF-8 text (byte 0xe9 at offset 53, line 2); fix: save it as UTF-8"
    )
    assert_nothing_started(tmp_path, store)


# -- output paths that cannot become a file --------------------------------------------------------
@pytest.fixture(scope="module")
def sim_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A small stored run of the virtual simulator (3 settings x C = 1, 4; seconds), for report/schedule."""
    work = tmp_path_factory.mktemp("sim-run")
    store = work / "s.db"
    config = {
        "engine": {"name": "sim", "min_requests": 8},
        "concurrency": [1, 4],
        "repeats": 1,
        "workload": {"max_tokens": 64, "ignore_eos": True},
        "settings": [
            {"name": "no-spec"},
            {"name": "steps1", "algorithm": "EAGLE3", "num_steps": 1},
            {"name": "steps2", "algorithm": "EAGLE3", "num_steps": 2},
        ],
        "store": str(store),
    }
    done = cli("tune", "--config", str(write_config(work / "c.yaml", config)), "--quiet", cwd=work)
    assert done.returncode == 0, done.stderr
    return store, latest_run(store)


def _output_command(kind: str, run_id: str, store: Path, target: Path) -> list[str]:
    commands = {
        "report-html": ["report", run_id, "-f", "html"],
        "report-json": ["report", run_id, "-f", "json"],
        "report-terminal": ["report", run_id],
        "compare-html": ["compare", run_id, run_id, "-f", "html"],
        "schedule-sglang": ["schedule", run_id, "--engine", "sglang"],
    }
    return [*commands[kind], "--store", str(store), "-o", str(target)]


OUTPUT_KINDS = ["report-html", "report-json", "report-terminal", "compare-html", "schedule-sglang"]


def _listing(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


@pytest.mark.parametrize("kind", OUTPUT_KINDS)
def test_output_to_a_directory_writes_nothing_and_leaves_no_tmp(
    tmp_path: Path, sim_run: tuple[Path, str], kind: str
) -> None:
    store, run_id = sim_run
    target = tmp_path / "out"
    target.mkdir()
    stored_before = _listing(store.parent)
    done = cli(*_output_command(kind, run_id, store, target), cwd=tmp_path)
    assert_one_config_error(done, f"-o = '{target}': is a directory; fix: give a file name, e.g. {target}/")
    assert _listing(tmp_path) == ["out"]  # no out.tmp beside it, nothing inside
    assert [p for p in _listing(store.parent) if not p.startswith("s.db")] == [
        p for p in stored_before if not p.startswith("s.db")
    ]  # nor an HTML page beside the store


@pytest.mark.parametrize("kind", OUTPUT_KINDS)
def test_output_in_a_missing_directory_writes_nothing(tmp_path: Path, sim_run: tuple[Path, str], kind: str) -> None:
    store, run_id = sim_run
    target = tmp_path / "missing" / "dir" / "x.html"
    done = cli(*_output_command(kind, run_id, store, target), cwd=tmp_path)
    assert_one_config_error(
        done, f"-o = '{target}': directory {target.parent} does not exist; fix: create it or choose another path"
    )
    assert _listing(tmp_path) == []


# -- extra_args that would move the server off loopback -------------------------------------------
@pytest.mark.parametrize(
    ("engine", "settings", "where", "arg"),
    [
        (
            {"name": "sim", "face": "http", "time_scale": 4.0},
            [{"name": "no-spec", "extra_args": ["--host", "0.0.0.0"]}],
            "settings[no-spec]",
            "--host",
        ),
        (
            {"name": "sim", "face": "http", "time_scale": 4.0},
            [{"name": "no-spec", "extra_args": ["--allow-remote"]}],
            "settings[no-spec]",
            "--allow-remote",
        ),
        (
            {"name": "sglang", "model_path": "some/model", "extra_args": ["--port", "30000"]},
            [{"name": "baseline"}],
            "engine",
            "--port",
        ),
        (
            {"name": "llamacpp"},
            [{"name": "baseline", "extra_args": ["--host=0.0.0.0"]}],
            "settings[baseline]",
            "--host=0.0.0.0",
        ),
        ({"name": "llamacpp", "extra_args": ["--port=8080"]}, [{"name": "baseline"}], "engine", "--port=8080"),
    ],
)
def test_extra_args_setting_the_listening_address_are_refused_before_launch(
    tmp_path: Path, engine: dict[str, Any], settings: list[dict[str, Any]], where: str, arg: str
) -> None:
    store = tmp_path / "s.db"
    config = write_config(tmp_path / "c.yaml", sim_config(store, settings=settings, engine=engine))
    done = cli("tune", "--config", str(config), cwd=tmp_path)
    assert_one_config_error(
        done,
        f"{where}.extra_args: {arg}: specfrontier launches every server on 127.0.0.1 and a free port of its own; "
        f"fix: remove {arg}",
    )
    assert_nothing_started(tmp_path, store)


# -- bench loads above tune's limits ---------------------------------------------------------------
@pytest.mark.parametrize(
    ("options", "message"),
    [
        (["--concurrency", "1,100000"], "--concurrency = 100000: more than 4096 clients"),
        (["--rate", "100001", "--requests", "10"], "--rate = 100001: more than 100000 req/s"),
        (["--rate", "1", "--requests", "10", "--max-in-flight", "5000"], "--max-in-flight = 5000: more than 4096"),
        (["--concurrency", "1", "--client-workers", "1000"], "--client-workers = 1000: more than 256 processes"),
    ],
)
def test_bench_refuses_loads_tune_refuses_before_any_traffic(tmp_path: Path, options: list[str], message: str) -> None:
    store = tmp_path / "s.db"
    url = f"http://127.0.0.1:{closed_port()}"  # a probe would fail with EngineError, not this ConfigError
    done = cli("bench", "--url", url, *options, "--store", str(store), cwd=tmp_path)
    assert_one_config_error(done, message, "(tune's limit too); fix: pass")
    assert_nothing_started(tmp_path, store)


# -- speculative settings the engine would refuse ---------------------------------------------------
@pytest.mark.parametrize(
    ("settings", "space", "parts"),
    [
        (
            [{"name": "b"}, {"name": "t", "algorithm": "EAGLE3", "num_steps": 3, "eagle_topk": 4,
                             "num_draft_tokens": 38}],
            None,
            ["settings[t]: num_draft_tokens = 38 > eagle_topk + (num_steps - 1) * eagle_topk^2 + 1 = 37",
             "fix: set num_draft_tokens <= 37"],
        ),
        (
            [{"name": "b"}, {"name": "m", "algorithm": "MEDUSA", "num_steps": 2}],
            None,
            ["settings[m]: algorithm = 'MEDUSA'", "fix: use one of EAGLE, EAGLE3"],
        ),
        (
            None,
            {"algorithm": "EAGLE3", "num_steps": 1, "eagle_topk": 2, "num_draft_tokens": [8, 16]},
            ["space: every one of the 2 combinations is refused by the engine", "fix: widen the lists"],
        ),
    ],
)  # fmt: skip
def test_a_setting_the_engine_would_refuse_is_refused_before_launch(
    tmp_path: Path, settings: list[dict[str, Any]] | None, space: dict[str, Any] | None, parts: list[str]
) -> None:
    """SGLang's draft-tree bound and algorithm list (docs/config.md), listed or from a `space:`."""
    store = tmp_path / "s.db"
    data = sim_config(store, settings=settings or [{"name": "b"}])
    if space is not None:
        data.pop("settings")
        data["space"] = space
    config = write_config(tmp_path / "c.yaml", data)
    assert_one_config_error(cli("tune", "--config", str(config), cwd=tmp_path), *parts)
    assert_nothing_started(tmp_path, store)


# -- the address of the printed commands -----------------------------------------------------------
@pytest.mark.parametrize(
    ("deploy", "message"),
    [
        ({"port": 0}, "deploy.port = 0: Input should be greater than or equal to 1"),
        ({"port": 70000}, "deploy.port = 70000: Input should be less than or equal to 65535"),
        (
            {"host": "0.0.0.0; rm -rf ~"},
            "deploy.host = '0.0.0.0; rm -rf ~': not a host name or IP address; fix: use one such as 0.0.0.0",
        ),
        ({"host": "--port"}, "deploy.host = '--port': not a host name or IP address"),
    ],
)
def test_a_bad_deploy_address_is_refused_before_launch(tmp_path: Path, deploy: dict[str, Any], message: str) -> None:
    """`deploy:` goes into every printed command: a value no server takes, or one a shell would read as more
    than a host, is refused with the field and the fix before anything starts."""
    store = tmp_path / "s.db"
    config = write_config(tmp_path / "c.yaml", sim_config(store, deploy=deploy))
    assert_one_config_error(cli("tune", "--config", str(config), cwd=tmp_path), message)


# -- drift control and the sequential rule -----------------------------------------------------------
@pytest.mark.parametrize(
    ("overrides", "parts"),
    [
        ({"repeats": 2, "min_repeats": 3}, ["min_repeats = 3: above repeats = 2; fix: lower min_repeats"]),
        ({"drift_control": "off", "min_repeats": 2}, ["drift_control is 'off'; fix: set drift_control"]),
        ({"drift_control": "always"}, ["drift_control = 'always'", "fix: use one of the allowed values"]),
        (
            {"search": {"extend_depth": "trees"}},
            ["search.extend_depth = 'trees'", "fix: use one of the allowed values"],
        ),
        (
            {"drift_control": "interleave", "search": {"strategy": "adaptive"}},
            ["drift_control = 'interleave': search.strategy = 'adaptive'", "fix: use drift_control: auto or off"],
        ),
        ({"cell_lifetimes": 1}, ["cell_lifetimes = 1", "fix: use a larger value"]),
        (  # auto interleaves where a relaunch is cheap; vLLM's costs minutes: min_repeats has nothing to stop
            {"min_repeats": 2, "engine": {"name": "vllm", "model": "m"}, "settings": [{"name": "baseline"}]},
            ["min_repeats = 2: the sequential rule needs settings measured repeat by repeat", "relaunch is not cheap"],
        ),
    ],
    ids=[
        "above-repeats",
        "with-drift-off",
        "unknown-mode",
        "unknown-extend-depth",
        "interleave-adaptive",
        "lifetimes-small",
        "no-interleave",
    ],
)
def test_drift_control_and_min_repeats_are_checked_before_launch(
    tmp_path: Path, overrides: dict[str, Any], parts: list[str]
) -> None:
    store = tmp_path / "s.db"
    config = write_config(tmp_path / "c.yaml", sim_config(store, **overrides))
    done = cli("tune", "--config", str(config), cwd=tmp_path)
    assert_one_config_error(done, *parts)
    assert_nothing_started(tmp_path, store)
