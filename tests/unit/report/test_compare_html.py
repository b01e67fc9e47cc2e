"""Compare two runs: per-cell significance from the repeats, the terminal tables and the HTML page."""

from __future__ import annotations

import base64
import re
from pathlib import Path

import pytest

from html_runs import HOSTILE_SETTING, build_run
from specfrontier.analysis import load_run
from specfrontier.analysis.compare import Comparison, compare_runs, figure_deltas, significant
from specfrontier.analysis.summary import OverRepeats
from specfrontier.report.compare import comparison_commands, comparison_tables
from specfrontier.report.compare_html import compare_html


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        (OverRepeats(10, 9, 11, 3), OverRepeats(13, 12, 14, 3), True),  # every B repeat above every A repeat
        (OverRepeats(10, 9, 11, 3), OverRepeats(7, 6, 8, 3), True),
        (OverRepeats(10, 9, 11, 3), OverRepeats(11.5, 10.5, 12, 3), False),  # ranges overlap: within the noise
        (
            OverRepeats(10, 10, 10, 1),
            OverRepeats(20, 20, 20, 1),
            False,
        ),  # one repeat: no spread known, never significant
    ],
)
def test_significance_needs_repeats_that_do_not_overlap(a: OverRepeats, b: OverRepeats, expected: bool) -> None:
    assert significant(a, b) is expected


@pytest.fixture(scope="module")
def cmp(tmp_path_factory: pytest.TempPathFactory) -> Comparison:
    folder = tmp_path_factory.mktemp("cmp")
    store_a, run_a = build_run(folder / "a.db")
    store_b, run_b = build_run(folder / "b.db")
    a, b = load_run(store_a, run_a), load_run(store_b, run_b)
    store_a.close()
    store_b.close()
    return compare_runs(a, b)


def test_identical_runs_have_no_significant_change(cmp: Comparison) -> None:
    deltas = figure_deltas(cmp.a, cmp.b, "per-request tok/s p50")
    assert len(deltas) == 3 * 3
    assert all(d.ratio == pytest.approx(1.0) and not d.significant for d in deltas)
    titles = [t.title for t in comparison_tables(cmp)]
    assert "per-request tok/s p50: A vs B" in titles and "TTFT p50 ms: A vs B" in titles


def test_compare_page_is_self_contained_escaped_and_has_its_plot(cmp: Comparison) -> None:
    page = compare_html(cmp)
    assert "<script" not in page.lower()
    assert "ngram&lt;b&gt;bold&lt;/b&gt;" in page and HOSTILE_SETTING not in page
    (b64,) = re.findall(r'src="data:image/svg\+xml;base64,([^"]+)"[^>]*data-plot="ratio"', page)
    assert "<svg" in base64.b64decode(b64).decode()
    assert "What changes from A to B" in page and "the best setting is the same at every shared concurrency" in page
    for attr in re.findall(r'\b(?:src|href)="([^"]*)"', page):
        assert attr.startswith("data:image/svg+xml;base64,")


def test_compare_cli_writes_html(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    from specfrontier.cli import main

    store, run_a = build_run(tmp_path / "s.db")
    store.close()
    store, run_b = build_run(tmp_path / "s.db")  # a second run in the same store
    store.close()
    target = tmp_path / "c.html"
    argv = ["specfrontier", "compare", run_a, run_b, "--store", str(tmp_path / "s.db"), "-f", "html", "-o", str(target)]
    monkeypatch.setattr(sys, "argv", argv)
    with pytest.raises(SystemExit) as done:
        main()
    assert done.value.code == 0 and target.read_text(encoding="utf-8").startswith("<!DOCTYPE html>")


def test_compare_prints_the_command_to_deploy_bs_choice_not_the_runs_own(tmp_path: Path) -> None:
    """Issue 30: compare prints the later run's choice as a command to deploy (the run's own port, host and
    --metrics left out and named), in the terminal and on the page."""
    store_a, run_a = build_run(tmp_path / "a.db")
    store_b, run_b = build_run(tmp_path / "b.db")
    for s in store_b.settings(run_b):
        launched = ("llama-server", "--host", "127.0.0.1", "--port", "4711", "-m", "m.gguf", "--metrics")
        store_b.update_setting(run_b, s.name, command=launched)
    cmp = compare_runs(load_run(store_a, run_a), load_run(store_b, run_b))
    store_a.close()
    store_b.close()
    commands = comparison_commands(cmp)
    assert commands and {best for r in cmp.recommendations if (best := r.best_b)} == {
        head.split(": ")[1] for head, _, _ in commands
    }
    for _head, command, note in commands:
        assert command == "llama-server -m m.gguf" and "--port 4711" in note and "--metrics" in note
    page = compare_html(cmp)
    assert set(re.findall(r'<pre class="command">([^<]*)</pre>', page)) == {"llama-server -m m.gguf"}
