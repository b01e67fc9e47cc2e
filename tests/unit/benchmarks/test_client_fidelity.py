"""The pure parts of benchmarks/client_fidelity.py: lag computation, GuideLLM parsing, tables, server schedule.

No timing is asserted: lags here are computed from hand-made stamps, and the one live exchange with the
fidelity server checks only causal facts (every chunk is received after it was sent).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from builders import load_benchmark, serving
from specfrontier.load.client import StreamingClient
from specfrontier.load.closed_loop import run_closed_loop
from specfrontier.metrics.window import cell_metrics
from specfrontier.records import Prompt, RequestRecord, Sampling

SAMPLE = Path(__file__).with_name("data") / "guidellm-0.8.1-report.json"
MS = 1_000_000


fa = load_benchmark("fidelity_analysis")
fs = load_benchmark("fidelity_server")


def _stream(sid: int, sent_ms: list[float], arrival_ms: float = 0.0, wall_offset_ms: float = 1e9) -> object:
    return fa.StreamSchedule(
        sid=sid,
        arrival_ns=int(arrival_ms * MS),
        arrival_wall_ns=int((arrival_ms + wall_offset_ms) * MS),
        sched_ns=tuple(int(t * MS) for t in sent_ms),
        sent_ns=tuple(int(t * MS) for t in sent_ms),
        sent_wall_ns=tuple(int((t + wall_offset_ms) * MS) for t in sent_ms),
    )


def _record(sid: int, send_ms: float, chunk_ms: list[float], error: str | None = None) -> RequestRecord:
    text = "".join(fs.token_text(sid, i) for i in range(len(chunk_ms)))
    chunks = tuple(int(t * MS) for t in chunk_ms)
    return RequestRecord(
        prompt_id="p",
        send_ns=int(send_ms * MS),
        end_ns=chunks[-1] if chunks else int(send_ms * MS),
        first_token_ns=chunks[0] if chunks else None,
        chunk_ns=chunks,
        completion_tokens=len(chunk_ms),
        output_text=text,
        error=error,
    )


class TestParseSid:
    @pytest.mark.parametrize(
        ("text", "sid"),
        [("s0t0 s0t1 ", 0), ("s17t0 ", 17), ("", None), (None, None), ("hello", None), ("sXt0", None), ("s12", None)],
    )
    def test_reads_the_stream_id_the_server_put_in_the_first_token(self, text: str | None, sid: int | None) -> None:
        assert fa.parse_sid(text) == sid

    def test_round_trips_the_servers_token_text(self) -> None:
        assert fa.parse_sid(fs.token_text(4711, 0) + fs.token_text(4711, 1)) == 4711


class TestOurLags:
    def test_lag_is_receive_minus_send_for_every_chunk(self) -> None:
        streams = {3: _stream(3, [50.0, 60.0, 70.0], arrival_ms=1.5)}
        lags = fa.our_lags([_record(3, 1.0, [50.5, 62.0, 70.25])], streams)
        assert lags.every_chunk_ms == pytest.approx((0.5, 2.0, 0.25))
        assert lags.first_last_ms == pytest.approx((0.5, 0.25))
        assert lags.first_ms == pytest.approx((0.5,))
        assert lags.request_path_ms == pytest.approx((0.5,))  # server arrival 1.5 - client send 1.0
        assert (lags.matched, lags.unmatched) == (1, 0)

    def test_failed_unknown_and_miscounted_records_are_not_matched(self) -> None:
        streams = {1: _stream(1, [10.0, 20.0]), 2: _stream(2, [10.0, 20.0])}
        records = [
            _record(1, 0.0, [10.0, 20.0], error="timeout"),  # failed
            _record(9, 0.0, [10.0, 20.0]),  # no such stream
            _record(2, 0.0, [11.0]),  # one chunk where the server sent two: pairing would be wrong
        ]
        lags = fa.our_lags(records, streams)
        assert (lags.matched, lags.unmatched) == (0, 3)
        assert lags.every_chunk_ms == ()


class TestGuideLLMParsing:
    def test_figures_from_a_captured_report(self) -> None:
        report = json.loads(SAMPLE.read_text())
        figures = fa.guidellm_figures(fa.guidellm_benchmarks(report)[0])
        assert figures.ttft_p50_ms == pytest.approx(67.15703010559082)
        assert figures.itl_p50_ms == pytest.approx(10.001042532542396)
        assert figures.output_tok_s == pytest.approx(361.61597280101796)
        assert (figures.requests, figures.errors) == (20, 0)
        assert figures.concurrency == pytest.approx(3.953057426973393)

    def test_requests_from_a_captured_report(self) -> None:
        report = json.loads(SAMPLE.read_text())
        requests = fa.guidellm_requests(fa.guidellm_benchmarks(report)[0])
        assert [r.sid for r in requests] == [2, 3]
        assert requests[0].request_start_s == pytest.approx(1796281561.259823)
        assert requests[0].first_token_s == pytest.approx(1796281561.3355286)
        assert requests[0].output_tokens == 64

    def test_lags_use_the_wall_clock_of_first_and_last_token(self) -> None:
        request = fa.GuideLLMRequest(
            sid=5, request_start_s=1000.0, first_token_s=1000.0512, last_token_s=1000.0713, output_tokens=3
        )
        # server wall clock = monotonic + 1e9 ms, so its sends at 50/60/70 ms are wall 1000.050/.060/.070 s
        lags = fa.guidellm_lags([request], {5: _stream(5, [50.0, 60.0, 70.0], arrival_ms=2.0, wall_offset_ms=1e6)})
        assert lags.first_last_ms == pytest.approx((1.2, 1.3), abs=1e-6)
        assert lags.request_path_ms == pytest.approx((2.0,), abs=1e-6)
        assert lags.every_chunk_ms == ()

    def test_requests_before_the_measured_window_are_warmup_and_left_out(self) -> None:
        report = json.loads(SAMPLE.read_text())
        benchmark = dict(fa.guidellm_benchmarks(report)[0])
        benchmark["start_time"] = 1796281561.26  # between the two requests' starts
        assert [r.sid for r in fa.guidellm_requests(benchmark)] == [3]

    def test_a_report_without_benchmarks_is_refused_with_the_reason(self) -> None:
        with pytest.raises(ValueError, match="no 'benchmarks' list"):
            fa.guidellm_benchmarks({"benchmarks": []})


class TestServerTruth:
    def test_figures_from_the_servers_own_stamps(self) -> None:
        # two 3-token streams: arrive at 0 and 10 ms, first send 50 ms later, then every 10 ms
        a = fa.StreamSchedule(1, 0, 0, (50 * MS, 60 * MS, 70 * MS), (50 * MS, 60 * MS, 70 * MS), (), tokens=3)
        b = fa.StreamSchedule(2, 10 * MS, 0, (), (61 * MS, 71 * MS, 81 * MS), (), tokens=3)
        truth = fa.server_figures({1: a, 2: b}, [1, 2, 99])
        assert truth.ttft_p50_ms == pytest.approx(50.5)  # median of 50 and 51
        assert truth.itl_p50_ms == pytest.approx(10.0)
        assert truth.output_tok_s == pytest.approx(6 / 0.081)  # 6 tokens over 0 -> 81 ms
        assert truth.concurrency == pytest.approx((70 + 71) / 81)
        assert truth.requests == 2

    def test_no_streams_no_figures(self) -> None:
        assert fa.server_figures({}, [1]).ttft_p50_ms is None


class TestTables:
    def test_pct_diff(self) -> None:
        assert fa.pct_diff(103.0, 100.0) == pytest.approx(3.0)
        assert fa.pct_diff(None, 100.0) is None
        assert fa.pct_diff(1.0, 0.0) is None

    def test_agreement_rows_flag_differences_over_3_percent_and_compare_with_the_server(self) -> None:
        ours = fa.ToolFigures(ttft_p50_ms=51.0, itl_p50_ms=10.0, output_tok_s=90.0, requests=20, errors=0)
        theirs = fa.ToolFigures(50.0, 10.0, 100.0, 20, 0, concurrency=4.0)
        truth = fa.ToolFigures(50.0, 10.0, 100.0, 20, 0, concurrency=4.0)
        rows = fa.agreement_rows([fa.AgreementCell(16, ours, theirs, truth, truth)])
        assert rows[0] == ["16", "median TTFT (ms)", "51.00", "50.00", "+2.0%", "yes", "50.00 (+2.0%)", "50.00 (+0.0%)"]
        assert rows[1][4:6] == ["+0.0%", "yes"]
        assert rows[2][:6] == ["16", "output throughput (tok/s)", "90.0", "100.0", "-10.0%", "NO"]
        assert rows[3] == ["16", "achieved concurrency", "-", "4.0", "-", "-", "4.0 (-)", "4.0 (+0.0%)"]

    def test_missing_guidellm_figures_print_as_dashes(self) -> None:
        ours = fa.ToolFigures(51.0, 10.0, 90.0, 20, 0)
        none = fa.ToolFigures(None, None, None, 0, 0)
        rows = fa.agreement_rows([fa.AgreementCell(1, ours, none, ours, none)])
        assert rows[0][3:6] == ["-", "-", "-"]

    def test_lag_rows_give_p50_and_p99(self) -> None:
        ours = fa.LagSamples((1.0, 3.0), (1.0, 3.0), (1.0,), (0.5,), 1, 0)
        theirs = fa.LagSamples((), (2.0, 4.0), (2.0,), (0.25,), 1, 0)
        (row,) = fa.lag_rows([(64, ours, theirs)])
        assert row == ["64", "2.00 / 2.98", "3.00 / 3.98", "2.00 / 2.98", "1.00 / 2.00", "0.50 / 0.25", "1 / 1"]

    def test_markdown_table(self) -> None:
        assert fa.markdown_table(["a", "b"], [["1", "2"]]) == "| a | b |\n| --- | ---: |\n| 1 | 2 |"

    def test_replace_section_appends_then_replaces_only_its_own_text(self) -> None:
        doc = "# Metrics\n\nintro\n\n## Other\n\nkeep me\n"
        once = fa.replace_section(doc, "Client fidelity (measured)", "table v1")
        assert once.endswith("## Client fidelity (measured)\n\ntable v1\n")
        doc2 = once + "\n## After\n\nalso kept\n"
        twice = fa.replace_section(doc2, "Client fidelity (measured)", "table v2")
        assert "table v1" not in twice and "table v2" in twice
        assert "keep me" in twice and "also kept" in twice
        assert twice.count("## Client fidelity (measured)") == 1


class TestSchedule:
    def test_request_alignment_starts_ttft_after_arrival(self) -> None:
        schedule = fs.Schedule(ttft_ms=50.0, itl_ms=10.0, align="request")
        assert schedule.first_send_ns(arrival_ns=123 * MS, origin_ns=0) == 173 * MS

    def test_step_alignment_rounds_up_to_the_next_decode_step(self) -> None:
        schedule = fs.Schedule(ttft_ms=50.0, itl_ms=10.0, align="step")
        assert schedule.first_send_ns(arrival_ns=123 * MS, origin_ns=0) == 180 * MS
        assert schedule.first_send_ns(arrival_ns=130 * MS, origin_ns=0) == 180 * MS
        assert schedule.first_send_ns(arrival_ns=1 * MS, origin_ns=1 * MS) == 51 * MS


@pytest.fixture
async def fidelity_url() -> AsyncIterator[tuple[str, object]]:
    server = fs.FidelityServer(fs.Schedule(ttft_ms=1.0, itl_ms=1.0, align="step"))
    async with serving(server.app()) as root:
        yield root.rstrip("/"), server


async def test_our_client_against_the_fidelity_server_matches_every_chunk(fidelity_url: tuple[str, object]) -> None:
    url, server = fidelity_url
    prompt = Prompt(prompt_id="p", category="c", api="completion", max_tokens=5, text="a b c")
    async with StreamingClient(url, model=fs.MODEL_ID, timeout_s=30) as client:
        records = await run_closed_loop(client, [prompt], Sampling(ignore_eos=True), concurrency=3, num_requests=6)
    streams = fa.parse_server_log({"streams": [s.as_json() for s in server.finished]})  # type: ignore[attr-defined]
    assert len(streams) == 6 and all(len(s.sent_ns) == 5 for s in streams.values())
    lags = fa.our_lags(records, streams)
    assert (lags.matched, lags.unmatched) == (6, 0)
    assert len(lags.every_chunk_ms) == 30
    assert min(lags.every_chunk_ms) >= 0.0  # causality on one clock: nothing is received before it was sent
    assert min(lags.request_path_ms) >= 0.0
    metrics = cell_metrics(records)
    assert metrics.output_tokens == 30 and metrics.errors == 0
    assert all(r.prompt_tokens == 3 for r in records)  # the server's word-count stand-in for a tokenizer


def test_diagnostic_row_gives_p50_and_p99_of_each_sample() -> None:
    lags = fa.LagSamples((1.0, 3.0), (2.0,), (1.0,), (5.0, 7.0), 1, 0)
    assert fa.diagnostic_row(64, "as shipped", lags) == [
        "64",
        "as shipped",
        "2.00 / 2.98",
        "2.00 / 2.00",
        "6.00 / 6.98",
    ]
