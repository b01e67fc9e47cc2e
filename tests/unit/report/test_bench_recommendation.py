"""`bench --url` measures one server it did not launch (issue 31 item 6): its report claims no win over a
baseline it never measured, draws no empty speed-up table and says why there is no command."""

from __future__ import annotations

from pathlib import Path

from builders import StoredRun, closed_loop_ms
from specfrontier.report import report_markdown
from specfrontier.report.tables import recommendation_lines

URL = "http://127.0.0.1:8000"


def test_a_one_server_run_says_what_it_measured_and_why_it_prints_no_command(tmp_path: Path) -> None:
    run = StoredRun(tmp_path / "s.db", "vllm", config={"bench": {"repeats": 2}})
    params = {"url": URL, "model": "m", "engine": "vllm", "keep_alive": True}
    # vLLM streams no per-request draft counts, so bench cannot tell from the warmup that it speculates.
    run.setting("vllm", params, speculative=False, status="done", capacity=4)
    for c in (1, 4):
        run.repeats("vllm", c, [closed_loop_ms(c, 8, 1000, 20)] * 2)
    data = run.data()
    ((head, command, note),) = recommendation_lines(data)
    assert "the only setting measured: nothing to compare it with" in head
    assert "no speculative setting beat" not in head
    assert command == f"(no command: the server at {URL} was measured as it runs; specfrontier did not launch it)"
    assert note == "" and "(no command recorded)" not in report_markdown(data)
    assert "Speedup vs baseline" not in report_markdown(data)
    run.close()
