"""Cells that contradict the model's premises are found and named (`perfmodel.consistency`), on the public
table where they occur (SpecForge issue #339) and not on a table without them."""

from __future__ import annotations

from pathlib import Path

from specfrontier.perfmodel.consistency import contradictions, observed_cycle_ms
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
