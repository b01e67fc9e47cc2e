"""The embedded default on the real SmolLM2-135M model, shortened, through the CLI like a user."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import yaml

from builders import CLI, CORE_CELL_KEYS

pytestmark = [pytest.mark.engine, pytest.mark.slow]


def test_default_settings_on_smollm2_end_to_end(llama_server: Path, tmp_path: Path) -> None:
    store = tmp_path / "s.db"
    config = tmp_path / "short.yaml"
    # The default engine, model and settings; fewer levels, repeats and tokens to keep the test short.
    config.write_text(
        yaml.safe_dump(
            {
                "concurrency": [1, 2],
                "repeats": 2,
                "rounds_per_cell": 2,
                "workload": {"max_tokens": 32},
                "store": str(store),
            }
        )
    )
    tune = subprocess.run([*CLI, "tune", "--config", str(config)], capture_output=True, text=True, cwd=tmp_path)
    assert tune.returncode == 0, tune.stderr
    for text in ("Per-request tok/s", "Aggregate tok/s", "Best setting per concurrency", "Recommendation"):
        assert text in tune.stdout
    # the command to deploy: the run's own address and --metrics left out, and said so (issue 30)
    assert "llama-server" in tune.stdout and "left out, only for measuring: --host 127.0.0.1 --port" in tune.stdout

    runs = json.loads(
        subprocess.run([*CLI, "runs", "--json", "--store", str(store)], capture_output=True, check=True).stdout
    )
    assert [r["status"] for r in runs] == ["done"] and runs[0]["engine"] == "llamacpp"
    page = tmp_path / f"s-{runs[0]['id']}.html"  # the HTML report, written next to the store
    assert f"HTML report: {page}" in tune.stdout.replace("\n", "")
    assert "Pareto frontier" in page.read_text(encoding="utf-8")
    report = json.loads(
        subprocess.run(
            [*CLI, "report", runs[0]["id"], "--store", str(store), "--format", "json"], capture_output=True, check=True
        ).stdout
    )
    assert len(report["cells"]) == 3 * 2
    cell = report["cells"][0]
    assert set(cell) >= CORE_CELL_KEYS
    assert all(c["errors"] == 0 and c["aggregate_tok_s"] > 0 for c in report["cells"])
    # n-gram speculation on the real model drafts on the copy-heavy code-edit prompts.
    ngram = [c for c in report["cells"] if c["setting"]["name"].startswith("ngram-simple")]
    assert ngram and all(c["acceptance_rate"] is not None for c in ngram)
    assert all(c["capacity"] == 2 for c in report["cells"])
