"""The recommended command, pasted in a shell as printed, starts a llama-server that serves the setting as
measured (issue 30: the command carried the run's ephemeral --port and the tool's --host and --metrics)."""

from __future__ import annotations

import json
import shlex
import urllib.request
from pathlib import Path

import pytest

from builders import free_port, start_printed_command, stop_group
from specfrontier.analysis import load_run
from specfrontier.analysis.deploy import deploy_text
from specfrontier.config.load import parse_config
from specfrontier.report import report_json, report_markdown
from specfrontier.report.tables import recommendation_lines
from specfrontier.runs.sweep import open_sweep
from specfrontier.testing.synthetic_models import SyntheticPair

pytestmark = pytest.mark.engine


async def test_recommended_command_pasted_in_bash_starts_the_measured_server(
    llama_server: Path, pair_full_acceptance: SyntheticPair, tmp_path: Path
) -> None:
    port = free_port()
    config = {
        "engine": {"model": str(pair_full_acceptance.target), "draft_model": str(pair_full_acceptance.draft),
                   "threads": 1, "ctx_size": 2048},
        "settings": [{"name": "baseline"}, {"name": "draft-4", "spec_type": "draft-simple", "draft_n_max": 4}],
        "concurrency": [1, 2],
        "repeats": 1,
        "rounds_per_cell": 2,
        "warmup_rounds": 0,
        "workload": {"prompts": "builtin:cpu-mix", "api": "completion", "max_tokens": 32, "ignore_eos": True},
        "deploy": {"host": "127.0.0.1", "port": port},
        "store": str(tmp_path / "s.db"),
    }  # fmt: skip
    sweep, run_id = open_sweep(parse_config(config), None, resume=None)
    await sweep.run(run_id)
    data = load_run(sweep.store, run_id)
    launched = data.setting("draft-4").command
    assert launched is not None and "--metrics" in launched  # the store keeps the command as it ran
    run_port = launched[launched.index("--port") + 1]
    assert run_port != str(port)

    command, note = deploy_text(data, "draft-4")  # what any recommendation of draft-4 prints
    for _head, printed, printed_note in recommendation_lines(data):  # whichever setting won, printed this way
        name = _head.split(": ", 1)[1].split(" (", 1)[0]
        assert (printed, printed_note) == deploy_text(data, name)
        assert "--metrics" not in shlex.split(printed) and "--metrics" in printed_note
    argv = shlex.split(command)
    assert argv[0] == launched[0] and "--metrics" not in argv and run_port not in argv
    assert argv[argv.index("--port") + 1] == str(port) and argv[argv.index("--host") + 1] == "127.0.0.1"
    slots = next(flag for flag in ("--parallel", "-np") if flag in launched)
    assert argv[argv.index(slots) + 1] == launched[launched.index(slots) + 1]  # slots split the context: kept
    assert "--metrics" in note and f"--port {run_port}" in note
    assert all(f"  {printed}" in report_markdown(data).splitlines() for _h, printed, _n in recommendation_lines(data))
    rec = next(s for s in report_json(data)["settings"] if s["name"] == "draft-4")
    assert rec["deploy_command"] == command and rec["command"] == shlex.join(launched)

    server = start_printed_command(command, f"http://127.0.0.1:{port}/health", timeout_s=60)
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/props", timeout=10) as resp:
            props = json.loads(resp.read())
        assert props["total_slots"] == data.setting("draft-4").capacity  # the slots the run measured
        body = json.dumps({"prompt": "Hello", "n_predict": 8, "cache_prompt": False}).encode()
        request = urllib.request.Request(f"http://127.0.0.1:{port}/completion", data=body, method="POST")
        with urllib.request.urlopen(request, timeout=60) as resp:
            answer = json.loads(resp.read())
        assert answer["timings"].get("draft_n", 0) > 0  # it speculates with the measured draft model
    finally:
        stop_group(server)
