"""The metric declarations (`metrics.specs`) are complete and consistent: every declared metric computes,
combines over repeats and shows where declared; SLO keys, comparisons and the digest follow from them."""

from __future__ import annotations

import dataclasses
import json
import re
import zlib
from pathlib import Path

import pytest

import specfrontier.metrics.digest as digest_module
from metric_rules import C, assert_metric_works, sample_window
from specfrontier.analysis.compare import COMPARED
from specfrontier.errors import ConfigError
from specfrontier.metrics.declare import MetricSpec
from specfrontier.metrics.digest import digest_requests, pack_digest, unpack_digest
from specfrontier.metrics.slo import parse_slo
from specfrontier.metrics.specs import CELL_METRICS, METRICS, slo_uses
from specfrontier.metrics.window import CellMetrics


@pytest.mark.parametrize("spec", METRICS, ids=lambda m: m.name)
def test_every_declared_metric_computes_combines_and_shows(spec: MetricSpec, tmp_path: Path) -> None:
    assert_metric_works(spec, tmp_path)


def test_slo_keys_are_exactly_the_declared_ones() -> None:
    allowed = list(slo_uses())
    assert allowed[:3] == ["ttft", "tpot", "e2e"]
    percentile_metrics = {m.name.removesuffix("_p50_ms") for m in CELL_METRICS if m.name.endswith("_p50_ms")}
    assert set(allowed) <= percentile_metrics
    for name in sorted(percentile_metrics):
        key = f"{name}_p90_ms"
        if name in allowed:
            assert parse_slo(f"{key}=5")[0].key == key
            continue
        with pytest.raises(ConfigError) as info:
            parse_slo(f"{key}=5")
        message = str(info.value)
        assert "\n" not in message and f"key = {key!r}" in message and "fix:" in message
        words = re.search(r"with metric (.*);", message)
        assert words is not None and re.split(r", | or ", words.group(1)) == allowed


def test_comparisons_are_the_declared_ones() -> None:
    assert {m.compare: m.name for m in CELL_METRICS if m.compare} == COMPARED
    assert set(COMPARED) >= {"aggregate tok/s", "per-request tok/s p50", "TTFT p50 ms", "TPOT p50 ms"}


def _stored(packed: bytes) -> dict[str, object]:
    data: dict[str, object] = json.loads(zlib.decompress(packed))
    return data


def _packed(data: dict[str, object]) -> bytes:
    return zlib.compress(json.dumps(data).encode())


def test_a_digest_is_reused_only_under_the_same_declarations(monkeypatch: pytest.MonkeyPatch) -> None:
    digest = digest_requests(sample_window(), C)
    packed = pack_digest(digest)
    assert unpack_digest(packed) == digest
    # written before metrics could be declared in files of their own: no `more`, still valid without them
    old = _stored(packed)
    metrics = old["metrics"]
    assert isinstance(metrics, dict)
    more = metrics.pop("more")
    if not more:
        assert unpack_digest(_packed(old)) == digest
    # a metric declared since the digest was stored: recomputed
    monkeypatch.setattr(digest_module, "_ADDED", {*more, "new_metric_p50_ms"})
    assert unpack_digest(packed) is None
    monkeypatch.undo()
    # a metric's definition revised since: recomputed; stored under the new revision: reused
    monkeypatch.setattr(digest_module, "metric_revisions", lambda: {"ttft_p50_ms": 2})
    assert unpack_digest(packed) is None
    assert unpack_digest(pack_digest(digest)) == digest


def test_every_cell_metrics_value_is_a_declared_metric() -> None:
    metrics = digest_requests(sample_window(), C).metrics
    computed = {m.name for m in METRICS if m.compute is not None}
    spelled = {f.name for f in dataclasses.fields(CellMetrics)} - {"more"}
    assert spelled | set(metrics.more) == computed
    assert all(metrics.value(m.field) == m.window_value(metrics) for m in METRICS)
