"""Reports of an open-loop run: levels shown as request rates, time slices in JSON, spikes and cold start."""

from __future__ import annotations

import json
from pathlib import Path

from rich.console import Console

from builders import StoredRun
from builders import record_ms as _record
from specfrontier.records import RequestRecord
from specfrontier.report import print_report, report_json, report_markdown


def _steady(stall: bool) -> list[RequestRecord]:
    """Four seconds of requests with TTFT 50 ms; with `stall`, second 2 has three with TTFT 900 ms."""
    records = [_record(t, t + 50, t + 400, 8) for t in range(0, 4000, 200)]
    if stall:
        records += [_record(2000 + k, 2900 + k, 2950 + k, 8) for k in range(3)]
    return records


def test_open_loop_run_reports_rates_slices_spikes_and_first_request(tmp_path: Path) -> None:
    run = StoredRun(tmp_path / "s.db", "external", environment={"engine_version": "x"})
    for name in ("baseline", "spec"):
        run.setting(name, status="done", startup_s=2.0, first_ttft_ms=321.0, first_e2e_ms=987.0)
        for rate in (2.0, 5.0):
            load = {
                "target_rate": rate,
                "scheduled_rate": rate * 1.2,
                "achieved_rate": rate * 0.5,
                "cap_waits": 4,
                "send_lag_p99_ms": 1500.0,
            }
            run.cell(name, 0, _steady(stall=(name == "spec" and rate == 5.0)), request_rate=rate, load=load)
    data = run.data()
    assert data.open_loop and data.concurrency_levels == (2.0, 5.0)

    console = Console(record=True, width=200)
    print_report(data, console)
    text = console.export_text()
    assert "rate req/s" in text
    assert "spec 5 req/s repeat 1: TTFT p99 900 ms in second 2-3" in text
    assert "321" in text and "987" in text  # the first request on the fresh server
    assert "in-flight cap hit 4 times" in text
    assert "sends fell behind the schedule (1.00 req/s sent, 2.40 scheduled; send lag p99 1500 ms)" in text
    assert "rate req/s = 2.0: baseline" in text and "rate req/s = 5.0: spec" in text

    exported = json.loads(json.dumps(report_json(data)))
    cell = next(c for c in exported["cells"] if c["setting"]["name"] == "spec" and c["request_rate"] == 5.0)
    assert cell["load_mode"] == "open"
    assert [s["finished"] for s in cell["time_slices"][0]] == [3, 5, 8, 5, 2]
    assert [(s["metric"], s["slice_index"]) for s in cell["spikes"]] == [("ttft", 2)]
    assert exported["settings"][0]["first_ttft_ms"] == 321.0
    assert "### Spikes" in report_markdown(data)
    run.close()
