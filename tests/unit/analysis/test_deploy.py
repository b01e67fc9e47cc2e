"""`analysis.deploy`: the deployable command drawn from a stored run, at the config's `deploy:` address, by
the engine's own rule, and what it does when the stored options no longer fit the engine."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

from builders import StoredRun
from specfrontier.analysis.deploy import deploy_command

LAUNCHED = ("/opt/llama-server", "--host", "127.0.0.1", "--port", "36729", "-m", "m.gguf", "--metrics", "-np", "4")


def _run(tmp_path: Path, config: dict[str, Any]) -> Any:
    run = StoredRun(tmp_path / "s.db", config=config).setting("baseline", status="done", command=LAUNCHED)
    data = run.data()
    run.close()
    return data


def test_the_configured_address_replaces_the_runs_own_and_the_engine_rule_drops_its_flags(tmp_path: Path) -> None:
    found = deploy_command(_run(tmp_path, {"engine": {}, "deploy": {"host": "0.0.0.0", "port": 9000}}), "baseline")
    assert found is not None
    assert shlex.split(found.text()) == ["/opt/llama-server", "-m", "m.gguf", "-np", "4", "--host", "0.0.0.0",
                                         "--port", "9000"]  # fmt: skip
    assert found.measuring_only[0].startswith("--host 127.0.0.1 --port 36729 (the run's own address")
    assert found.measuring_only[1] == "--metrics (the run read its counters there)"


def test_options_that_no_longer_parse_still_lose_the_runs_address_and_say_the_rule_was_not_applied(
    tmp_path: Path,
) -> None:
    found = deploy_command(_run(tmp_path, {"engine": {"threads": "many"}}), "baseline")
    assert found is not None and "--port" not in found.argv and "--metrics" in found.argv
    assert "the engine's own rule not applied" in found.note()
