"""The plots are drawn the cheap way (object API, one draw per figure) and come out as matplotlib's own
`savefig(bbox_inches="tight")` writes them: same bytes, so the report loses nothing for the speed."""

from __future__ import annotations

import io
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from matplotlib.figure import Figure

from specfrontier.analysis import RunData
from specfrontier.report import plots
from specfrontier.report.html import _acceptance_table


def _tight_savefig(fig: Figure) -> str:
    """The reference: matplotlib's own tight crop (a full draw to measure, then the draw that writes)."""
    buf = io.StringIO()
    fig.savefig(buf, format="svg", bbox_inches="tight", metadata={"Date": None})
    return buf.getvalue()


@pytest.fixture
def data(html_run_data: RunData) -> RunData:
    return html_run_data


def _every_plot(data: RunData) -> dict[str, Callable[[], str | None]]:
    _, bars = _acceptance_table(data)
    return {
        "per-request": lambda: plots.speed_vs_level(data, lambda c: c.per_request_tok_s_p50, "per-request tok/s"),
        "aggregate": lambda: plots.speed_vs_level(data, lambda c: c.aggregate_tok_s, "aggregate tok/s"),
        "pareto": lambda: plots.pareto(data),
        "acceptance": lambda: plots.acceptance_bars(bars),
        "slices": lambda: plots.slices_plot(data),
        "startup": lambda: plots.startup_bars(data),
    }


def test_every_plot_is_the_svg_a_tight_savefig_writes(data: RunData, monkeypatch: pytest.MonkeyPatch) -> None:
    ours = {key: draw() for key, draw in _every_plot(data).items()}
    monkeypatch.setattr(plots, "svg_of", _tight_savefig)
    reference = {key: draw() for key, draw in _every_plot(data).items()}
    assert all(svg is not None for svg in ours.values())
    for key, svg in ours.items():
        assert svg == reference[key], key


def test_drawing_the_report_never_imports_pyplot(tmp_path: Path) -> None:
    # a fresh interpreter: pyplot (its import, its figure manager, the Agg canvas) is not needed for an SVG
    code = (
        "import sys\n"
        "from html_runs import build_run\n"
        "from specfrontier.report.html import write_html\n"
        f"store, run_id = build_run(__import__('pathlib').Path({str(tmp_path / 's.db')!r}))\n"
        f"write_html(store, run_id, __import__('pathlib').Path({str(tmp_path / 'r.html')!r}))\n"
        "print('matplotlib.pyplot' in sys.modules)\n"
    )
    tests = Path(__file__).resolve().parents[2]
    done = subprocess.run([sys.executable, "-c", code], cwd=tests, capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"
