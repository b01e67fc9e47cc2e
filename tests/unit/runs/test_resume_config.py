"""`tune --resume RUN -c FILE`: which differences from the stored config a resume accepts (launch
arguments, timeouts) and which it refuses with one line naming the field (runs.resume_config)."""

from __future__ import annotations

from typing import Any

import pytest

from specfrontier.config.load import parse_config
from specfrontier.errors import ConfigError
from specfrontier.runs.resume_config import config_changes


def _config(**overrides: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "engine": {"name": "sim", "face": "http", "startup_timeout_s": 30},
        "concurrency": [1, 2],
        "repeats": 2,
        "settings": [{"name": "no-spec"}, {"name": "steps2", "algorithm": "EAGLE3", "num_steps": 2}],
        "store": "a.db",
    }
    data.update(overrides)
    return data


def _changes(**overrides: Any) -> list[str]:
    return config_changes(parse_config(_config()), parse_config(_config(**overrides)), "--config", "R")


def test_the_same_config_in_another_store_changes_nothing() -> None:
    assert _changes(store="elsewhere.db") == []


def test_launch_arguments_and_timeouts_may_change_and_each_is_one_line() -> None:
    settings = [{"name": "no-spec"}, {"name": "steps2", "algorithm": "EAGLE3", "num_steps": 2, "extra_args": ["-x"]}]
    engine = {"name": "sim", "face": "http", "startup_timeout_s": 90}
    lines = _changes(settings=settings, engine=engine, request_timeout_s=60.0, max_consecutive_timeouts=5)
    assert sorted(lines) == [
        "engine.startup_timeout_s: 30.0 -> 90.0",
        "max_consecutive_timeouts: 3 -> 5",
        "request_timeout_s: 300.0 -> 60.0",
        "settings[steps2].extra_args: [] -> ['-x']",
    ]


@pytest.mark.parametrize(
    ("overrides", "named"),
    [
        ({"concurrency": [1, 4]}, "concurrency = [1, 4] but the run was measured with [1, 2]"),
        ({"repeats": 3}, "repeats = 3 but the run was measured with 2"),
        (
            {"settings": [{"name": "no-spec"}, {"name": "steps3", "algorithm": "EAGLE3", "num_steps": 3}]},
            "settings = ['no-spec', 'steps3'] but the run was measured with ['no-spec', 'steps2']",
        ),
        (
            {"settings": [{"name": "no-spec"}, {"name": "steps2", "algorithm": "EAGLE3", "num_steps": 3}]},
            "settings[steps2].num_steps = 3 but the run was measured with 2",
        ),
        ({"workload": {"max_tokens": 64}}, "workload.max_tokens = 64 but the run was measured with 48"),
    ],
    ids=["levels", "repeats", "settings-list", "setting-parameter", "workload"],
)
def test_what_was_measured_may_not_change(overrides: dict[str, Any], named: str) -> None:
    with pytest.raises(ConfigError) as caught:
        _changes(**overrides)
    message = str(caught.value)
    assert message.startswith(f"--config with --resume R: {named}; ")
    assert message.endswith("fix: start a new run with this config (no --resume), or resume without -c")
    assert "\n" not in message


def test_a_stored_config_with_workloads_reads_back_and_resumes_unchanged() -> None:
    """The stored config is dumped whole (its default `workload` beside the `workloads`); reading it back,
    as `--resume` and every command-line option do, must not refuse it as "both given"."""
    workloads = [{"source": "synthetic-greedy", "prompts": 4}, {"source": "gsm8k", "prompts": 4, "sampling": "t0.6"}]
    given = parse_config(_config(workloads=workloads))
    stored = parse_config(given.model_dump(mode="json"))
    assert [w.key for w in stored.workloads] == [w.key for w in given.workloads]
    assert config_changes(stored, given, "--config", "R") == []


def test_a_workload_of_its_own_beside_workloads_is_still_refused() -> None:
    data = _config(workloads=[{"source": "synthetic-greedy", "prompts": 4}], workload={"max_tokens": 64})
    with pytest.raises(ConfigError, match="workload and workloads: both given; fix: move the workload"):
        parse_config(data)
