"""Cells that contradict the model's premises are found and named (`perfmodel.consistency`), on the public
table where they occur (SpecForge issue #339) and not on a table without them."""

from __future__ import annotations

from pathlib import Path

from specfrontier.perfmodel.consistency import acceptance_mismatches, contradictions, observed_cycle_ms
from specfrontier.perfmodel.plan import run_cells
from specfrontier.perfmodel.types import ModelCell, SettingParams
from specfrontier.runs.imported import load_table, store_table
from specfrontier.store import Store

PUBLIC = Path(__file__).resolve().parents[3] / "benchmarks" / "public"


def _cells(tmp_path: Path, name: str) -> list[ModelCell]:
    store = Store(tmp_path / "t.db")
    run_id = store_table(store, load_table(PUBLIC / name))
    return list(run_cells(store, run_id).cells)


def test_a_wider_tree_faster_than_its_chain_is_a_contradiction(tmp_path: Path) -> None:
    found = contradictions(_cells(tmp_path, "specforge_i339_qwen3_30b_a3b_eagle3_h100.json"))
    assert [(c.concurrency, c.heavier, c.lighter) for c in found] == [
        (1, "s3k3d4", "s3k1d4"),
        (1, "s7k4d16", "s6k4d12"),
    ]
    assert 0.17 < found[0].by < 0.18  # 9.58 ms against 11.64 ms
    assert "drafts and verifies at least as much as s3k1d4" in found[0].describe()
    assert contradictions(_cells(tmp_path, "specforge_i339_qwen3_30b_a3b_eagle3_h100.json"), noise=0.2) == []


def test_a_consistent_table_has_none(tmp_path: Path) -> None:
    assert contradictions(_cells(tmp_path, "speculators_qwen38_27b_b200_humaneval.json")) == []


def test_a_cycle_is_observable_only_with_a_measured_acceptance() -> None:
    spec = SettingParams(steps=2, family="EAGLE3")
    assert observed_cycle_ms(ModelCell("s", spec, 4, aggregate_tok_s=400.0)) is None
    assert observed_cycle_ms(ModelCell("s", spec, 4, aggregate_tok_s=400.0, acceptance_length=2.0)) == 20.0
    assert observed_cycle_ms(ModelCell("b", SettingParams(), 4, per_request_tok_s=50.0)) == 20.0


def test_a_cell_whose_tau_disagrees_with_its_per_position_acceptances_contradicts_itself(tmp_path: Path) -> None:
    # MTPLX PR #338 greedy: the published tau and 1 + d1 + d2 + d3 agree at n = 1 (0.4 %) and are 9-15 %
    # apart at every n >= 2, against a stated timing noise of 0.93 %.
    cells = _cells(tmp_path, "mtplx_pr338_qwen38_27b_m3ultra_greedy.json")
    found = acceptance_mismatches(cells, noise=0.0093)
    assert [m.concurrency for m in found] == [2, 4, 8, 16, 24, 32]
    assert 0.10 < found[0].by < 0.11  # 3.066 against 3.438
    assert "1 + their sum = 3.438" in found[0].describe()
    assert all(0.08 < m.by < 0.14 for m in found)
    assert {c.describe() for c in contradictions(cells, noise=0.0093)} == {m.describe() for m in found}


def test_tau_and_per_position_rates_that_agree_within_the_noise_are_no_contradiction() -> None:
    spec = SettingParams(steps=3, family="mtp")
    agrees = ModelCell(
        "d3", spec, 1, aggregate_tok_s=80.0, acceptance_length=3.879, acceptance_per_position=(0.992, 0.955, 0.947)
    )
    apart = ModelCell(
        "d3", spec, 2, aggregate_tok_s=80.0, acceptance_length=3.066, acceptance_per_position=(0.913, 0.809, 0.716)
    )
    assert acceptance_mismatches([agrees]) == []
    assert [m.concurrency for m in acceptance_mismatches([agrees, apart])] == [2]
    assert acceptance_mismatches([apart], noise=0.15) == []  # a source that states 15 % noise
    no_positions = ModelCell("d3", spec, 2, aggregate_tok_s=80.0, acceptance_length=3.066)
    assert acceptance_mismatches([no_positions]) == []


def test_a_real_llamacpp_run_agrees_with_itself(tmp_path: Path) -> None:
    """The measured llama.cpp n-gram space (54 speculative cells with per-position counters): tau and
    1 + the sum of the per-position rates come from one set of counters, so the check finds nothing."""
    fixture = PUBLIC.parent / "spaces" / "llamacpp-ngram" / "store.db"
    copy = tmp_path / "store.db"
    copy.write_bytes(fixture.read_bytes())
    store = Store(copy)
    (run_id,) = [r.run_id for r in store.runs()]
    cells = run_cells(store, run_id).cells
    assert sum(1 for c in cells if c.acceptance_per_position) >= 50
    assert acceptance_mismatches(cells) == []
