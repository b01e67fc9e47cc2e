"""The recommended command of a run on the simulator's HTTP face, pasted in a shell as printed, starts a
face serving the measured setting on the configured port (issue 30: it carried the run's own --port)."""

from __future__ import annotations

import json
import shlex
import urllib.request
from pathlib import Path

import pytest

from builders import SimFace, free_port, start_printed_command, stop_group
from specfrontier.analysis import load_run
from specfrontier.analysis.deploy import deploy_text
from specfrontier.report.tables import recommendation_lines

pytestmark = pytest.mark.slow


async def test_printed_command_starts_the_face_with_the_measured_setting_on_the_configured_port(
    tmp_path: Path, sim_face: SimFace
) -> None:
    port = free_port()
    config = {
        "engine": {"name": "sim", "face": "http", "time_scale": 4.0, "startup_timeout_s": 20},
        "workload": {"max_tokens": 64, "ignore_eos": True},
        "concurrency": [1],
        "repeats": 1,
        "rounds_per_cell": 3,
        "settings": [{"name": "no-spec"}, {"name": "steps3", "algorithm": "EAGLE3", "num_steps": 3}],
        "deploy": {"port": port},
        "store": str(tmp_path / "s.db"),
    }
    store, run_id = await sim_face.sweep(config)
    data = load_run(store, run_id)
    launched = data.setting("steps3").command
    assert launched is not None
    run_port = launched[launched.index("--port") + 1]

    command, note = deploy_text(data, "steps3")
    argv = shlex.split(command)
    assert argv[argv.index("--port") + 1] == str(port) and run_port not in argv
    assert "--host" not in argv  # no host configured: the engine's default (the face's: 127.0.0.1)
    assert f"--port {run_port}" in note and "--host 127.0.0.1" in note
    printed = {
        name: (cmd, n) for head, cmd, n in recommendation_lines(data) for name in [head.split(": ")[1].split(" (")[0]]
    }
    assert all(printed[name] == deploy_text(data, name) for name in printed)

    server = start_printed_command(command, f"http://127.0.0.1:{port}/health", timeout_s=30)
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/server_info", timeout=10) as resp:
            info = json.loads(resp.read())
    finally:
        stop_group(server)
    assert (info["speculative_algorithm"], info["speculative_num_steps"], info["port"]) == ("EAGLE3", 3, port)
    assert info["time_scale"] == 4.0  # the simulated deployment as measured
