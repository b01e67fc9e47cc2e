"""What a lagging client does to the figure that decides: closed-loop cells against a server of known speed.

Run: `.venv/bin/python benchmarks/client_lag.py` (about 2 minutes; `--quick`: C = 16 only).

Why (issue 39, item 6): a cell whose client was "saturated" (event-loop lag p99 > 5 ms, or client CPU > 90%
of a core: `load.health`) was reported with a warning and still recommended. On a shared 2-core host the
lag flag alone fires in most cells (lag p99 5-12 ms measured with the client at 7-10% CPU: the process
waits for a core, as every process there does), so whether such a cell measures the server or the client
has to be measured, not assumed.

The server (`fidelity_server.py --align request`, its own process) sends every request's first chunk
TTFT after it arrived and then one chunk every ITL, whatever the load: with N tokens a request lives
TTFT + (N - 1) x ITL, and C users kept busy receive exactly C x N / lifetime tok/s: the truth. A client
that replaces a finished request late leaves the server idle and measures less than that; one that keeps
C in flight measures the truth, late reads or not.

The client (this process, one worker, the tool's own `measure_closed_loop` and `cell_metrics`) runs each
cell under an injected fault of its own process, a thread holding the GIL:
- `none`: nothing injected (the host's own contention only);
- `bursts-Xms`: the thread holds the GIL X ms every 200 ms (`sys.setswitchinterval(X ms)`): the loop is
  late by up to X ms at times while the process stays far below a core (host contention, GC pauses);
- `hog`: the thread never lets go (switch interval 20 ms): the process burns a core and every wake-up of
  the loop waits for it: a client that cannot keep up.
Printed per cell, over the client's steady span (`metrics.steady`): lag p99, client CPU, the requests the
SERVER had in flight (arrival to last chunk sent, from its own log: C when the client replaced every
finished request at once), the client's steady-state aggregate tok/s, the tokens the server sent inside
the same span per second (the truth of that span), the client's error against it, the server's rate
against its schedule (on a busy host the server slips too: that is the server's speed, not the client's
error), and the client's health flag.

Measured on the shared 2-core development machine (load average ~10 while it ran, 2026-12-05): client
error within +-1 % in all 12 cells; the server had in flight 0.99 of C = 1 (lag p99 4.6 ms), 15.72 of 16
(7.2 ms), 60.60 of 64 (19.2 ms), 62.30 of 64 (bursts-10ms, 21.0 ms), 15.51 of 16 (bursts-20ms, 25.8 ms),
14.81 of 16 (hog, 71.1 ms) and 55.56 of 64 (hog, 174.6 ms): a shortfall of at most 1.7 x lag p99 /
lifetime, which the evidence rule bounds (`analysis.summary.KEEP_UP_LAG_SHARE`, docs/reliability.md).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from specfrontier.load import StreamingClient
from specfrontier.load.workers import measure_closed_loop
from specfrontier.metrics.steady import steady_span
from specfrontier.metrics.window import cell_metrics
from specfrontier.records import Prompt, Sampling

TTFT_MS, ITL_MS, TOKENS = 50.0, 50.0, 12
"""A request lives 50 + 11 x 50 = 600 ms: the server of issue 39's bench example."""
LIFETIME_S = (TTFT_MS + (TOKENS - 1) * ITL_MS) / 1000.0
CELL_LIFETIMES = 8
HERE = Path(__file__).resolve().parent


@contextmanager
def fidelity_server() -> Iterator[str]:
    """The known-speed server in its own process group; its URL."""
    proc = subprocess.Popen(
        [
            *(sys.executable, str(HERE / "fidelity_server.py"), "--port", "0", "--align", "request"),
            *("--ttft-ms", str(TTFT_MS), "--itl-ms", str(ITL_MS), "--default-max-tokens", str(TOKENS)),
        ],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        yield f"http://127.0.0.1:{int(line.split('port=')[1])}"
    finally:
        os.killpg(proc.pid, 15)
        proc.wait(timeout=10)


@contextmanager
def injected(fault: str) -> Iterator[None]:
    """A thread of this process holding the GIL as `fault` says (module docstring)."""
    if fault == "none":
        yield
        return
    stop = threading.Event()
    hold_s = 0.02 if fault == "hog" else float(fault.removeprefix("bursts-").removesuffix("ms")) / 1000.0

    def hold() -> None:
        while not stop.is_set():
            until = time.perf_counter() + (3600.0 if fault == "hog" else hold_s)
            while time.perf_counter() < until and not (fault == "hog" and stop.is_set()):
                pass
            if fault != "hog":
                stop.wait(0.2 - hold_s)

    before = sys.getswitchinterval()
    sys.setswitchinterval(hold_s)
    thread = threading.Thread(target=hold, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(5)
        sys.setswitchinterval(before)


async def cell(url: str, concurrency: int, fault: str) -> list[str]:
    prompts = [Prompt(f"p{i}", "bench", "completion", TOKENS, text="x") for i in range(4)]
    sampling = Sampling(temperature=0.0, ignore_eos=True)
    lifetimes = CELL_LIFETIMES if concurrency > 1 else CELL_LIFETIMES / 2
    async with StreamingClient(url, model="fidelity-schedule") as client:
        with injected(fault):
            records, health = await measure_closed_loop(
                client,
                prompts,
                sampling,
                concurrency=concurrency,
                num_requests=2 * concurrency,
                min_duration_s=lifetimes * LIFETIME_S,
            )
    m = cell_metrics(records, concurrency)
    span = steady_span(records, concurrency)
    with urllib.request.urlopen(f"{url}/fidelity/log?clear=1", timeout=30) as resp:  # noqa: S310 (loopback, ours)
        streams = json.loads(resp.read())["streams"]
    agg = m.aggregate_tok_s or 0.0
    if span is None:
        return [fault, str(concurrency), f"{health.lag_p99_ms or 0.0:.1f}", f"{max(health.cpu_fraction):.0%}"] + [
            "no steady span"
        ] * 5
    start, end = span
    seconds = (end - start) / 1e9
    emitted = sum(1 for s in streams for t in s["sent_ns"] if start <= t < end) / seconds
    busy = sum(max(0, min(end, s["sent_ns"][-1]) - max(start, s["arrival_ns"])) for s in streams if s["sent_ns"]) / (
        end - start
    )
    return [
        fault,
        str(concurrency),
        f"{health.lag_p99_ms or 0.0:.1f}",
        f"{max(health.cpu_fraction):.0%}",
        f"{busy:.2f}",
        f"{agg:.1f}",
        f"{emitted:.1f}",
        f"{agg / emitted - 1:+.1%}",
        f"{emitted / (concurrency * TOKENS / LIFETIME_S) - 1:+.1%}",
        "saturated" if health.saturated else "ok",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="C = 16 only")
    parser.add_argument("--faults", default="none,bursts-10ms,bursts-20ms,hog")
    args = parser.parse_args()
    levels = (16,) if args.quick else (1, 16, 64)
    print(f"load average before: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    header = [
        "fault", "C", "lag p99 ms", "client CPU", "server in flight", "client tok/s", "server tok/s",
        "client error", "server vs schedule", "health",
    ]  # fmt: skip
    rows = []
    with fidelity_server() as url:
        for fault in args.faults.split(","):
            for c in levels:
                rows.append(asyncio.run(cell(url, c, fault)))
                print(" | ".join(rows[-1]), flush=True)
    print(f"load average after: {os.getloadavg()[0]:.1f}")
    print("| " + " | ".join(header) + " |\n|" + "---|" * len(header))
    for row in rows:
        print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
