"""End-to-end sweeps against a real llama-server with the generated target/draft pair.

The pair makes acceptance a known quantity: alpha 0 accepts every draft token, alpha 0.3 about one in
ten. So these tests can assert real speculative behaviour: counts that agree between the server's
/metrics window diff and the per-request timings, a speed-up when acceptance is high, and a slow-down
when it is low.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from specfrontier.analysis import load_run, speedup
from specfrontier.analysis.misconfig import DRAFTS_REJECTED, SLOW_FOR_ONE_USER, misconfigurations
from specfrontier.config.load import parse_config
from specfrontier.report import report_markdown
from specfrontier.runs.sweep import open_sweep
from specfrontier.store import Store
from specfrontier.testing.synthetic_models import SyntheticPair

pytestmark = pytest.mark.engine


def _config(pair: SyntheticPair, store: Path, **overrides: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "engine": {"model": str(pair.target), "draft_model": str(pair.draft), "threads": 1, "ctx_size": 4096},
        "settings": [
            {"name": "baseline"},
            {"name": "draft-8", "spec_type": "draft-simple", "draft_n_max": 8},
        ],
        "concurrency": [1],
        "repeats": 2,
        "rounds_per_cell": 3,
        "warmup_rounds": 1,
        "workload": {"prompts": "builtin:cpu-mix", "api": "completion", "max_tokens": 96, "ignore_eos": True},
        "store": str(store),
        # the synthetic models answer in ~0.1-0.3 s on 2 cores shared with the client: its lag is not the
        # subject here, and a speed-up is quoted only between cells that are evidence (issue 39)
        "max_client_lag_share": 1.0,
    }
    data.update(overrides)
    return data


async def _sweep(data: dict[str, Any]) -> tuple[Store, str]:
    sweep, run_id = open_sweep(parse_config(data), None, resume=None)
    await sweep.run(run_id)
    return sweep.store, run_id


async def test_full_acceptance_beats_baseline_and_counts_agree(
    llama_server: Path, pair_full_acceptance: SyntheticPair, tmp_path: Path
) -> None:
    store, run_id = await _sweep(_config(pair_full_acceptance, tmp_path / "s.db"))
    data = load_run(store, run_id)
    assert data.run.status == "done"
    spec = data.cell("draft-8", 1)
    assert spec is not None and spec.counters is not None
    # Every drafted token accepted, and the /metrics window diff equals the sum of per-request timings.
    assert spec.acceptance_rate == 1.0
    assert spec.acceptance_length is not None and spec.acceptance_length > 4
    per_request = [r for cell in store.cells(run_id) if cell.setting_id == "draft-8" for r in cell.requests]
    assert sum(r.spec.draft_tokens for r in per_request if r.spec) == spec.counters.draft_tokens
    assert sum(r.spec.accepted_tokens for r in per_request if r.spec) == spec.counters.accepted_tokens
    assert all(r.completion_tokens == 96 for r in per_request)  # ignore_eos: exactly max_tokens
    # Capacity is read back from the server: slots = max concurrency.
    assert {s.capacity for s in data.settings} == {1}
    gain = speedup(data, "draft-8", 1)
    assert gain is not None and gain > 1.1, f"full acceptance should beat the baseline, got {gain}"
    assert misconfigurations(data) == []


async def test_a_draft_of_another_model_is_flagged_as_misconfigured(
    llama_server: Path, pair_wrong_draft: SyntheticPair, tmp_path: Path
) -> None:
    """A draft model that never matches the target runs without an error on llama-server; the report flags
    it with the evidence and llama.cpp's cause and fix (issue 16)."""
    store, run_id = await _sweep(_config(pair_wrong_draft, tmp_path / "s.db"))
    data = load_run(store, run_id)
    assert data.run.status == "done"
    found = {m.check: m for m in misconfigurations(data)}
    assert set(found) == {DRAFTS_REJECTED, SLOW_FOR_ONE_USER}, found
    pooled = data.pooled_counters("draft-8")
    assert pooled is not None and pooled.draft_tokens > 0 and (pooled.acceptance_rate or 1) < 0.05
    assert "engine.draft_model (-md) is not a smaller model of the target's family" in found[DRAFTS_REJECTED].cause
    assert found[SLOW_FOR_ONE_USER].cause.startswith("its drafts are rejected")
    flags = " ".join(report_markdown(data).split())
    assert "draft-8: likely misconfigured:" in flags


async def test_low_acceptance_loses_to_baseline(
    llama_server: Path, pair_low_acceptance: SyntheticPair, tmp_path: Path
) -> None:
    # 16 drafted tokens per step with no confidence cut: most of the draft work is wasted, so the loss is
    # wide (measured 0.56x on an idle box) and stays clear of the 0.85 bound when CI shares the CPU.
    data = _config(pair_low_acceptance, tmp_path / "s.db")
    data["settings"] = [
        {"name": "baseline"},
        {"name": "draft-16", "spec_type": "draft-simple", "draft_n_max": 16, "draft_p_min": 0.0},
    ]
    store, run_id = await _sweep(data)
    run = load_run(store, run_id)
    spec = run.cell("draft-16", 1)
    assert spec is not None and spec.acceptance_rate is not None
    assert spec.acceptance_rate < 0.3
    gain = speedup(run, "draft-16", 1)
    assert gain is not None and gain < 0.85, f"low acceptance should lose to the baseline, got {gain}"


async def test_acceptance_counts_are_deterministic_across_repeats(
    llama_server: Path, pair_low_acceptance: SyntheticPair, tmp_path: Path
) -> None:
    store, run_id = await _sweep(_config(pair_low_acceptance, tmp_path / "s.db", repeats=2))
    windows = [c.counters for c in store.cells(run_id) if c.setting_id == "draft-8"]
    assert len(windows) == 2
    assert windows[0] == windows[1]  # greedy, same prompts, one slot: identical draft/accept counts
    assert windows[0] is not None and windows[0].draft_tokens > 0


async def test_a_setting_that_fails_to_start_is_recorded_and_the_sweep_continues(
    llama_server: Path, pair_full_acceptance: SyntheticPair, tmp_path: Path
) -> None:
    data = _config(pair_full_acceptance, tmp_path / "s.db", repeats=1)
    data["settings"] = [
        {"name": "broken", "spec_type": "draft-simple", "extra_args": ["--no-such-flag-xyz"]},
        *data["settings"],
    ]
    store, run_id = await _sweep(data)
    rows = {s.name: s for s in store.settings(run_id)}
    assert rows["broken"].status == "failed"
    assert rows["broken"].error is not None and "exited with status" in rows["broken"].error
    assert "no-such-flag-xyz" in (rows["broken"].log_tail or "")
    assert rows["baseline"].status == "done" and rows["draft-8"].status == "done"
    assert {c.setting_id for c in store.cells(run_id)} == {"baseline", "draft-8"}
