"""The latency/burstiness table and the acceptance-source warnings, on a hand-built store."""

from __future__ import annotations

from pathlib import Path

from specfrontier.analysis import RunData, load_run
from specfrontier.records import RequestRecord, SpecCounters
from specfrontier.report.metric_tables import acceptance_flag_lines, latency_table
from specfrontier.report.tables import flag_lines
from specfrontier.store import Store

MS = 1_000_000


def _three_per_chunk() -> RequestRecord:
    # chunks at 100, 130, 160, 190 ms with 3 tokens each: TTFT 100, TPOT 90/11, ITL 10, chunk gap 30
    return RequestRecord(
        prompt_id="p",
        send_ns=0,
        end_ns=190 * MS,
        first_token_ns=100 * MS,
        chunk_ns=tuple(t * MS for t in (100, 130, 160, 190)),
        chunk_tokens=(3, 3, 3, 3),
        completion_tokens=12,
    )


def _data(tmp_path: Path, sources: dict[str, str | None]) -> RunData:
    store = Store(tmp_path / "m.db")
    run_id = store.create_run(engine="sglang", config={}, environment={})
    for pos, (name, source) in enumerate(sources.items()):
        store.add_setting(run_id, setting_id=name, position=pos, name=name, params={}, speculative=pos > 0)
        for rep in range(3):
            store.record_cell(
                run_id,
                setting_id=name,
                workload="w",
                concurrency=1,
                repeat=rep,
                requests=[_three_per_chunk()],
                counters=SpecCounters(10, 5, 5) if source else None,
                acceptance_source=source,
            )
    data = load_run(store, run_id)
    store.close()
    return data


CORE_COLUMNS = {
    "C": "1",
    "setting": "baseline",
    "TTFT ms p50/p99": "100 / 100",
    "TPOT ms p50/p99": "8.2 / 8.2",
    "ITL ms p50/p99": "10.0 / 10.0",
    "chunk gap ms p50/p99": "30.0 / 30.0",
    "tok/chunk": "3.00",
    "E2E ms p50/p99": "190 / 190",
    "out/E2E tok/s p50": "63.2",
}
"""The level and setting, then the core metrics' columns (`metrics/specs.py`) in their order; a metric
declared in a file of its own adds its column where it declares, and its own test checks it."""


def test_latency_table_shows_per_token_itl_and_chunk_gaps(tmp_path: Path) -> None:
    data = _data(tmp_path, {"baseline": None})
    table = latency_table(data)
    (row,) = table.rows
    cells = dict(zip(table.headers, row, strict=True))
    # TTFT 100; TPOT 90/11 = 8.2; ITL 10 (not the 30 ms chunk gap); 3 tokens per chunk; E2E 190; 12/0.19 tok/s
    assert {header: cells[header] for header in CORE_COLUMNS} == CORE_COLUMNS
    assert [header for header in table.headers if header in CORE_COLUMNS] == list(CORE_COLUMNS)
    assert not any("did not stream per-chunk token counts" in n for n in table.notes)


def test_acceptance_warnings_for_cumulative_or_missing_sources(tmp_path: Path) -> None:
    data = _data(
        tmp_path,
        {
            "baseline": None,
            "eagle": "sglang /server_info avg_spec_accept_length (cumulative since startup)",
            "ngram": None,
            "windowed": "llama.cpp /metrics counter diff",
        },
    )
    lines = acceptance_flag_lines(data)
    assert lines == [
        "eagle at C=1: acceptance is the engine's cumulative figure (since startup, incl. warmup and other "
        "traffic), not this window's; treat it as approximate",
        "ngram at C=1: the engine offered no acceptance counts for the measured window",
    ]
    assert set(lines) <= set(flag_lines(data))  # shown under Flags in every report
