"""Live progress of a sweep: what runs now, how many cells are left, an ETA, and the finished cells.

Why four modes: a person at a terminal wants a live view (a bar with ETA over all cells and a table of
finished cells); a log or CI wants one plain line per event; a script wants JSON lines it can parse
(`--events jsonl`); `--quiet` wants nothing but the final report. The sweep only calls `SweepEvents`;
this module decides how they look.

ETA = elapsed / finished cells x cells left: a setting's launch and warmup count into the elapsed time,
so the estimate includes them in proportion. It is an estimate, and the view says so ("ETA ~").
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import IO, Any, Literal

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.markup import escape
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from specfrontier.config import TuneConfig
from specfrontier.engines import Capacity
from specfrontier.engines.base import EngineSetting
from specfrontier.runs.cell import CellDone
from specfrontier.runs.sweep import SweepEvents
from specfrontier.store import REFERENCE_REPEAT, Store

Mode = Literal["live", "lines", "jsonl", "quiet"]
LIVE_ROWS = 12
"""Finished cells shown in the live table (the most recent ones): the view must fit a laptop terminal."""
HEARTBEAT_S = 20.0
"""Seconds between 'still launching' lines while a server starts (a vLLM launch takes 1-3 minutes)."""


def launched_program(argv: list[str]) -> str:
    """What a launch runs, for its progress line: the interpreter and module of `python -m MODULE` (which
    environment's Python matters), else the executable's name."""
    if len(argv) >= 3 and argv[1] == "-m":
        return f"{argv[0]} -m {argv[2]}"
    return Path(argv[0]).name if argv else "?"


def planned_cells(config: TuneConfig, store: Store | None = None, run_id: str | None = None) -> int:
    """Cells (setting x repeat x level) the sweep will measure: all of them, less those already stored."""
    levels = len(config.load.rates) if config.load.mode == "open" else len(config.concurrency)
    workloads = max(len(config.workloads), 1)  # `workloads:` measures each in its own cells
    settings = len(config.all_settings()) + (1 if config.verify_schedule else 0)  # + the measured schedule
    total = settings * config.repeats * levels * workloads
    if store is not None and run_id is not None:
        done = [*store.done_cells(run_id), *store.done_open_cells(run_id)]
        total -= sum(1 for key in done if key[3] != REFERENCE_REPEAT)  # the drift reference is added when it starts
    return max(total, 0)


def _eta_text(seconds: float | None) -> str:
    if seconds is None:
        return "ETA ~?"
    minutes, secs = divmod(round(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"ETA ~{hours}:{minutes:02d}:{secs:02d}" if hours else f"ETA ~{minutes}:{secs:02d}"


class SweepProgress:
    """Turns sweep events into a live view, plain lines or JSON lines; use as a context manager."""

    def __init__(
        self,
        console: Console,
        mode: Mode,
        total_cells: int,
        *,
        per_setting_cells: int = 0,
        out: IO[str] | None = None,
        clock: Callable[[], float] = time.monotonic,
        heartbeat_s: float = HEARTBEAT_S,
    ) -> None:
        self.console, self.mode, self.total = console, mode, total_cells
        self.per_setting = per_setting_cells
        self.out = out if out is not None else sys.stdout
        self.clock = clock
        self.heartbeat_s = heartbeat_s
        self._heartbeat: tuple[threading.Event, threading.Thread] | None = None
        self.started = clock()
        self.done = 0
        self.current = ""
        self.rows: list[list[str]] = []
        self._done_by_setting: dict[str, int] = {}
        """Cells finished per setting (settings run side by side on a Ray cluster)."""
        self._live: Live | None = None
        self.provisional: list[str] = []
        """The latest provisional answer (`on_provisional`), shown in the live view."""

    # -- figures -----------------------------------------------------------------------------------
    def eta_s(self) -> float | None:
        """Seconds left at the mean pace so far; None before the first cell."""
        if self.done == 0:
            return None
        left = max(self.total - self.done, 0)
        return (self.clock() - self.started) / self.done * left

    # -- lifecycle ---------------------------------------------------------------------------------
    def __enter__(self) -> SweepProgress:
        if self.mode == "live":
            self._live = Live(console=self.console, get_renderable=self._render, refresh_per_second=2, transient=False)
            self._live.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._stop_heartbeat()
        if self._live is not None:
            self._live.stop()
            self._live = None

    def finished(self, run_id: str, html: Path | None) -> None:
        """The run is over: JSON-lines mode says so (with the HTML report's path) as its last event."""
        self._emit("run_done", run_id=run_id, html=None if html is None else str(html), cells=self.done)

    # -- events ------------------------------------------------------------------------------------
    def events(self) -> SweepEvents:
        if self.mode == "quiet":
            return SweepEvents()
        return SweepEvents(
            self.on_start,
            self.on_ready,
            self.on_failed,
            self.on_cell,
            self.on_placed,
            self.on_relaunch,
            self.on_provisional,
            self.on_cells_dropped,
            self.on_reference_start,
        )

    def on_reference_start(self, setting: EngineSetting, cells: int) -> None:
        """The end-of-run drift reference: one more launch of the first setting, `cells` more cells."""
        self.total += cells
        self._emit("drift_reference_start", setting=setting.name, cells=cells, total=self.total)
        self._line(
            f"[bold]drift reference[/bold]: {escape(setting.name)} once more, at every level, on one more launch "
            "(its change since its own start is the run's drift)"
        )

    def on_relaunch(self, setting: EngineSetting, why: str) -> None:
        """The setting's server is launched again: say why before the second "launching" line."""
        self._emit("setting_relaunch", setting=setting.name, reason=why)
        self._line(f"  [yellow]relaunch[/yellow]: {escape(why)}")

    def on_cells_dropped(self, cells: int) -> None:
        """Levels settled early (the sequential rule): their remaining cells leave the plan and the ETA."""
        self.total = max(self.total - cells, self.done)
        self._emit("cells_dropped", cells=cells, total=self.total)
        self._line(f"  [dim]{cells} planned cell(s) not needed: their levels are settled[/dim]")

    def on_provisional(self, lines: list[str]) -> None:
        """The answer so far (an interleaved run, after each round from the second): shown at once, kept at
        the top of the live view until the next one; the final report may still change it."""
        self.provisional = lines
        self._emit("provisional_answer", recommendations=lines, done=self.done, total=self.total)
        self._line("[bold green]provisional answer[/bold green] (more repeats may change it):")
        for line in lines:
            self._line(f"  {escape(line)}")

    def on_placed(self, setting: EngineSetting, where: str) -> None:
        """A setting placed on a node of a cluster (Ray executor): which setting runs where."""
        self._emit("setting_placed", setting=setting.name, where=where)
        self._line(f"[bold]setting {escape(setting.name)}[/bold]: on {escape(where)}")

    def on_start(self, setting: EngineSetting, argv: list[str]) -> None:
        self.current = setting.name
        self._emit("setting_start", setting=setting.name, argv=argv)
        self._line(f"[bold]setting {escape(setting.name)}[/bold]: launching {escape(launched_program(argv))}")
        self._start_heartbeat(setting.name)

    def _start_heartbeat(self, name: str) -> None:
        """Until the server is ready (or fails), a line every `heartbeat_s` with the time since launch: a
        vLLM launch on 2 cores takes 1-3 minutes of compile warm-up with nothing else to show. Human-readable
        modes only (JSON lines are events, not ticks)."""
        self._stop_heartbeat()
        if self.mode not in ("live", "lines") or self.heartbeat_s <= 0:
            return
        stop, launched = threading.Event(), self.clock()

        def beat() -> None:
            while not stop.wait(self.heartbeat_s):
                waited = round(self.clock() - launched)
                self._line(
                    f"  [dim]still launching {escape(name)}: {waited // 60}:{waited % 60:02d} since launch, "
                    "waiting for the server to answer its health check[/dim]"
                )

        self._heartbeat = (stop, threading.Thread(target=beat, name="launch-heartbeat", daemon=True))
        self._heartbeat[1].start()

    def _stop_heartbeat(self) -> None:
        if self._heartbeat is not None:
            stop, thread = self._heartbeat
            stop.set()
            thread.join(5)
            self._heartbeat = None

    def on_ready(self, setting: EngineSetting, startup_s: float, capacity: Capacity) -> None:
        self._stop_heartbeat()
        self._emit("setting_ready", setting=setting.name, startup_s=startup_s, capacity=capacity.max_running_requests)
        self._line(f"  ready in {startup_s:.2f} s, capacity {capacity.max_running_requests} requests")
        if "WARNING" in capacity.source:  # e.g. SGLang's silent reset of max_running_requests to 48
            self._line(f"  [yellow]{escape(capacity.source.split('WARNING: ', 1)[1])}[/yellow]")

    def on_failed(self, setting: EngineSetting, message: str) -> None:
        self._stop_heartbeat()
        skipped = max(self.per_setting - self._done_by_setting.get(setting.name, 0), 0)
        self.total = max(self.total - skipped, self.done)  # its cells will not be measured
        self._emit("setting_failed", setting=setting.name, message=message)
        self._line(f"  [red]failed[/red]: {escape(message.splitlines()[0])} (recorded; continuing)")

    def on_cell(self, done: CellDone) -> None:
        if done.setting != self.current:  # a sweep without launch events (the virtual simulator)
            self._line(f"[bold]setting {escape(done.setting)}[/bold]")
            self.current = done.setting
        self.done += 1
        self._done_by_setting[done.setting] = self._done_by_setting.get(done.setting, 0) + 1
        m, c = done.metrics, done.counters
        accept = c.acceptance_rate if c is not None else None
        level = f"C={done.concurrency}" if done.request_rate is None else f"{done.request_rate:g} req/s"
        if "@" in done.workload:  # a `workloads:` key; the single-workload label is long and says nothing new
            level = f"{done.workload} {level}"
        self._emit(
            "cell_done",
            setting=done.setting,
            workload=done.workload,
            concurrency=done.concurrency,
            request_rate=done.request_rate,
            repeat=done.repeat,
            aggregate_tok_s=m.aggregate_tok_s,
            per_request_tok_s_p50=m.per_request_tok_s_p50,
            acceptance_rate=accept,
            errors=m.errors,
            done=self.done,
            total=self.total,
            eta_s=self.eta_s(),
        )
        agg = "-" if m.aggregate_tok_s is None else f"{m.aggregate_tok_s:.1f}"
        per = "-" if m.per_request_tok_s_p50 is None else f"{m.per_request_tok_s_p50:.1f}"
        rate = "-" if accept is None else f"{accept:.0%}"
        repeat = "ref" if done.repeat == REFERENCE_REPEAT else str(done.repeat + 1)
        self.rows.append([done.setting, level, repeat, agg, per, rate, str(m.errors)])
        errs = f", [red]{m.errors} errors[/red]" if m.errors else ""
        accept_text = "" if accept is None else f", accept {accept:.0%}"
        plan = f"  [dim]\\[{self.done}/{self.total} cells, {_eta_text(self.eta_s())}][/dim]" if self.total else ""
        speeds = f"{agg} tok/s aggregate, {per} tok/s per request"
        which = "drift reference" if done.repeat == REFERENCE_REPEAT else f"repeat {done.repeat + 1}"
        self._line(f"  {level} {which}: {speeds}{accept_text}{errs}{plan}")

    # -- output ------------------------------------------------------------------------------------
    def _emit(self, event: str, **fields: Any) -> None:
        if self.mode == "jsonl":
            self.out.write(json.dumps({"event": event, **fields}) + "\n")
            self.out.flush()

    def _line(self, markup: str) -> None:
        if self.mode == "lines":
            self.console.print(markup)
        elif self.mode == "live" and self._live is not None:
            self._live.console.print(markup)  # printed above the live view, which stays at the bottom
            self._live.refresh()  # redraw now: a synchronous sweep can starve the refresh thread

    def _render(self) -> RenderableType:
        elapsed = self.clock() - self.started
        head = Text.assemble(
            (f"{self.done}/{self.total} cells", "bold"),
            f"  elapsed {int(elapsed) // 60}:{int(elapsed) % 60:02d}  {_eta_text(self.eta_s())}",
            f"  now: {self.current}" if self.current else "",
        )
        table = Table(title=None, expand=False, padding=(0, 1))
        for i, name in enumerate(["setting", "level", "rep", "agg tok/s", "per-req tok/s", "accept", "err"]):
            table.add_column(name, justify="left" if i < 2 else "right")
        for row in self.rows[-LIVE_ROWS:]:
            table.add_row(*row)
        top = Table.grid()
        top.add_row(head)
        top.add_row(ProgressBar(total=max(self.total, 1), completed=self.done, width=60))
        for line in self.provisional:
            top.add_row(Text(f"provisional: {line}", style="green"))
        return Group(top, table)


def progress_mode(quiet: bool, events: str | None, console: Console) -> Mode:
    """`--quiet` wins; `--events jsonl` next; else live on a terminal and plain lines otherwise."""
    if quiet:
        return "quiet"
    if events == "jsonl":
        return "jsonl"
    return "live" if console.is_terminal else "lines"


__all__ = ["HEARTBEAT_S", "LIVE_ROWS", "Mode", "SweepProgress", "launched_program", "planned_cells", "progress_mode"]
