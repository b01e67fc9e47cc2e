"""`specfrontier import` and `specfrontier plan`: tables measured elsewhere, and the performance model fitted
to a run."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from specfrontier.cli.app import (
    StoreOption,
    _existing_path,
    app,
    console,
    run_id_value,
)
from specfrontier.commands import command, store_args
from specfrontier.errors import ConfigError
from specfrontier.store import Store

if TYPE_CHECKING:  # annotations only: each command imports what it runs when it runs (a light --help)
    from specfrontier.perfmodel.decide import Decision
    from specfrontier.perfmodel.plan import Plan, RunCells


def run_import(path: Path, *, engine: str | None, store_path: Path, console: Console) -> str:
    """Validate the whole file first (nothing is written on an error), then store it as one run."""
    from specfrontier.runs.imported import load_table, store_table

    table = load_table(path, engine=engine)
    store = Store(store_path)
    try:
        run_id = store_table(store, table)
    finally:
        store.close()
    console.print(
        f"imported {len(table.cells)} cells of {len(table.settings)} settings ({escape(table.engine)}) from "
        f"{escape(str(path))} as run [bold]{run_id}[/bold] in {escape(str(store_path))}"
    )
    console.print(f"fit the model with: {escape(command('plan', run_id, *store_args(store_path)))}", soft_wrap=True)
    return run_id


def _num(x: float) -> str:
    """Three significant digits at any scale (1234, 123, 12.3, 1.23, 0.0123): a 0.04 tok/s figure is not
    shown as "0.0", nor an interval of 0.8-1.3 as "1-1"."""
    if abs(x) >= 100:
        return f"{x:.0f}"
    return f"{x:.3g}" if abs(x) < 1 else f"{x:.{2 - int(abs(x) >= 10)}f}"


def _fmt_interval(iv: tuple[float, float] | None) -> str:
    return "-" if iv is None else f"{_num(iv[0])}-{_num(iv[1])}"


def _answer(d: Decision) -> tuple[str, str, str]:
    """(setting, tok/s, from what) of one level's answer; a level the model does not separate names what to
    measure instead of a setting."""
    if d.choice is None:
        return "-", "-", escape(d.note)
    if d.predicted:
        lead = "" if d.lead_pct is None else f", {d.lead_pct:+.1f} % over the measured best"
        return escape(d.choice), _num(d.value or 0.0), f"predicted +/-{100 * (d.halfwidth or 0):.1f} %{lead}"
    return escape(d.choice), _num(d.value or 0.0), escape(d.note)


def print_plan(plan: Plan, run: RunCells, console: Console) -> None:
    """Terminal rendering: model summary, per-cell errors, frontier, max-depth choice."""
    kind = {"imported": "imported figures", "simulated": "SIMULATED cells (model output)", "measured": "measured"}
    console.print(
        f"[bold]plan for run {escape(run.run_id)}[/bold] ({escape(run.engine)}, {kind.get(run.kind, run.kind)}); "
        f"fitted on: {escape(', '.join(plan.fitted_settings))}"
        + (
            f"; held out at every setting: C = {', '.join(map(str, plan.held_out_concurrency))}"
            if plan.held_out_concurrency
            else ""
        )
    )
    console.print("Predictions below are MODEL outputs, not measurements.")
    for line in plan.model.describe():
        console.print(f"  {escape(line)}")
    cells = Table(
        title="predicted vs measured (per-request = decode tok/s of a running request, queue wait excluded; "
        "aggregate = output tok/s of the run's cell: closed loop, over its steady span)"
    )
    for col in ("setting", "C", "metric", "measured", "predicted", "interval", "error %", "fit"):
        cells.add_column(col, justify="left" if col in ("setting", "metric", "fit") else "right")
    for r in plan.rows:
        fit = "fit" if r.in_fit else "[bold]held out[/bold]"
        flags = f" ({', '.join(r.flags)})" if r.flags else ""
        cells.add_row(
            escape(r.setting), str(r.concurrency), r.metric.removesuffix("_tok_s").replace("_", "-") + flags,
            _num(r.measured), _num(r.predicted), _fmt_interval(r.interval), f"{r.error_pct:+.1f}", fit,
        )  # fmt: skip
    console.print(cells)
    for name, level, why in plan.unpredicted:
        console.print(f"  not predicted: {escape(name)} C={level}: {escape(why)}")
    for why in plan.contradictions:
        console.print(f"  [bold]contradicts the model's premises[/bold] (no fit passes near both): {escape(why)}")
    for in_fit, label in ((True, "fitted cells"), (False, "held-out cells")):
        errs = plan.errors(in_fit=in_fit)
        if errs:
            console.print(
                f"{label}: mean |error| {sum(errs) / len(errs):.1f} %, max {max(errs):.1f} % ({len(errs)} figures)"
            )
    front = Table(
        title="frontier per concurrency: the best fitted cell, unless an untested candidate is predicted above it "
        "beyond its stated error (untested = never measured)"
    )
    for col in ("C", "best aggregate", "agg tok/s", "from", "best per-request", "req tok/s", "from "):
        front.add_column(col, justify="right" if col in ("C", "agg tok/s", "req tok/s") else "left")
    for f in plan.frontier:
        front.add_row(str(f.concurrency), *_answer(f.aggregate), *_answer(f.per_request))
    console.print(front)
    for d in plan.depth:
        steps = ", ".join(
            f"C={dec.concurrency}: s={s} (B={p.batch}, cap {p.capacity or '-'}{', predicted' if dec.predicted else ''})"
            if s is not None and p is not None
            else f"C={dec.concurrency}: {'no speculation' if dec.choice else 'not separated'}"
            for dec, s, p in d.by_concurrency
        )
        console.print(f"capacity-aware depth {escape(f'[{d.family}]')}: {escape(steps)}")
        if d.max_depth is None:
            console.print(
                f"  -> no max depth to size for at peak C={d.peak_concurrency}: {escape(d.by_concurrency[-1][0].note)}"
            )
            continue
        why = (
            "engines reserve state for the maximum depth, so a deeper s_max costs running slots even when "
            "adaptive speculation uses fewer steps"
            if plan.model.capacity_law.kind == "hybrid-state"
            else "capacity does not depend on depth here, so this is the best depth at the peak"
        )
        console.print(f"  -> size the server for max depth {d.max_depth} at peak C={d.peak_concurrency}: {why}")


def run_plan(
    run_id: str,
    *,
    store_path: Path,
    fit_only: str | None,
    as_json: bool,
    console: Console,
    hold_out_concurrency: str | None = None,
) -> None:
    """Fit and print; the store is only read (opened read-only: it may be a file the user cannot write)."""
    from specfrontier.perfmodel.plan import make_plan, plan_json, run_cells

    store = Store(store_path, read_only=True)
    try:
        run = run_cells(store, run_id)
    finally:
        store.close()
    names = [n.strip() for n in fit_only.split(",") if n.strip()] if fit_only else None
    held = _levels(hold_out_concurrency) if hold_out_concurrency else ()
    plan = make_plan(run.cells, fit_only=names, hold_out_concurrency=held, rho=run.rho)
    if as_json:
        sys.stdout.write(json.dumps(plan_json(plan, run), indent=2) + "\n")
    else:
        print_plan(plan, run, console)


def _levels(text: str) -> tuple[int, ...]:
    """`--hold-out-concurrency 16,32` as levels; a precise error for anything else."""
    out = []
    for part in (p.strip() for p in text.split(",")):
        if not part.isdigit() or int(part) < 1:
            raise ConfigError(
                f"--hold-out-concurrency = {part!r}: not a concurrency level; fix: whole numbers >= 1, e.g. 16,32"
            )
        out.append(int(part))
    return tuple(out)


@app.command("import")
def import_(
    file: Annotated[Path, typer.Argument(help="CSV or JSON table of measurements (see docs/model.md).")],
    engine: Annotated[str | None, typer.Option("--engine", help="Engine of every row, when the file omits it.")] = None,
    store: StoreOption = Path("specfrontier.db"),
) -> None:
    """Import measurements made elsewhere (CSV/JSON, or the seed table) as a run, to fit with `plan`."""

    run_import(file, engine=engine, store_path=store, console=console)


@app.command()
def plan(
    run_id: Annotated[str, typer.Argument(help="Run id (measured, simulated or imported).", callback=run_id_value)],
    store: StoreOption = Path("specfrontier.db"),
    fit_only: Annotated[
        str | None, typer.Option("--fit-only", help="Fit only these settings (comma-separated); predict the rest.")
    ] = None,
    hold_out_concurrency: Annotated[
        str | None,
        typer.Option(
            "--hold-out-concurrency",
            help="Leave these levels out of the fit at every setting (comma-separated, e.g. 16,32); predict them.",
        ),
    ] = None,
    fmt: Annotated[str, typer.Option("--format", "-f", help="terminal or json.")] = "terminal",
) -> None:
    """Fit the performance model to a run: predicted vs measured, the predicted frontier, the max depth."""

    if fmt not in ("terminal", "json"):
        raise ConfigError(f"--format = {fmt!r}: not a plan format; fix: use terminal or json")
    run_plan(
        run_id,
        store_path=_existing_path(store),
        fit_only=fit_only,
        as_json=fmt == "json",
        console=console,
        hold_out_concurrency=hold_out_concurrency,
    )
