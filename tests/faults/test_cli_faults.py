"""Fault matrix, what the CLI promises around a fault (issue 29, cases 4, 7, 8, 9 and 10):
- timeouts are finite and checked (`request_timeout_s`, `engine.startup_timeout_s`, `bench --request-timeout`),
  and bench gives up on a server that answers 200 and then sends nothing;
- a bench run cut short by its server says what completes it (bench again), never `tune --resume`, and
  its setting is not left `running`;
- every printed command can be pasted as it is (a store path with spaces, `--store` named);
- `tune --resume RUN -c FILE` applies a changed `extra_args` (recorded and shown) and refuses a change
  of what was measured with one line naming the field;
- a start failure quotes the log's cause; a relaunch after a taken port says why; bench on a server
  whose streams carry no `usage` counts tokens from chunks instead of failing every request.
Each case runs the real CLI against the simulator's HTTP face or a small stub server (real processes,
real HTTP), except the port case, which must force the port and so runs the sweep in-process.
"""

from __future__ import annotations

import io
import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from tests.faults.conftest import (
    MatrixEntry,
    cli,
    count_rows,
    latest_run,
    line_starting,
    run_status,
    sim_config,
    tune,
    write_config,
)
from tests.faults.test_server_faults import _Impostor  # the program that holds the port first

from builders import cli_process
from specfrontier.config.load import parse_config
from specfrontier.process.launch import free_port
from specfrontier.runs.sweep import open_sweep
from specfrontier.store import Store

pytestmark = pytest.mark.slow


def _paste(command: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """Run a command the tool printed, split as a POSIX shell would ("specfrontier" is this CLI)."""
    argv = shlex.split(command)
    assert argv[0] == "specfrontier", command
    return cli_process(*argv[1:], cwd=cwd, timeout=240)


def _wait_port(port: int, timeout_s: float = 20) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise AssertionError(f"nothing listens on port {port}")


_STUB = """
import asyncio, json, sys
from aiohttp import web

MODE, PORT = sys.argv[1], int(sys.argv[2])

async def models(request):
    return web.json_response({"data": [{"id": "stub"}]})

SEEN = [0]

async def completions(request):
    await request.read()
    SEEN[0] += 1
    if MODE == "half-fail" and SEEN[0] % 2 == 0:  # every other request: the context is exceeded
        return web.json_response({"error": {"message": "prompt too long", "code": 400}}, status=400)
    resp = web.StreamResponse(status=200, headers={"Content-Type": "text/event-stream"})
    await resp.prepare(request)
    if MODE == "stall":  # 200, then nothing, for good
        await asyncio.sleep(3600)
    # a request lasts ~0.15 s (a cell of whole passes has a steady state); 'slow': 0.6 s, with usage
    delay, words = (0.1, ["one "] * 5 + ["six"]) if MODE == "slow" else (0.05, ["one ", "two ", "three"])
    for i, word in enumerate(words):
        await asyncio.sleep(delay)
        finish = "stop" if i == len(words) - 1 else None
        chunk = {"choices": [{"index": 0, "delta": {"content": word}, "finish_reason": finish}]}
        await resp.write(f"data: {json.dumps(chunk)}\\n\\n".encode())
    if MODE == "slow":
        usage = {"prompt_tokens": 4, "completion_tokens": len(words), "total_tokens": 4 + len(words)}
        await resp.write(f"data: {json.dumps({'choices': [], 'usage': usage})}\\n\\n".encode())
    await resp.write(b"data: [DONE]\\n\\n")  # 'no-usage': no usage chunk, whatever stream_options asked
    return resp

app = web.Application()
app.router.add_get("/v1/models", models)
app.router.add_post("/v1/chat/completions", completions)
app.router.add_post("/v1/completions", completions)
web.run_app(app, host="127.0.0.1", port=PORT, print=None, handle_signals=True)
"""


@pytest.fixture
def stub_server(tmp_path: Path) -> Iterator[Any]:
    """Start the stub OpenAI server in a mode ('stall', 'no-usage', 'half-fail' or 'slow'); stopped by process
    group."""
    started: list[subprocess.Popen[bytes]] = []
    script = tmp_path / "stub_server.py"
    script.write_text(_STUB)

    def start(mode: str) -> str:
        port = free_port()
        proc = subprocess.Popen(
            [sys.executable, str(script), mode, str(port)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        started.append(proc)
        _wait_port(port)
        return f"http://127.0.0.1:{port}"

    yield start
    for proc in started:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)


# -- case 4: timeouts are finite and checked ---------------------------------------------------------


@pytest.mark.parametrize(
    ("where", "value", "expected"),
    [
        ("request_timeout_s", float("inf"), "request_timeout_s = inf: Input should be a finite number"),
        ("engine.startup_timeout_s", float("inf"), "engine.startup_timeout_s = inf: Input should be a finite number"),
        ("request_timeout_s", 1e9, "request_timeout_s = 1000000000.0: Input should be less than or equal to 7200"),
    ],
    ids=["request-inf", "startup-inf", "request-huge"],
)
def test_an_unbounded_timeout_is_refused_before_any_server_starts(
    tmp_path: Path, where: str, value: float, expected: str
) -> None:
    store = tmp_path / "s.db"
    data = sim_config(store, [{"name": "no-spec", "extra_args": ["--fail-at-start"]}])
    if where.startswith("engine."):
        data["engine"][where.removeprefix("engine.")] = value
    else:
        data[where] = value
    done = tune(tmp_path, data)
    assert done.returncode == 2, done.stderr
    line = line_starting(done.stderr, "ConfigError:")
    assert expected in line and "fix: use " in line, line
    assert not store.exists()


def test_bench_gives_up_on_a_server_that_answers_200_then_nothing(
    tmp_path: Path, stub_server: Any, matrix: MatrixEntry
) -> None:
    url = stub_server("stall")
    store = tmp_path / "b.db"
    started = time.monotonic()
    done = cli("bench", "--url", url, "--concurrency", "1", "--repeats", "1", "--request-timeout", "2",
               "--store", str(store), "--quiet", cwd=tmp_path, timeout=120)  # fmt: skip
    elapsed = time.monotonic() - started
    assert done.returncode == 1, done.stderr
    line = line_starting(done.stderr, "EngineResponseError:")
    assert "every request of the warmup failed" in line and "timeout after 2.0 s" in line
    assert elapsed < 60  # 2 s per request, not the default 300 s
    assert run_status(store, latest_run(store)) == "failed"
    matrix.rows(after=count_rows(store))


@pytest.mark.parametrize("value", ["inf", "0", "99999"])
def test_bench_refuses_an_unbounded_request_timeout_before_any_traffic(tmp_path: Path, value: str) -> None:
    done = cli("bench", "--url", f"http://127.0.0.1:{free_port()}", "--request-timeout", value,
               "--store", str(tmp_path / "b.db"), cwd=tmp_path)  # fmt: skip
    assert done.returncode == 2, done.stderr
    line = line_starting(done.stderr, "ConfigError:")
    assert line.startswith(f"ConfigError: --request-timeout = {value}: "), line
    assert "finite number of seconds above 0 and at most 7200" in line
    assert not (tmp_path / "b.db").exists()


# -- case 7: a bench run cut short by its server -------------------------------------------------------


def test_bench_cut_short_by_its_server_says_bench_again_and_marks_its_setting(
    tmp_path: Path, matrix: MatrixEntry
) -> None:
    """The simulator's face exits after 5 completions: the warmup (1) and the first cell (4) are
    answered, the second cell finds nobody."""
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "specfrontier.sim.serve", "--port", str(port), "--time-scale", "4",
         "--crash-after", "5"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    store = tmp_path / "bench runs" / "b.db"
    try:
        _wait_port(port)
        done = cli("bench", "--url", f"http://127.0.0.1:{port}", "--concurrency", "1", "--repeats", "2",
                   "--rounds", "1", "--max-tokens", "16", "--store", str(store), "--quiet", cwd=tmp_path)  # fmt: skip
    finally:
        os.killpg(server.pid, signal.SIGKILL)
        server.wait(timeout=10)
    assert done.returncode == 3, done.stderr
    line = line_starting(done.stderr, "INCOMPLETE:")
    assert "tune --resume" not in done.stderr + done.stdout
    run_id = latest_run(store)
    assert run_status(store, run_id) == "incomplete"
    (setting,) = Store(store).settings(run_id)
    assert setting.status == "failed" and "every request of" in (setting.error or "")
    report = cli("report", run_id, "--store", str(store), cwd=tmp_path)
    assert report.returncode == 0, report.stderr
    assert "tune --resume" not in report.stdout
    hint = report.stdout.split("measure it again with: ", 1)[1].split("\n", 1)[0]
    assert shlex.split(hint)[:4] == ["specfrontier", "bench", "--url", f"http://127.0.0.1:{port}"]
    assert shlex.split(hint)[-2:] == ["--store", str(store)]  # quoted: the folder has a space
    assert shlex.split(line.split("fix: bench does not resume: once the server is fixed, run ", 1)[1]) == shlex.split(
        hint
    )
    assert count_rows(store).cells == 1
    matrix.rows(after=count_rows(store))


# -- cases 8 and 9: pasted commands, and a resume with a changed config ---------------------------------


def _crashing(store: Path) -> dict[str, Any]:
    """steps2's server exits after its first cell (the cold-start request, 2 of warmup, 4 of the cell), on
    every launch: the cause sits in its stored extra_args."""
    settings = [{"name": "no-spec"}, {"name": "steps2", "algorithm": "EAGLE3", "num_steps": 2,
                                      "extra_args": ["--crash-after", "7"]}]  # fmt: skip
    return sim_config(store, settings)


@pytest.fixture
def crashed_run(tmp_path: Path) -> tuple[Path, Path, str, subprocess.CompletedProcess[str]]:
    """A run left incomplete by steps2's crash, in a store whose path has spaces."""
    store = tmp_path / "my runs" / "spec frontier.db"
    done = tune(tmp_path, _crashing(store))
    assert done.returncode == 3, done.stderr
    return tmp_path, store, latest_run(store), done


def test_printed_commands_paste_as_they_are(
    crashed_run: tuple[Path, Path, str, subprocess.CompletedProcess[str]], matrix: MatrixEntry
) -> None:
    work, store, run_id, done = crashed_run
    line = line_starting(done.stderr, "INCOMPLETE:")
    resume = line.split("fix: remove the cause, then ", 1)[1]
    assert shlex.split(resume)[1:] == ["tune", "--resume", run_id, "--store", str(store)]
    report_again = done.stdout.split("again with: ", 1)[1].split("\n", 1)[0]
    pasted = _paste(report_again, work)
    assert pasted.returncode == 0, pasted.stderr
    hint = pasted.stdout.split("complete it with: ", 1)[1].split("\n", 1)[0]
    assert shlex.split(hint)[1:] == ["tune", "--resume", run_id, "--store", str(store)]
    resumed = _paste(hint + " --quiet", work)  # the cause is still there: the same crash, but the command runs
    assert resumed.returncode == 3, resumed.stderr
    assert "no such" not in resumed.stderr and "Usage error" not in resumed.stderr
    matrix.rows(after=count_rows(store))


def test_resume_with_a_changed_extra_args_applies_records_and_shows_it(
    crashed_run: tuple[Path, Path, str, subprocess.CompletedProcess[str]], matrix: MatrixEntry
) -> None:
    work, store, run_id, _ = crashed_run
    kept = count_rows(store)
    fixed = _crashing(store)
    fixed["settings"][1]["extra_args"] = []
    config = write_config(work / "fixed.yaml", fixed)
    resumed = cli("tune", "--resume", run_id, "--store", str(store), "-c", str(config), "--quiet", cwd=work)
    assert resumed.returncode == 0, resumed.stderr
    changed = line_starting(resumed.stderr, f"resume {run_id} with")
    assert "changed settings[steps2].extra_args: ['--crash-after', '7'] -> []" in changed
    assert run_status(store, run_id) == "done"
    assert count_rows(store).cells == 8 and kept.cells < 8
    run = Store(store).run(run_id)
    assert run.config["settings"][1]["extra_args"] == []
    changes = run.environment["resume_changes"][0]["changes"]
    assert changes == ["settings[steps2].extra_args: ['--crash-after', '7'] -> []"]
    report = cli("report", run_id, "--store", str(store), cwd=work)
    assert "config changed on resume at " in report.stdout and "settings[steps2].extra_args" in report.stdout
    matrix.rows(kept=kept, after=count_rows(store))


@pytest.mark.parametrize(
    ("change", "field"),
    [({"concurrency": [1, 4]}, "concurrency"), ({"repeats": 3}, "repeats")],
    ids=["levels", "repeats"],
)
def test_resume_refuses_a_config_that_changes_what_was_measured(
    crashed_run: tuple[Path, Path, str, subprocess.CompletedProcess[str]], change: dict[str, Any], field: str
) -> None:
    work, store, run_id, _ = crashed_run
    kept = count_rows(store)
    config = write_config(work / "other.yaml", {**_crashing(store), **change})
    resumed = cli("tune", "--resume", run_id, "--store", str(store), "-c", str(config), "--quiet", cwd=work)
    assert resumed.returncode == 2, resumed.stderr
    line = line_starting(resumed.stderr, "ConfigError:")
    assert f"--config with --resume {run_id}: {field} = " in line and "fix: start a new run" in line
    assert count_rows(store) == kept and run_status(store, run_id) == "incomplete"


# -- case 10: start failures, a relaunch, streams without usage ---------------------------------------


def test_a_start_failure_quotes_the_cause_from_its_log(tmp_path: Path, matrix: MatrixEntry) -> None:
    store = tmp_path / "s.db"
    settings = [
        {"name": "no-spec", "extra_args": ["--fail-at-start"]},
        {"name": "oom", "algorithm": "EAGLE3", "num_steps": 1, "max_running_requests": 40,
         "extra_args": ["--oom-above", "10"]},
    ]  # fmt: skip
    done = tune(tmp_path, sim_config(store, settings))
    assert done.returncode == 1, done.stderr
    line = line_starting(done.stderr, "FAILED:")
    assert (
        "no-spec: server exited with status 1 before it was ready; its log says: RuntimeError: simulated "
        "start-up failure (--fail-at-start)" in line
    )
    oom = "oom: server exited with status 1 before it was ready; its log says: torch.OutOfMemoryError: CUDA out"
    assert oom in line
    matrix.rows(after=count_rows(store))


async def test_a_relaunch_after_a_taken_port_says_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, matrix: MatrixEntry
) -> None:
    import specfrontier.process.launch as server_module
    import specfrontier.runs.sweep as sweep_module
    from specfrontier.cli.progress import SweepProgress

    impostor = _Impostor()
    port = await impostor.start()
    handed: list[int] = []

    def free_port_once_taken() -> int:
        handed.append(port if not handed else server_module.free_port())
        return handed[-1]

    monkeypatch.setattr(sweep_module, "free_port", free_port_once_taken)
    settings = [{"name": "no-spec", "extra_args": ["--bind-delay", "1.5"]}]
    data = sim_config(tmp_path / "s.db", settings, drift_control="off")  # one launch per setting: one relaunch
    shown = io.StringIO()
    try:
        sweep, run_id = open_sweep(parse_config(data), None, resume=None)
        sweep.events = SweepProgress(Console(file=shown, width=300), "lines", 4).events()
        outcome = await sweep.run(run_id)
    finally:
        await impostor.stop()
    assert outcome.status == "done"
    lines = shown.getvalue().splitlines()
    launching = [i for i, ln in enumerate(lines) if ": launching " in ln]
    assert len(launching) == 2, lines
    why = lines[launching[0] + 1 : launching[1]]
    assert len(why) == 1 and f"relaunch: port 127.0.0.1:{port} answered, but it is held by pid {os.getpid()}" in why[0]
    assert "launching again on a new port" in why[0]
    matrix.rows(after=count_rows(tmp_path / "s.db"))


def test_bench_on_streams_without_usage_counts_chunks_and_says_so(
    tmp_path: Path, stub_server: Any, matrix: MatrixEntry
) -> None:
    url = stub_server("no-usage")
    store = tmp_path / "b.db"
    # 3 s per cell: a steady state (else no cell is evidence, and bench exits 1)
    done = cli("bench", "--url", url, "--concurrency", "1,2", "--repeats", "1", "--cell-duration", "3",
               "--store", str(store), "--quiet", cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr
    run_id = latest_run(store)
    assert run_status(store, run_id) == "done"
    rows = count_rows(store)
    assert rows.cells == 2
    cells = Store(store).cells(run_id)
    records = [r for c in cells for r in c.requests]
    assert records and all(r.ok and r.completion_tokens == 3 for r in records)
    assert "sends no `usage` in its streams" in done.stdout and "stream_options.include_usage" in done.stdout
    matrix.rows(after=rows)


def test_bench_where_half_the_requests_failed_is_no_evidence_and_exits_1(
    tmp_path: Path, stub_server: Any, matrix: MatrixEntry
) -> None:
    """bench applies tune's evidence rule: cells stored and shown, none recommended, exit 1 with the line."""
    url = stub_server("half-fail")
    store = tmp_path / "b.db"
    done = cli("bench", "--url", url, "--concurrency", "1", "--repeats", "1", "--store", str(store),
               "--quiet", cwd=tmp_path)  # fmt: skip
    assert done.returncode == 1, done.stderr
    line = line_starting(done.stderr, "NO EVIDENCE:")
    assert "all 1 stored cell(s)" in line and "requests failed (> 1%)" in line
    again = shlex.split(line.split("then run ", 1)[1])
    assert again[:4] == ["specfrontier", "bench", "--url", url]
    rows = count_rows(store)
    assert rows.cells == 1  # stored and shown, not hidden
    assert "Evidence per cell" in done.stdout
    matrix.rows(after=rows)


def test_bench_as_the_readme_shows_it_answers_every_level_of_a_server_whose_requests_take_0_6_s(
    tmp_path: Path, stub_server: Any, matrix: MatrixEntry
) -> None:
    """Issue 39, item 7: the README's `bench --url URL --concurrency 1,16,64` against a server whose requests
    take 0.6 s. Before, a cell sent 2 rounds x C requests: C = 16 and 64 had no steady state, not evidence.
    Now bench sizes each closed-loop cell from the measured request lifetime as tune does: every level is
    evidence, exit 0, and the report says how long each cell ran and why."""
    url = stub_server("slow")
    store = tmp_path / "b.db"
    done = cli("bench", "--url", url, "--concurrency", "1,16,64", "--store", str(store), "--quiet",
               cwd=tmp_path, timeout=300)  # fmt: skip
    run_id = latest_run(store)
    report = json.loads(cli("report", run_id, "--store", str(store), "--format", "json", cwd=tmp_path).stdout)
    cells = {c["concurrency"]: c for c in report["cells"]}
    assert sorted(cells) == [1, 16, 64]
    verdicts = {c: cell["verdict"] for c, cell in cells.items()}
    assert not any("steady" in v for v in verdicts.values()), verdicts  # before: C = 16 and 64 had none
    lagged = [c for c, v in verdicts.items() if "client could not keep up" in v]
    if not lagged:  # the done criterion: every level is evidence, exit 0
        assert done.returncode == 0, done.stderr + done.stdout
    for c, cell in cells.items():
        # The sizing's part holds whatever the host: a steady state at every level. On a host so busy that
        # the client itself could not keep up (lag p99 over 2 % of the 0.6 s lifetime), the evidence rule
        # refuses those cells as it should (issue 39, item 6): they say so, and nothing else.
        assert cell["evidence"] or (c in lagged and verdicts[c].startswith("not evidence: client could not keep up"))
        assert cell["repeats"] == 3 and len(cell["load"]) == 3
        sized = cell["load"][-1]
        assert "request lifetimes of 0.6" in sized["sized_by"], sized  # its level's own lifetime, ~0.6 s
        assert sized["send_s"] >= (2 if c == 1 else 4) * 0.6
        # The deadline is read just before the first send is stamped and checked just after the last end is
        # stamped, so the window may fall short of send_s by those event-loop turns (0.18 ms in a CI run), never
        # by a request: 10 ms is far below the 0.6 s lifetime.
        assert sized["window_s"] >= sized["send_s"] - 0.010, sized
    assert "How long each cell ran" in done.stdout and "8 request lifetimes of 0.6" in done.stdout
    matrix.rows(after=count_rows(store))
