"""The HTML report as text: self-contained, strict CSP, every section present, run text escaped."""

from __future__ import annotations

import base64
import csv
import html
import io
import re
from pathlib import Path

import pytest

from html_runs import HOSTILE_SETTING, SCRIPT_TEXT, build_run
from specfrontier.analysis import load_run
from specfrontier.report.csv_export import report_csv
from specfrontier.report.html import csp_for, default_html_path, report_html, sample_outputs, write_html
from specfrontier.report.json_export import report_json
from specfrontier.store import Store


@pytest.fixture(scope="module")
def page(tmp_path_factory: pytest.TempPathFactory) -> str:
    store, run_id = build_run(tmp_path_factory.mktemp("html") / "s.db")
    path = write_html(store, run_id, default_html_path(store.path, run_id))
    assert path.name == f"s-{run_id}.html"
    text = path.read_text(encoding="utf-8")
    store.close()
    return text


def test_no_script_and_no_external_reference(page: str) -> None:
    assert "<script" not in page.lower()
    # every src/href is a data URI or an in-page anchor: the file opens offline
    for attr, value in re.findall(r'\b(src|href)="([^"]*)"', page):
        assert value.startswith(("data:image/svg+xml;base64,", "#")), (attr, value[:60])
    assert "http://" not in page.split("<main>")[0] and "https://" not in page.split("<main>")[0]


def test_csp_allows_only_the_inline_stylesheet_and_data_images(page: str) -> None:
    csp = re.search(r'http-equiv="Content-Security-Policy" content="([^"]+)"', page)
    assert csp is not None
    css = re.search(r"<style>(.*?)</style>", page, re.S)
    assert css is not None
    policy = html.unescape(csp.group(1))
    assert policy == csp_for(css.group(1))
    assert "default-src 'none'" in policy and "script-src" not in policy


def test_model_and_server_text_is_escaped(page: str) -> None:
    assert SCRIPT_TEXT not in page
    assert "&lt;script&gt;document.title=" in page  # the model's output, shown as text
    assert "ngram&lt;b&gt;bold&lt;/b&gt;" in page and HOSTILE_SETTING not in page
    assert "server said &lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "b1 &lt;script&gt;env&lt;/script&gt;" in page


def test_every_section_and_plot_is_present(page: str) -> None:
    for section in ("recommendation", "plots", "pareto", "crossover-map", "tables", "acceptance", "latency"):
        assert f'id="{section}"' in page
    for section in ("startup", "samples", "definitions", "environment"):
        assert f'id="{section}"' in page
    plots = dict(re.findall(r'src="data:image/svg\+xml;base64,([^"]+)"[^>]*data-plot="([^"]+)"', page))
    keys = set(plots.values())
    assert keys == {"per-request", "aggregate", "pareto", "acceptance", "slices", "startup"}
    for b64 in plots:
        svg = base64.b64decode(b64).decode()
        assert svg.lstrip().startswith("<?xml") and "<svg" in svg and "<path" in svg
    assert "llama-server -m m.gguf --alias draft-4" in page  # the exact launch command
    assert "per-request tok/s" in page and "acceptance_length" in page  # definitions
    assert "SIMULATED" not in page


def test_pareto_labels_frontier_points_and_crossover_map_per_workload(page: str) -> None:
    svg = next(
        base64.b64decode(b).decode()
        for b, k in re.findall(r'src="data:image/svg\+xml;base64,([^"]+)"[^>]*data-plot="([^"]+)"', page)
        if k == "pareto"
    )
    assert "draft-4 C=1" in svg  # the fastest-per-user cell is on the frontier and labelled
    crossover = page.split('id="crossover-map"')[1].split("</section>")[0]
    assert "builtin:cpu-mix|t=0.0" in crossover and "chat.jsonl|t=0.7" in crossover
    # decisions rank settings within one workload: tables and recommendations come per workload
    assert "builtin:cpu-mix|t=0.0|max=32|eos=natural: Aggregate tok/s" in page
    recommendation = page.split('id="recommendation"')[1].split("</section>")[0]
    assert "workload chat.jsonl|t=0.7|max=32|eos=natural: C = " in recommendation
    acceptance = page.split('id="acceptance"')[1].split("</section>")[0]
    assert "<td>0.7</td><td>2.00</td><td>40.0%</td>" in acceptance  # chat at t=0.7: 1 + 40/40, 40/100


def test_simulated_run_is_marked(tmp_path: Path) -> None:
    store = Store(tmp_path / "s.db")
    run_id = store.create_run(engine="sim", config={}, environment={"simulated": True, "time": "virtual"})
    page = report_html(load_run(store, run_id))
    assert page.count('class="simulated"') == 2 and "model prediction" in page
    assert "Nothing to recommend" in page
    store.close()


def test_samples_take_the_first_ok_output_per_setting(tmp_path: Path) -> None:
    store, run_id = build_run(tmp_path / "s.db")
    samples = sample_outputs(store, run_id)
    assert [s.setting for s in samples] == ["baseline", HOSTILE_SETTING, "draft-4"]
    assert all(s.text == SCRIPT_TEXT and s.prompt_id == "p0" for s in samples)
    store.close()


def test_csv_has_one_row_per_cell_matching_json(tmp_path: Path) -> None:
    store, run_id = build_run(tmp_path / "s.db")
    data = load_run(store, run_id)
    rows = list(csv.DictReader(io.StringIO(report_csv(data))))
    cells = report_json(data)["cells"]
    assert len(rows) == len(cells) == 3 * 2 * 3
    for row, cell in zip(rows, cells, strict=True):
        assert row["setting"] == cell["setting"]["name"] and row["run_id"] == run_id
        assert float(row["aggregate_tok_s"]) == pytest.approx(cell["aggregate_tok_s"])
        assert float(row["aggregate_tok_s_min"]) <= float(row["aggregate_tok_s"]) <= float(row["aggregate_tok_s_max"])
    store.close()
