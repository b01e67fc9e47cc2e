"""Plots of a run as self-contained SVG documents (matplotlib, no network, no fonts to fetch).

Why SVG embedded as `<img src="data:image/svg+xml;base64,...">`: the HTML report must open offline,
and an SVG shown as an image can never run script, whatever text (setting names, workload labels)
ends up inside it; the page's Content-Security-Policy then needs only `img-src data:`.
Every function returns None when the run has nothing to draw, so the report shows no empty axes.

Figures are made with matplotlib's object API (`new_figure`), never pyplot, and cropped to a box measured
once (`svg_of`): the report is written at the end of every `tune`, so what it costs is part of every run.
"""

from __future__ import annotations

import base64
import io
from collections.abc import Callable

import matplotlib

matplotlib.use("Agg")  # no display: headless in CI too, should anything in the process import pyplot

from matplotlib.axes import Axes
from matplotlib.backends.backend_svg import RendererSVG
from matplotlib.figure import Figure as MplFigure
from matplotlib.transforms import Bbox

from specfrontier.analysis import CellSummary, OverRepeats, RunData
from specfrontier.analysis.frontier import frontier_points, gpu_count, workload_name

WIDTH_IN, HEIGHT_IN = 7.0, 3.6
"""About 670 x 345 CSS px: fits a laptop screen next to nothing else, no sideways scrolling."""

matplotlib.rcParams.update(
    {
        "svg.fonttype": "none",  # text stays text: smaller, and the browser draws it with a local font
        "svg.hashsalt": "specfrontier",  # deterministic ids: the same run renders the same file
        "font.size": 9,
        "axes.grid": True,
        "grid.alpha": 0.3,
    }
)


def new_figure(height_in: float) -> tuple[MplFigure, Axes]:
    """A figure of the report's width with one axes, made without pyplot: pyplot's import, its figure
    manager and the Agg canvas it creates are not needed to write an SVG, and a figure nothing registers
    is freed with its last reference (no close to forget)."""
    fig = MplFigure(figsize=(WIDTH_IN, height_in))
    return fig, fig.subplots()


def _tight_bbox(fig: MplFigure) -> Bbox:
    """The box `savefig(bbox_inches="tight")` would crop to, in inches, measured without the full draw it
    runs first (every artist laid out and "drawn" into a disabled renderer): the extents of the axes,
    their ticks, labels, legend and annotations are computed on their own, so each plot is drawn once
    instead of twice. Measured with the SVG renderer at its 72 dpi, as savefig measures it."""
    fig.set_dpi(72)
    # matplotlib ships no type hints for its SVG renderer
    renderer = RendererSVG(fig.bbox.width, fig.bbox.height, io.StringIO())  # type: ignore[no-untyped-call]
    box = fig.get_tightbbox(renderer)
    pad = float(matplotlib.rcParams["savefig.pad_inches"])
    return box.padded(pad, pad)


def svg_of(fig: MplFigure) -> str:
    """A figure as an SVG document, cropped to its content plus the usual padding (as `bbox_inches="tight"`)."""
    buf = io.StringIO()
    fig.savefig(buf, format="svg", bbox_inches=_tight_bbox(fig), metadata={"Date": None})
    return buf.getvalue()


def data_uri(svg: str) -> str:
    """An SVG document as a data URI for an `<img>` (base64: no quoting problems in the attribute)."""
    return "data:image/svg+xml;base64," + base64.b64encode(svg.encode("utf-8")).decode("ascii")


def _level_axis(ax: Axes, data: RunData) -> None:
    levels = data.concurrency_levels
    if not data.open_loop and levels and min(levels) > 0 and len(levels) > 1:
        ax.set_xscale("log", base=2)
        ax.set_xticks(list(levels))
        ax.set_xticklabels([f"{v:g}" for v in levels])
        ax.minorticks_off()
    ax.set_xlabel("request rate (req/s)" if data.open_loop else "concurrency C (log scale)")


def _workloads(data: RunData) -> list[str]:
    return sorted({c.workload for c in data.cells})


def _series(
    data: RunData, get: Callable[[CellSummary], OverRepeats]
) -> list[tuple[str, list[float], list[float], list[float], list[float]]]:
    """(label, levels, medians, lows, highs) per setting (and workload, when the run has several)."""
    many = len(_workloads(data)) > 1
    out = []
    for name in data.measured_settings():
        for workload in _workloads(data):
            cells = sorted(
                (c for c in data.cells if c.setting == name and c.workload == workload and get(c).median is not None),
                key=lambda c: c.level,
            )
            if not cells:
                continue
            label = f"{name} / {workload_name(workload)}" if many else name
            figs = [get(c) for c in cells]
            out.append(
                (
                    label,
                    [c.level for c in cells],
                    [f.median or 0.0 for f in figs],
                    [f.low if f.low is not None else f.median or 0.0 for f in figs],
                    [f.high if f.high is not None else f.median or 0.0 for f in figs],
                )
            )
    return out


def speed_vs_level(data: RunData, get: Callable[[CellSummary], OverRepeats], ylabel: str) -> str | None:
    """Median over repeats per setting vs the level, with the lowest..highest repeat as error bars."""
    series = _series(data, get)
    if not series:
        return None
    fig, ax = new_figure(HEIGHT_IN)
    for label, xs, med, low, high in series:
        yerr = [[m - lo for m, lo in zip(med, low, strict=True)], [h - m for m, h in zip(med, high, strict=True)]]
        ax.errorbar(xs, med, yerr=yerr, marker="o", capsize=3, label=label)
    _level_axis(ax, data)
    ax.set_ylabel(ylabel)
    ax.set_ylim(bottom=0)
    ax.legend(fontsize=8, loc="best")
    return svg_of(fig)


def pareto(data: RunData) -> str | None:
    """Per-user tok/s vs aggregate tok/s (per GPU when known); frontier points joined and labelled."""
    points = frontier_points(data)
    if not points:
        return None
    gpus = gpu_count(data)
    fig, ax = new_figure(HEIGHT_IN + 0.8)
    names = data.measured_settings()
    for name in names:
        mine = [p for p in points if p.setting == name]
        if mine:
            ax.scatter([p.per_user_tok_s for p in mine], [p.aggregate_tok_s for p in mine], label=name, alpha=0.8)
    for workload in sorted({p.workload for p in points}):
        front = sorted((p for p in points if p.on_frontier and p.workload == workload), key=lambda p: p.per_user_tok_s)
        ax.plot([p.per_user_tok_s for p in front], [p.aggregate_tok_s for p in front], "k--", linewidth=1)
        for p in front:
            ax.scatter([p.per_user_tok_s], [p.aggregate_tok_s], s=90, facecolors="none", edgecolors="black")
            ax.annotate(
                f"{p.setting} {data.level_text(p.level)}",
                (p.per_user_tok_s, p.aggregate_tok_s),
                textcoords="offset points",
                xytext=(5, 5),
                fontsize=7,
            )
    ax.set_xlabel("per-user tok/s (p50 per-request, median over repeats)")
    ax.set_ylabel(f"aggregate tok/s per GPU ({gpus} GPUs)" if gpus else "aggregate tok/s per server")
    ax.legend(fontsize=8, loc="best")
    return svg_of(fig)


def acceptance_bars(rows: list[tuple[str, str, float]]) -> str | None:
    """Acceptance length per (setting, workload x temperature) as grouped horizontal bars."""
    if not rows:
        return None
    groups = sorted({g for _, g, _ in rows})
    settings = list(dict.fromkeys(s for s, _, _ in rows))
    fig, ax = new_figure(max(1.6, 0.35 * len(settings) * len(groups) + 1.0))
    height = 0.8 / len(groups)
    for gi, group in enumerate(groups):
        ys, vals = [], []
        for si, name in enumerate(settings):
            value = next((v for s, g, v in rows if s == name and g == group), None)
            if value is not None:
                ys.append(si + gi * height)
                vals.append(value)
        ax.barh(ys, vals, height=height, label=group)
    ax.set_yticks([i + 0.4 - height / 2 for i in range(len(settings))])
    ax.set_yticklabels(settings)
    ax.set_xlabel("acceptance length (tokens per verification step, incl. the bonus token)")
    ax.legend(fontsize=8, loc="best")
    return svg_of(fig)


def slices_plot(data: RunData) -> str | None:
    """TTFT p99 per one-second slice, first repeat, at the highest level of each setting; spikes marked."""
    if not data.cells:
        return None
    top = max(data.concurrency_levels)
    fig, ax = new_figure(HEIGHT_IN)
    drew = False
    for c in data.cells:
        if c.level != top or not c.slices or not c.slices[0]:
            continue
        xs = [s.start_s for s in c.slices[0] if s.ttft_p99_ms is not None]
        ys = [s.ttft_p99_ms or 0.0 for s in c.slices[0] if s.ttft_p99_ms is not None]
        if not xs:
            continue
        many = len(_workloads(data)) > 1
        ax.plot(xs, ys, marker=".", label=f"{c.setting} / {workload_name(c.workload)}" if many else c.setting)
        drew = True
        spikes = [s for r, s in c.spikes if r == 0 and s.metric == "ttft"]
        if spikes:
            ax.scatter([s.start_s for s in spikes], [s.p99_ms for s in spikes], marker="x", s=60, color="red")
    if not drew:
        return None
    ax.set_xlabel(f"second of the window (repeat 1, {data.level_text(top)})")
    ax.set_ylabel("TTFT p99 in the slice (ms)")
    ax.legend(fontsize=8, loc="best")
    return svg_of(fig)


def startup_bars(data: RunData) -> str | None:
    """Seconds from spawn to healthy per launched setting."""
    rows = [(s.name, s.startup_s) for s in data.settings if s.startup_s is not None]
    if not rows:
        return None
    fig, ax = new_figure(max(1.4, 0.3 * len(rows) + 0.8))
    ax.barh([n for n, _ in rows], [v or 0.0 for _, v in rows])
    ax.invert_yaxis()
    ax.set_xlabel("startup s (spawn to healthy)")
    return svg_of(fig)


__all__ = [
    "WIDTH_IN",
    "acceptance_bars",
    "data_uri",
    "new_figure",
    "pareto",
    "slices_plot",
    "speed_vs_level",
    "startup_bars",
    "svg_of",
]
