"""A cell whose client was saturated: stored, marked 'c' with a legend, flagged, in JSON; and where its lag
was too large for the request lifetime (or its CPU over the limit) the client could not keep up: not
evidence (issue 39, item 6: it measures the client, not the server), so no recommendation or speed-up rests
on it. A lag above the fidelity limit but small against the lifetime is flagged and stays evidence."""

from __future__ import annotations

import json
from pathlib import Path

from rich.console import Console

from builders import closed_loop_ms, store_cells
from specfrontier.analysis import load_run, recommend
from specfrontier.load.health import ClientHealth, WorkerHealth
from specfrontier.records import RequestRecord
from specfrontier.report import print_report, report_json, report_markdown
from specfrontier.store import Store

MS = 1_000_000


def _requests(tokens: int) -> list[RequestRecord]:
    """Six rounds of 64 one-second requests, each replaced the instant it ends: even the C=64 cell has a
    steady state to measure (5 s after its first round, 5 request lifetimes)."""
    return closed_loop_ms(64, 6, 1000, tokens)


def _health(lag_ms: float, cpu: float = 0.2) -> dict[str, object]:
    worker = WorkerHealth(
        wall_ns=1000 * MS, cpu_ns=round(cpu * 1000 * MS), lags_ns=(round(lag_ms * MS),) * 50, reads=9, events=9
    )
    return ClientHealth.of([worker]).to_json()


def _run(
    tmp_path: Path,
    settings: tuple[tuple[str, int], ...] = (("baseline", 10), ("spec", 30)),
    saturated: tuple[str, int] = ("spec", 64),
) -> tuple[Store, str]:
    """One cell per setting (name, tokens per request) at C = 1 and 64; the `saturated` (setting, C) cell's
    client was saturated, every other one healthy."""
    cells = {name: {1: _requests(tokens), 64: _requests(tokens)} for name, tokens in settings}
    return store_cells(
        tmp_path / "s.db", cells, client_health=lambda name, c: _health(40.0 if (name, c) == saturated else 0.3)
    )


def test_saturated_client_is_stored_marked_flagged_exported_and_not_evidence(tmp_path: Path) -> None:
    store, run_id = _run(tmp_path)
    stored = {(c.setting_id, c.concurrency): c.client_health for c in store.cells(run_id)}
    assert stored[("spec", 64)] is not None and stored[("spec", 64)]["saturated"] is True
    assert stored[("spec", 1)] is not None and stored[("spec", 1)]["lag_p99_ms"] == 0.3

    data = load_run(store, run_id)
    spec64 = data.cell("spec", 64)
    assert spec64 is not None and spec64.client_saturated
    assert not data.cell("spec", 1).client_saturated  # type: ignore[union-attr]

    console = Console(record=True, width=220)
    print_report(data, console)
    text = console.export_text()
    assert "│ 64 │    640.0 │ 1920.0 c │" in text  # aggregate tok/s: only the saturated cell is marked
    assert "'c' marks a cell whose client was saturated" in text
    assert "spec C=64 repeat 1: client saturated (event-loop lag p99 40.0 ms > 5 ms): TTFT and ITL may carry it" in text
    assert "spec C=64: the client could not keep up (repeat 1: event-loop lag p99 40.0 ms > 2% of the 1.00 s" in text
    assert data.verdict(spec64) == (
        "client could not keep up (repeat 1: event-loop lag p99 40.0 ms > 2% of the 1.00 s request lifetime)",
    )

    rec = next(r for r in recommend(data) if 64 in r.concurrency)
    assert rec.setting == "baseline"  # spec's 3x at C=64 measured its client: it decides nothing
    assert "client" not in rec.note

    exported = json.loads(json.dumps(report_json(data)))
    cell = next(c for c in exported["cells"] if c["setting"]["name"] == "spec" and c["concurrency"] == 64)
    assert cell["client_saturated"] is True and cell["client_health"][0]["lag_p99_ms"] == 40.0
    assert cell["evidence"] is False and "client could not keep up" in cell["verdict"]
    assert "client_health" in exported["definitions"]
    assert "'c' marks a cell" in report_markdown(data)
    store.close()


def test_cells_without_recorded_health_are_not_flagged(tmp_path: Path) -> None:
    store = Store(tmp_path / "s.db")
    run_id = store.create_run(engine="external", config={}, environment={})
    store.add_setting(run_id, setting_id="b", position=0, name="b", params={}, speculative=False)
    store.record_cell(
        run_id,
        setting_id="b",
        workload="w",
        concurrency=1,
        repeat=0,
        requests=_requests(5),
        counters=None,
        acceptance_source=None,
    )
    data = load_run(store, run_id)
    assert data.cells[0].client_health == () and not data.cells[0].client_saturated
    console = Console(record=True, width=220)
    print_report(data, console)
    assert "'c' marks" not in console.export_text()
    store.close()


def test_no_speed_up_is_quoted_against_a_saturated_baseline(tmp_path: Path) -> None:
    """Issue 30: the C = 1 baseline was client saturated, and the C = 1 win quoted against it ("1.26x") had no
    warning. Issue 39: such a baseline is not evidence, so no ratio is quoted against it at all; the win over
    the runner-up (ngram, whose client kept up) still stands."""
    store, run_id = _run(tmp_path, (("baseline", 10), ("ngram", 20), ("spec", 30)), saturated=("baseline", 1))
    (rec,) = recommend(load_run(store, run_id))
    assert rec.setting == "spec" and rec.concurrency == (1, 64)
    assert rec.note.startswith("3.00x the baseline's aggregate tok/s at C=64; no ratio at C=1 (no baseline cell")
    assert "WARNING" not in rec.note
    store.close()


def test_a_lag_small_against_the_request_lifetime_is_flagged_and_stays_evidence(tmp_path: Path) -> None:
    """Measured (benchmarks/client_lag.py): the load the server saw fell short of C by at most ~1.7 x lag p99 /
    lifetime. 12 ms against 1 s requests: over the 5 ms fidelity limit (flagged 'c'), within 2 % of the
    lifetime: the client kept up, the cell is evidence. A client over 90 % of a core could not keep up."""
    lagging, busy = tmp_path / "lag.db", tmp_path / "cpu.db"
    for path, health in ((lagging, _health(12.0)), (busy, _health(0.3, cpu=0.97))):
        cells = {name: {64: _requests(tokens)} for name, tokens in (("baseline", 10), ("spec", 30))}
        opened, run = store_cells(path, cells, client_health=lambda name, c, h=health: h if name == "spec" else None)
        data = load_run(opened, run)
        spec = data.cell("spec", 64)
        assert spec is not None and spec.client_saturated
        if path == lagging:
            assert data.is_evidence(spec) and data.client_keep_up(spec) is None
            (rec,) = recommend(data)
            assert rec.setting == "spec" and "WARNING: client saturated at spec C=64" in rec.note
        else:
            assert data.verdict(spec) == ("client could not keep up (repeat 1: client CPU 97% of a core > 90%)",)
        opened.close()


def test_the_run_states_its_own_bound_on_the_client_lag(tmp_path: Path) -> None:
    """`max_client_lag_share` is the run's, as `max_failed_share` is: at 5 % of the 1 s lifetime a 40 ms lag
    keeps up; the default (2 %) does not."""
    cells = {name: {64: _requests(tokens)} for name, tokens in (("baseline", 10), ("spec", 30))}
    for share, kept in ((None, False), (0.05, True)):
        config = {} if share is None else {"max_client_lag_share": share}
        store, run = store_cells(
            tmp_path / f"{share}.db", cells, config=config, client_health=lambda n, c: _health(40.0)
        )
        data = load_run(store, run)
        assert data.max_client_lag_share == (share or 0.02)
        assert all(data.is_evidence(c) == kept for c in data.cells)
        store.close()
