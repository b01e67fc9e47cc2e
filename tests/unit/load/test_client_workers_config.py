"""`client_workers` in the config and `--client-workers` on bench: accepted values and precise errors."""

from __future__ import annotations

import sys
from typing import Any

import pytest

from specfrontier.cli import main
from specfrontier.config.load import default_config, parse_config
from specfrontier.errors import ConfigError
from specfrontier.runs.bench import BenchOptions, parse_client_workers


def _config(**changes: Any) -> dict[str, Any]:
    data = default_config().model_dump(mode="json")
    data.update(changes)
    return data


def test_client_workers_defaults_to_auto_and_takes_a_number() -> None:
    assert default_config().client_workers == "auto"
    assert parse_config(_config(client_workers=3)).client_workers == 3
    assert parse_config(_config(client_workers="auto")).client_workers == "auto"


@pytest.mark.parametrize("bad", [0, -1, 257, 2.5, True, "many", "4"])
def test_bad_client_workers_name_the_field_and_the_fix(bad: object) -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(_config(client_workers=bad))
    message = str(info.value)
    assert f"client_workers = {bad!r}: not a worker count" in message
    assert "fix: use a whole number from 1 to 256, or 'auto'" in message


def test_bench_client_workers_option() -> None:
    assert parse_client_workers("auto") == "auto"
    assert parse_client_workers("4") == 4
    for bad in ("0", "x", "-2"):
        with pytest.raises(ConfigError, match=rf"--client-workers = '{bad}': not a worker count; fix: pass"):
            parse_client_workers(bad)
    with pytest.raises(ConfigError, match=r"--client-workers = 0: must be a whole number >= 1 or auto"):
        BenchOptions("http://127.0.0.1:1", (1,), client_workers=0).validate()


def test_bench_cli_refuses_a_bad_worker_count_before_any_network(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(sys, "argv", ["specfrontier", "bench", "--url", "http://127.0.0.1:1", "--client-workers", "x"])
    with pytest.raises(SystemExit) as info:
        main()
    assert info.value.code == 2
    assert "--client-workers = 'x': not a worker count" in capsys.readouterr().err
