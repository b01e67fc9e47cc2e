"""Fault matrix, traffic profiles (issue 33): `recommend --traffic FILE` with a bad profile says what is wrong
and the fix in one line, exit 2, no traceback: an empty profile (YAML, CSV, query_range JSON), a negative
level or share, a metric that is not a running-requests gauge, levels beyond the run with no model to
predict them, and a bad --peak. Each case runs the real CLI process on a real simulated run's store."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from tests.faults.conftest import cli

from builders import run_virtual
from specfrontier.engines.sglang import SGLangSetting
from specfrontier.engines.sim import SimEngine, SimTuneConfig


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A two-setting simulated run at C = 1, 4 and 16 (virtual time, about a second)."""
    settings = (SGLangSetting(name="no-spec"), SGLangSetting(name="s4", algorithm="EAGLE3", num_steps=4, eagle_topk=1))
    config = SimTuneConfig(engine=SimEngine(), settings=settings, concurrency=(1, 4, 16), repeats=1, rounds_per_cell=8)
    store, run_id = run_virtual(config, tmp_path_factory.mktemp("traffic") / "sim.db")
    store.close()
    return store.path, run_id


def _recommend(run: tuple[Path, str], profile: Path, *more: str) -> subprocess.CompletedProcess[str]:
    store, run_id = run
    return cli("recommend", run_id, "--traffic", str(profile), "--store", str(store), *more, cwd=profile.parent)


def _one_line(done: subprocess.CompletedProcess[str], option: str = "--") -> str:
    assert "Traceback" not in done.stderr, done.stderr[:2000]
    assert done.returncode == 2, done.stderr[:2000]
    assert done.stdout == ""
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr[:2000]
    assert lines[0].startswith(f"ConfigError: {option}"), lines[0]
    assert "fix: " in lines[0]
    return lines[0]


def _matrix(name: str, values: list[list[object]]) -> str:
    series = [{"metric": {"__name__": name}, "values": values}] if values else []
    return json.dumps({"status": "success", "data": {"resultType": "matrix", "result": series}})


@pytest.mark.parametrize(
    ("file", "text", "says"),
    [
        ("empty.yaml", "", "empty profile (the file is empty)"),
        ("zero.yaml", "concurrency: {1: 0, 4: 0}\n", "empty profile (no level with time > 0)"),
        ("header.csv", "concurrency,share\n", "empty profile (a header and no rows)"),
        ("none.json", _matrix("vllm:num_requests_running", []), "empty profile (no samples in the result)"),
    ],
)
def test_an_empty_profile(run: tuple[Path, str], tmp_path: Path, file: str, text: str, says: str) -> None:
    path = tmp_path / file
    path.write_text(text)
    assert says in _one_line(_recommend(run, path))


@pytest.mark.parametrize(
    ("file", "text", "says"),
    [
        ("share.yaml", "concurrency: {1: 0.7, 4: -0.3}\n", "C = 4 has share -0.3 (negative); fix: shares of time >= 0"),
        ("level.csv", "concurrency,share\n-2,1\n", "C = -2 is negative; fix: C >= 0"),
        ("running.json", _matrix("vllm:num_requests_running", [[1.0, "2"], [2.0, "-1"]]), "C = -1 is negative"),
        ("rate.csv", "timestamp,rate_req_s\n0,1\n1,-0.5\n", "rate = -0.5 is negative"),
    ],
)
def test_a_negative_level_or_share(run: tuple[Path, str], tmp_path: Path, file: str, text: str, says: str) -> None:
    path = tmp_path / file
    path.write_text(text)
    assert says in _one_line(_recommend(run, path))


@pytest.mark.parametrize(
    ("file", "text", "says"),
    [
        ("nan.csv", "concurrency,share\n1,nan\n4,1\n", "C = 1 has share nan (not a finite number); fix: a number"),
        ("inf.csv", "concurrency,share\n1,inf\n4,1\n", "C = 1 has share inf (not a finite number); fix: a number"),
        ("level.yaml", "rate_req_s: {.nan: 1}\n", "rate = nan is not a finite number; fix: a number, rate >= 0"),
        ("running.csv", "timestamp,running\n0,inf\n1,2\n", "C = inf is not a finite number; fix: a number, C >= 0"),
        ("stamps.csv", "timestamp,running\n0,1\n1e308,2\n-1e308,2\n", "timestamps too far apart to hold"),
    ],
    ids=["nan-share", "inf-share", "nan-rate", "inf-running", "far-timestamps"],
)
def test_a_share_or_level_that_is_not_a_finite_number_is_named_so(
    run: tuple[Path, str], tmp_path: Path, file: str, text: str, says: str
) -> None:
    """Issue 39, item 8: NaN and inf shares were called "negative"; an inf level was a traceback."""
    path = tmp_path / file
    path.write_text(text)
    assert says in _one_line(_recommend(run, path))


def test_shares_too_big_to_sum_keep_their_proportions(run: tuple[Path, str], tmp_path: Path) -> None:
    """Issue 39, item 3: shares of 1e308 summed to inf, normalised to 0 % each, and the answer was the first
    setting (exit 0). Scaled before summing, they answer what shares of 1 answer."""
    answers = []
    for name, weight in (("huge.yaml", "1e308"), ("plain.yaml", "1")):
        path = tmp_path / name
        path.write_text(f"concurrency: {{1: {weight}, 4: {weight}, 16: {weight}}}\n")
        done = _recommend(run, path)
        assert done.returncode == 0, done.stderr
        lines = [ln for ln in done.stdout.splitlines() if ln.strip().startswith(("profile:", "best static", "answer:"))]
        answers.append(lines)
    assert answers[0] == answers[1]
    assert "share of time per C: 1: 33.3%, 4: 33.3%, 16: 33.3%" in answers[0][0]


@pytest.mark.parametrize(
    "text", ["concurrency: {0: 1}\n", "concurrency,share\n0,5\n", "rate_req_s: {0: 2}\n"], ids=["yaml", "csv", "rate"]
)
def test_a_profile_with_no_time_under_load_is_refused(run: tuple[Path, str], tmp_path: Path, text: str) -> None:
    """Issue 39, item 3: a profile 100 % idle (C = 0) answered "deploy" the first setting, exit 0."""
    path = tmp_path / ("idle.csv" if "," in text else "idle.yaml")
    path.write_text(text)
    line = _one_line(_recommend(run, path))
    assert "no time under load (every share is at " in line and "= 0: idle), so no setting serves anything" in line


def test_an_unknown_metric(run: tuple[Path, str], tmp_path: Path) -> None:
    path = tmp_path / "waiting.json"
    path.write_text(_matrix("vllm:num_requests_waiting", [[1.0, "3"]]))
    line = _one_line(_recommend(run, path))
    assert "metric = 'vllm:num_requests_waiting' is not a running-requests gauge" in line
    assert "fix: query one of vllm:num_requests_running, sglang:num_running_reqs" in line


def test_levels_beyond_the_run_with_no_model(run: tuple[Path, str], tmp_path: Path) -> None:
    path = tmp_path / "busy.yaml"
    path.write_text("concurrency: {4: 0.5, 64: 0.5}\n")
    line = _one_line(_recommend(run, path))
    assert "C = 64 (50.0% of the time) is beyond the run's measured levels (1-16)" in line
    assert "beyond the run's measured levels (1-16) and no model predicts outside them" in line
    assert "fix: measure up to C = 64" in line


def test_a_bad_peak(run: tuple[Path, str], tmp_path: Path) -> None:
    path = tmp_path / "ok.yaml"
    path.write_text("concurrency: {1: 1}\n")
    line = _one_line(_recommend(run, path, "--peak", "64"))
    assert line.startswith("ConfigError: --peak = '64'") and "fix: e.g. --peak 64users or --peak 12rps" in line


def test_a_run_of_several_workloads_needs_the_one_the_profile_is(tmp_path: Path) -> None:
    """A hand-made run at C = 1 with two workloads: without --workload one line names them and the command;
    with it the answer weighs that workload's cells only."""
    from builders import record_ms
    from specfrontier.store import Store

    store = Store(tmp_path / "s.db")
    run_id = store.create_run(engine="sim", config={}, environment={})
    store.add_setting(run_id, setting_id="no-spec", position=0, name="no-spec", params={}, speculative=False)
    store.update_setting(run_id, "no-spec", status="ok", command=("server",), startup_s=0.4)
    for workload, tokens in (("chat", 50), ("code", 80)):
        store.record_cell(
            run_id,
            setting_id="no-spec",
            workload=workload,
            concurrency=1,
            repeat=0,
            requests=[record_ms(0, 100, 1000, tokens)],
            counters=None,
            acceptance_source=None,
        )
    store.close()
    profile = tmp_path / "one.yaml"
    profile.write_text("concurrency: {1: 1}\n")
    line = _one_line(_recommend((tmp_path / "s.db", run_id), profile))
    assert "--workload: run" in line and "measured workloads chat, code" in line and "--workload chat`" in line
    done = _recommend((tmp_path / "s.db", run_id), profile, "--workload", "code")
    assert done.returncode == 0, done.stderr
    assert "best static setting: no-spec: 80.0 aggregate tok/s" in done.stdout


def test_an_imported_run_has_no_requests_to_weigh(tmp_path: Path) -> None:
    from specfrontier.runs.imported import load_table, store_table
    from specfrontier.store import Store

    store = Store(tmp_path / "s.db")
    run_id = store_table(store, load_table(Path(__file__).resolve().parents[1] / "data" / "seed_frontier.json"))
    store.close()
    profile = tmp_path / "one.yaml"
    profile.write_text("concurrency: {1: 1}\n")
    line = _one_line(_recommend((tmp_path / "s.db", run_id), profile), option="run")
    assert "imported figures, no stored requests to weigh" in line
