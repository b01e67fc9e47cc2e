"""Self-contained HTML report of a run: tables, plots, crossover map and the recommendation in one file.

Why one file with no script: it is attached to issues and opened from disk, offline. Plots are SVG data
URIs (report/plots.py); the only CSS is inline and pinned by hash in the Content-Security-Policy, which
otherwise forbids everything (no script, no fetch, no font, no frame). Jinja2 autoescaping escapes every
string that comes from the run (setting names, workload labels, server errors, model output), and the
CSP is the second wall: even an unescaped `<script>` could not run.
"""

from __future__ import annotations

import base64
import hashlib
import shlex
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import jinja2

from specfrontier.analysis import RunData, load_run
from specfrontier.analysis.frontier import (
    FrontierPoint,
    acceptance_by_workload,
    crossover_map,
    frontier_points,
    workload_name,
)
from specfrontier.metrics.specs import html_latency_columns
from specfrontier.metrics.timeslices import SPIKE_FACTOR
from specfrontier.report import plots
from specfrontier.report.bias import best_change_lines, workload_tables
from specfrontier.report.json_export import DEFINITIONS
from specfrontier.report.tables import (
    SIMULATED_NOTE,
    Table,
    all_tables,
    crossover_lines,
    engine_warning_lines,
    flag_lines,
    recommendation_lines,
    spike_lines,
)
from specfrontier.store import Store
from specfrontier.store.cell_requests import request_heads, request_texts
from specfrontier.textfiles import write_text_atomic

if TYPE_CHECKING:
    from specfrontier.traffic import TrafficAnswer

_TEMPLATES = Path(__file__).parent / "templates"
SAMPLE_CHARS = 600
"""Model text shown per sample: enough to judge the output, short enough to keep the page light."""

PLOT_WIDTH_PX = 680


@dataclass(frozen=True, slots=True)
class Plot:
    key: str
    title: str
    caption: str
    uri: str
    width: int = PLOT_WIDTH_PX


@dataclass(frozen=True, slots=True)
class SampleOutput:
    """One request's model output, shown so a reader can see what was generated (escaped)."""

    setting: str
    prompt_id: str
    text: str


def sample_outputs(store: Store, run_id: str) -> list[SampleOutput]:
    """The first ok request with text of each setting, in stored order."""
    seen: dict[str, SampleOutput] = {}
    for cell in store.cells(run_id):
        if cell.setting_id in seen or not cell.requests:
            continue
        heads = request_heads(cell.requests)  # a stored cell: its per-request columns, then its texts only
        sizes = heads.text_lengths.tolist()
        first = next((i for i, error in enumerate(heads.errors) if error is None and sizes[i] > 0), None)
        if first is not None:
            text = request_texts(cell.requests)[first]
            seen[cell.setting_id] = SampleOutput(cell.setting_id, heads.prompt_ids[first], text[:SAMPLE_CHARS])
    return list(seen.values())


def _views(data: RunData) -> list[tuple[str, RunData]]:
    """(heading prefix, one-workload view): decisions rank settings within one workload, so a
    multi-workload run gets each workload's own, named; a one-workload run reads as before."""
    return [(f"workload {w}: " if data.multi_workload else "", view) for w, view in data.workload_views()]


def _recommendations(data: RunData) -> list[tuple[str, str, str]]:
    return [
        (prefix + head, command, note)
        for prefix, view in _views(data)
        for head, command, note in recommendation_lines(view)
    ]


def _crossovers(data: RunData) -> list[str]:
    return [prefix + line for prefix, view in _views(data) for line in crossover_lines(view)]


def _workload_tables(data: RunData) -> list[Table]:
    """The seed-style tables, per workload on a multi-workload run (titles say which)."""
    if not data.multi_workload:
        return all_tables(data)
    return [
        replace(t, title=f"{workload}: {t.title}") for workload, view in data.workload_views() for t in all_tables(view)
    ]


def _environment(data: RunData) -> list[tuple[str, str]]:
    run = data.run
    rows = [("run", run.run_id), ("engine", run.engine), ("status", run.status), ("created", run.created_at)]
    rows += [("finished", run.finished_at or "-")]
    rows += [(k, "-" if v is None else str(v)) for k, v in sorted(run.environment.items())]
    for s in data.settings:
        rows.append((f"command: {s.name}", shlex.join(s.command) if s.command else "(not launched by specfrontier)"))
    return rows


def _plot(key: str, title: str, caption: str, svg: str | None) -> Plot | None:
    return None if svg is None else Plot(key, title, caption, plots.data_uri(svg))


def _speed_plots(data: RunData) -> list[Plot]:
    spread = "Points: median over repeats; bars: lowest to highest repeat."
    found = [
        _plot(
            "per-request",
            "Per-request tok/s vs load",
            "per-request tok/s = (output tokens - 1) / (end - first token), p50 over the window's requests "
            f"(the speed one user sees). {spread}",
            plots.speed_vs_level(data, lambda c: c.per_request_tok_s_p50, "per-request tok/s (p50)"),
        ),
        _plot(
            "aggregate",
            "Aggregate tok/s vs load",
            "aggregate tok/s = server-reported completion tokens / window (first send to last end): what the "
            f"server delivers to all users together. {spread}",
            plots.speed_vs_level(data, lambda c: c.aggregate_tok_s, "aggregate tok/s"),
        ),
    ]
    return [p for p in found if p is not None]


def _frontier_table(data: RunData) -> Table:
    pts = sorted((p for p in frontier_points(data) if p.on_frontier), key=lambda p: (p.workload, p.per_user_tok_s))

    def row(p: FrontierPoint) -> list[str]:
        return [
            workload_name(p.workload),
            p.setting,
            f"{p.level:g}",
            f"{p.per_user_tok_s:.1f}",
            f"{p.aggregate_tok_s:.1f}",
        ]

    return Table(
        "Frontier points",
        ["workload", "setting", data.level_header, "per-user tok/s", "aggregate tok/s"],
        [row(p) for p in pts],
        [
            "A cell is on the frontier when no other cell of the same workload has both a higher (or equal) "
            "per-user tok/s and a higher (or equal) aggregate tok/s. Per GPU when the GPU count is known."
        ],
    )


def _crossover_map_table(data: RunData) -> Table:
    entries = crossover_map(data)
    workloads = sorted({e.workload for e in entries})
    rows = []
    for level in data.concurrency_levels:
        row = [f"{level:g}"]
        for w in workloads:
            e = next((x for x in entries if x.workload == w and x.level == level), None)
            if e is None:
                row.append("-")
            else:
                row.append(e.setting + ("" if e.beyond_spread else f" (tie with {e.runner_up})"))
        rows.append(row)
    return Table(
        "Best setting per level and workload",
        [data.level_header, *workloads],
        rows,
        [
            "best = highest median aggregate tok/s; '(tie with X)' when the best's lowest repeat is not above "
            "the runner-up's highest repeat. Where the name changes down a column, the order of settings flips."
        ],
    )


def _acceptance_table(data: RunData) -> tuple[Table, list[tuple[str, str, float]]]:
    rows = acceptance_by_workload(data)
    table = Table(
        "Acceptance",
        ["setting", "workload", "temperature", "accept length", "accept rate"],
        [
            [
                r.setting,
                r.workload,
                r.temperature,
                "-" if r.length is None else f"{r.length:.2f}",
                "-" if r.rate is None else f"{r.rate:.1%}",
            ]
            for r in rows
        ],
        [
            "accept length = 1 + accepted draft tokens / verification steps; accept rate = accepted / drafted; "
            "counts pooled over every measured window of the setting on that workload (warmup excluded)."
        ],
    )
    bars = [(r.setting, f"{r.workload} t={r.temperature}", r.length) for r in rows if r.length is not None]
    return table, bars


def _latency_table(data: RunData) -> Table:
    def ms(value: float | None) -> str:
        return "-" if value is None else f"{value:.0f}"

    columns = html_latency_columns()  # declared in metrics.specs
    many = len({c.workload for c in data.cells}) > 1
    rows = []
    for c in sorted(data.cells, key=lambda c: (data.measured_settings().index(c.setting), c.workload, c.level)):
        name = f"{c.setting} / {workload_name(c.workload)}" if many else c.setting
        rows.append([name, f"{c.level:g}", *(ms(c.figure(metric).median) for metric, _ in columns)])
    return Table(
        "Latency percentiles",
        ["setting", data.level_header, *(header for _, header in columns)],
        rows,
        [
            "milliseconds; percentiles over the requests of one repeat's window, then the median over repeats. "
            "TTFT = first streamed chunk with text - send; TPOT = (end - first token) / (output tokens - 1)."
        ],
    )


def _capacity_table(data: RunData) -> Table:
    rows = [
        [
            s.name,
            s.status,
            "-" if s.capacity is None else str(s.capacity),
            s.capacity_source or "-",
            "-" if s.startup_s is None else f"{s.startup_s:.2f}",
            "-" if s.first_ttft_ms is None else f"{s.first_ttft_ms:.0f}",
            "-" if s.first_e2e_ms is None else f"{s.first_e2e_ms:.0f}",
            (s.error or "").splitlines()[0] if s.error else "",
        ]
        for s in data.settings
    ]
    return Table(
        "Capacity and startup per setting",
        ["setting", "status", "capacity", "capacity source", "startup s", "1st TTFT ms", "1st e2e ms", "error"],
        rows,
        [
            "capacity = max concurrent requests the running server reports (never assumed from flags); startup = "
            "seconds from spawn to healthy; 1st TTFT / e2e = the first request on the fresh server (cold start)."
        ],
    )


def _environment_engine() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(_TEMPLATES),
        autoescape=True,  # every run-derived string is escaped; never turn this off
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )


def csp_for(css: str) -> str:
    """Content-Security-Policy allowing exactly this stylesheet and data-URI images, nothing else."""
    digest = base64.b64encode(hashlib.sha256(css.encode("utf-8")).digest()).decode("ascii")
    return f"default-src 'none'; img-src data:; style-src 'sha256-{digest}'; base-uri 'none'; form-action 'none'"


def render_page(template: str, context: dict[str, Any]) -> str:
    """Render one of our templates with the shared stylesheet and its CSP (also used by the compare page)."""
    css = (_TEMPLATES / "report.css").read_text(encoding="utf-8")
    return _environment_engine().get_template(template).render(css=css, csp=csp_for(css), **context)


def _traffic(answer: TrafficAnswer | None) -> dict[str, Any] | None:
    """The traffic section (`report --traffic`): the answer's lines, the profile and each setting's gain."""
    if answer is None:
        return None
    from specfrontier.report.traffic import gain_plot, profile_plot, traffic_lines

    lines = traffic_lines(answer)
    gain_caption = (
        f"Day-weighted {answer.objective_name} of each setting and of the per-batch-size schedule, relative to "
        "the best static setting. Hatched: part of the weight rests on model predictions (bar: model error)."
    )
    return {
        "headline": lines[0],
        "lines": lines[1:],
        "plots": [
            _plot("traffic-profile", "Traffic profile", "Share of time at each load level.", profile_plot(answer)),
            _plot("traffic-gain", "Day-weighted gain", gain_caption, gain_plot(answer)),
        ],
    }


def report_html(data: RunData, samples: Sequence[SampleOutput] = (), traffic: TrafficAnswer | None = None) -> str:
    """The whole report as one HTML document (see the module docstring for why it is built this way);
    with `traffic`, a section answering for that load profile."""
    acceptance, bars = _acceptance_table(data)
    simulated = bool(data.run.environment.get("simulated"))
    pareto = _plot(
        "pareto",
        "Pareto frontier: per-user vs aggregate tok/s",
        "Each point is one cell (setting at one level, medians over repeats). Circled, joined and labelled: the "
        "frontier, the cells no other cell beats on both axes. Per GPU when the run states its GPU count.",
        plots.pareto(data),
    )
    context: dict[str, Any] = {
        "title": f"specfrontier run {data.run.run_id} ({data.run.engine})" + (" - SIMULATED" if simulated else ""),
        "simulated": simulated,
        "simulated_note": SIMULATED_NOTE,
        "engine_warnings": engine_warning_lines(data.run.environment),
        "nav": [
            ("recommendation", "Recommendation"),
            ("plots", "Speed"),
            ("pareto", "Pareto"),
            ("crossover-map", "Crossovers"),
            ("tables", "Tables"),
            ("acceptance", "Acceptance"),
            ("latency", "Latency"),
            ("startup", "Startup"),
            ("definitions", "Definitions"),
            ("environment", "Environment"),
        ],
        "traffic": _traffic(traffic),
        "recommendations": _recommendations(data) if data.cells else [],
        "crossovers": _crossovers(data),
        "flags": flag_lines(data),
        "speed_plots": _speed_plots(data),
        "pareto": pareto,
        "frontier_table": _frontier_table(data),
        "crossover_map": _crossover_map_table(data),
        "best_changes": best_change_lines(data),
        "tables": _workload_tables(data) + workload_tables(data),
        "acceptance": acceptance,
        "acceptance_plot": _plot(
            "acceptance",
            "Acceptance length",
            "Acceptance length (tokens per verification step incl. the bonus token) per setting, by workload and "
            "temperature; pooled over the setting's measured windows.",
            plots.acceptance_bars(bars),
        ),
        "latency": _latency_table(data),
        "slices_plot": _plot(
            "slices",
            "Time-sliced TTFT p99",
            f"TTFT p99 of the requests whose first token fell in each one-second slice (repeat 1, highest level); "
            f"red x: a spike (p99 > {SPIKE_FACTOR:g}x the repeat's median).",
            plots.slices_plot(data),
        ),
        "spikes": spike_lines(data, limit=20),
        "spike_factor": f"{SPIKE_FACTOR:g}",
        "startup_plot": _plot(
            "startup", "Startup time", "Seconds from spawn to a healthy server, per setting.", plots.startup_bars(data)
        ),
        "capacity": _capacity_table(data),
        "samples": list(samples),
        "sample_chars": SAMPLE_CHARS,
        "definitions": sorted(DEFINITIONS.items()),
        "environment": _environment(data),
    }
    if traffic is not None:
        context["nav"].insert(1, ("traffic", "Traffic"))
    return render_page("report.html.j2", context)


def write_html(
    store: Store,
    run_id: str,
    path: Path,
    data: RunData | None = None,
    *,
    what: str = "-o",
    traffic: TrafficAnswer | None = None,
) -> Path:
    """Render a stored run's report to `path` (written whole, then renamed: never a half-written file;
    `what` names where the path came from in the error if it cannot be written)."""
    data = data if data is not None else load_run(store, run_id)
    return write_text_atomic(path, report_html(data, sample_outputs(store, run_id), traffic), what)


def default_html_path(store_path: Path, run_id: str) -> Path:
    """`<store stem>-<run id>.html` next to the store: found where the results are."""
    return store_path.with_name(f"{store_path.stem}-{run_id}.html")


__all__ = ["SampleOutput", "csp_for", "default_html_path", "render_page", "report_html", "sample_outputs", "write_html"]
