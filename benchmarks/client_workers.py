"""Added client lag with 1 client process vs several (`client_workers`), on a local engine-like server.

Run: `.venv/bin/python benchmarks/client_workers.py [--streams 64,256] [--workers 1,2] [--tokens 100]`.

The server (a subprocess, 127.0.0.1, own process group) emits one token per stream on a shared 10 ms
tick, as a decoding engine does: every stream gets its token at the same moment, so the client has
to drain a burst of C events per tick (100 tok/s per stream). Each token's text is the server's
`perf_counter_ns()` taken just before the write; the client stamps each read with its own
`perf_counter_ns()`. Both are CLOCK_MONOTONIC (one system-wide clock on Linux), so receive - write is
the client's added lag plus loopback transit, per token. The client's own health figures (event-loop
lag and CPU, as stored per cell) are printed beside it.

Machines differ, so each multi-worker row is also given as a ratio to the 1-worker row measured in the
same run. No core pinning: the 2-core development box is shared, so the load average is printed and
the figures are only comparable within one run.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import numpy as np

TICK_S = 0.010


def _serve(port_file: str) -> None:
    """The server process: aiohttp on 127.0.0.1:0, one global ticker releasing every stream at once."""
    from aiohttp import web

    state: dict[str, asyncio.Event] = {"tick": asyncio.Event()}

    async def ticker() -> None:
        due = time.perf_counter()
        while True:
            due += TICK_S
            await asyncio.sleep(max(0.0, due - time.perf_counter()))
            event, state["tick"] = state["tick"], asyncio.Event()
            event.set()

    async def handle(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        tokens = int(body.get("max_tokens", 100))
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for _ in range(tokens):
            await state["tick"].wait()
            t = time.perf_counter_ns()
            await resp.write(b'data: {"choices":[{"index":0,"delta":{"content":"%d "},"finish_reason":null}]}\n\n' % t)
        await resp.write(
            b'data: {"choices":[{"index":0,"delta":{},"finish_reason":"length"}],'
            b'"usage":{"prompt_tokens":1,"completion_tokens":%d}}\n\ndata: [DONE]\n\n' % tokens
        )
        await resp.write_eof()
        return resp

    async def main() -> None:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", handle)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0, backlog=4096)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        with open(port_file + ".tmp", "w") as fh:
            fh.write(str(port))
        os.replace(port_file + ".tmp", port_file)
        tick_task = asyncio.create_task(ticker())
        await asyncio.Event().wait()
        tick_task.cancel()

    asyncio.run(main())


async def _measure(url: str, streams: int, workers: int, tokens: int) -> dict[str, float]:
    from specfrontier.load.client import StreamingClient
    from specfrontier.load.workers import measure_closed_loop
    from specfrontier.records import Prompt, Sampling

    prompt = Prompt(prompt_id="p", category="bench", api="chat", max_tokens=tokens, messages=(("user", "x"),))
    async with StreamingClient(url) as client:
        records, health = await measure_closed_loop(
            client, [prompt], Sampling(), concurrency=streams, num_requests=streams, workers=workers
        )
    lags = [
        (got - int(sent)) / 1e6 for r in records for got, sent in zip(r.chunk_ns, r.output_text.split(), strict=False)
    ]
    errors = sum(1 for r in records if not r.ok)
    arr = np.asarray(lags)
    return {
        "added_p50": float(np.percentile(arr, 50)),
        "added_p99": float(np.percentile(arr, 99)),
        "loop_p99": health.lag_p99_ms or 0.0,
        "cpu_max": max(health.cpu_fraction),
        "events_s": health.events_per_s or 0.0,
        "errors": float(errors),
        "saturated": float(health.saturated),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--streams", default="64,256")
    parser.add_argument("--workers", default="1,2")
    parser.add_argument("--tokens", type=int, default=100)
    args = parser.parse_args()
    port_file = os.path.join(tempfile.mkdtemp(prefix="specfrontier-bench-"), "port")
    server = subprocess.Popen(
        [sys.executable, __file__, "--serve", port_file], start_new_session=True, stdout=subprocess.DEVNULL
    )
    try:
        deadline = time.monotonic() + 30
        while not os.path.exists(port_file):
            if time.monotonic() > deadline or server.poll() is not None:
                raise SystemExit("benchmark server did not start")
            time.sleep(0.05)
        with open(port_file) as fh:
            url = f"http://127.0.0.1:{fh.read().strip()}"
        load = os.getloadavg()[0]
        print(f"load average {load:.2f} on {os.cpu_count()} CPUs; {args.tokens} tokens/stream at 100 tok/s")
        print(
            "streams workers loop    | added lag p50 ms  p99 ms | loop lag p99 ms | client CPU max "
            "| events/s | saturated"
        )
        for streams in (int(s) for s in args.streams.split(",")):
            base: dict[str, float] | None = None
            for workers in (int(w) for w in args.workers.split(",")):
                # 1 worker = in this process (standard asyncio); N > 1: worker processes, uvloop and asyncio
                for loop in ("asyncio",) if workers == 1 else ("uvloop", "asyncio"):
                    os.environ["SPECFRONTIER_WORKER_LOOP"] = loop
                    m = asyncio.run(_measure(url, streams, workers, args.tokens))
                    base = base or m
                    errors = f" errors={m['errors']:.0f}" if m["errors"] else ""
                    ratio = f"  (p99 x{m['added_p99'] / base['added_p99']:.2f} of 1 worker)" if workers > 1 else ""
                    print(
                        f"{streams:7d} {workers:7d} {loop:7s} | {m['added_p50']:16.2f} {m['added_p99']:7.2f} | "
                        f"{m['loop_p99']:15.2f} | {m['cpu_max']:13.0%} | {m['events_s']:8.0f} | "
                        f"{'yes' if m['saturated'] else 'no'}{errors}{ratio}"
                    )
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=10)
        shutil.rmtree(os.path.dirname(port_file), ignore_errors=True)


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--serve":
        _serve(sys.argv[2])
    else:
        main()
