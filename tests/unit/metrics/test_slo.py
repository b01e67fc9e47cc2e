"""Goodput under SLOs: parsing with precise errors, per-request and per-cell semantics, worked by hand."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from builders import StoredRun
from builders import record_ms as _record
from specfrontier.analysis import load_run
from specfrontier.cli import main
from specfrontier.errors import ConfigError
from specfrontier.metrics.slo import Slo, parse_slo, request_is_good, window_goodput
from specfrontier.report import report_json, report_markdown
from specfrontier.store import Store


def test_parse_slo_keys_and_values() -> None:
    assert parse_slo("ttft_p90_ms=500, tpot_p90_ms=50") == (Slo("ttft", 90, 500), Slo("tpot", 90, 50))
    assert parse_slo("e2e_p99.9_ms=2000")[0].key == "e2e_p99.9_ms"
    assert parse_slo(None) == () and parse_slo("  ") == ()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("ttft_p90=500", "key = 'ttft_p90' is not <metric>_p<percentile>_ms"),
        # the metrics it names follow the declarations (tests/unit/metrics/test_declarations.py)
        ("itl_p90_ms=5", "key = 'itl_p90_ms' is not <metric>_p<percentile>_ms with metric ttft, tpot"),
        ("ttft_p90_ms", "'ttft_p90_ms' has no '='; fix: write KEY=MILLISECONDS"),
        ("ttft_p90_ms=fast", "ttft_p90_ms = 'fast' is not a number; fix: milliseconds, e.g. ttft_p90_ms=500"),
        ("ttft_p90_ms=-1", "ttft_p90_ms = -1: must be > 0 ms"),
        ("ttft_p100_ms=5", "percentile 100; fix: use a percentile in (0, 100)"),
        ("ttft_p90_ms=5,ttft_p90_ms=6", "ttft_p90_ms is given twice; fix: keep one value"),
        ("ttft_p90_ms=5,,", "an empty item between commas"),
    ],
)
def test_parse_slo_errors_name_the_key_and_the_fix(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match="--slo") as info:
        parse_slo(text)
    assert message in str(info.value)
    assert "fix:" in str(info.value)


# R1: TTFT 100, TPOT 900/9 = 100, E2E 1000, 10 tokens
# R2: TTFT 300, TPOT 300/3 = 100, E2E 600, 4 tokens
# R3: TTFT 50, TPOT 200/4 = 50, E2E 250, 5 tokens
# R4: failed (send 500, end 2000)
# R5: send 1000, one token at 1020: TTFT 20, no TPOT, E2E 20
WINDOW = [
    _record(0, 100, 1000, 10),
    _record(0, 300, 600, 4),
    _record(0, 50, 250, 5),
    _record(500, None, 2000, None, "http 500"),
    _record(1000, 1020, 1020, 1),
]
SLOS = parse_slo("ttft_p50_ms=200,tpot_p90_ms=80")


def test_per_request_goodput_by_hand() -> None:
    # R1 fails TPOT (100 > 80); R2 fails TTFT (300 > 200); R3 passes; R4 failed; R5 passes (no TPOT to miss)
    assert [request_is_good(r, SLOS) for r in WINDOW] == [False, False, True, False, True]
    g = window_goodput(WINDOW, SLOS)
    assert (g.requests, g.good, g.good_tokens) == (5, 2, 5 + 1)
    assert g.window_s == pytest.approx(2.0)  # first send 0 -> last end 2000 (the error's)
    assert g.goodput_req_s == pytest.approx(1.0)
    assert g.goodput_tok_s == pytest.approx(3.0)
    assert g.good_fraction == pytest.approx(0.4)  # errors count as misses in the denominator


def test_per_cell_percentiles_count_errors_as_infinitely_slow() -> None:
    g = window_goodput(WINDOW, SLOS)
    ttft, tpot = g.checks
    # TTFT 20, 50, 100, 300, inf: p50 at rank 2 -> 100 <= 200: met
    assert (ttft.observed_ms, ttft.met) == (pytest.approx(100.0), True)
    # TPOT 50, 100, 100, inf (R5 has none): p90 at rank 2.7 lies between 100 and inf -> inf: missed
    assert (tpot.observed_ms, tpot.met) == (None, False)
    assert not g.slo_met
    # E2E 20, 250, 600, 1000, inf: p50 = 600 <= 700
    (e2e,) = window_goodput(WINDOW, parse_slo("e2e_p50_ms=700")).checks
    assert (e2e.observed_ms, e2e.met) == (pytest.approx(600.0), True)


@pytest.fixture
def stored(tmp_path: Path) -> tuple[Path, str]:
    return StoredRun(tmp_path / "slo.db").setting("baseline").repeats("baseline", 2, [WINDOW] * 3).close()


def test_report_json_and_markdown_carry_goodput(stored: tuple[Path, str]) -> None:
    path, run_id = stored
    store = Store(path)
    data = load_run(store, run_id, SLOS)
    plain = load_run(store, run_id)
    store.close()
    out = report_json(data)
    assert [s["key"] for s in out["slo"]] == ["ttft_p50_ms", "tpot_p90_ms"]
    (cell,) = out["cells"]
    assert cell["goodput"]["goodput_req_s"]["median"] == pytest.approx(1.0)
    assert cell["goodput"]["good_fraction"]["median"] == pytest.approx(0.4)
    assert cell["goodput"]["slo_met"] is False
    assert cell["goodput"]["slos"]["ttft_p50_ms"]["met_every_repeat"] is True
    assert report_json(plain)["cells"][0]["goodput"] is None
    md = report_markdown(data)
    assert "### Goodput under SLOs (ttft_p50_ms=200, tpot_p90_ms=80)" in md
    assert "| 2 | baseline | 1.00 | 3.0 | 40% | 100.0 ok | inf MISS | no |" in md
    assert "Goodput under SLOs" not in report_markdown(plain)


def test_cli_report_slo(
    stored: tuple[Path, str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    path, run_id = stored
    monkeypatch.setattr(
        sys,
        "argv",
        ["specfrontier", "report", run_id, "--store", str(path), "--format", "json", "--slo", "ttft_p50_ms=200"],
    )
    with pytest.raises(SystemExit) as info:
        main()
    assert info.value.code == 0
    out = json.loads(capsys.readouterr().out)
    assert out["cells"][0]["goodput"]["slo_met"] is True


def test_cli_bad_slo_is_a_config_error_before_anything_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "nothing.db"
    for command in (["report", "RUN", "--store", str(missing)], ["tune", "--store", str(missing)]):
        monkeypatch.setattr(sys, "argv", ["specfrontier", *command, "--slo", "ttft_p90=5"])
        with pytest.raises(SystemExit) as info:
            main()
        assert info.value.code == 2
        err = capsys.readouterr().err
        assert "ConfigError: --slo: key = 'ttft_p90' is not <metric>_p<percentile>_ms" in err
    assert not missing.exists()  # nothing was opened, no server launched
