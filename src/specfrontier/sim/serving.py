"""Serving one of the simulator's faces as a process: the loop both `sim.serve` (SGLang's interface) and
`sim.trtllm_serve` (trtllm-serve's) run, and the loopback check they share."""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import signal

from aiohttp import web

from specfrontier.sim.http_face import log

SHUTDOWN_TIMEOUT_S = 1.0
"""Seconds open streams get to finish after SIGTERM or SIGINT."""


def is_loopback(host: str) -> bool:
    """Whether binding `host` keeps the face on this machine (the faces refuse anything else by default)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


async def serve_app(
    app: web.Application, host: str, port: int, *, delay_s: float, delay_line: str, ready_line: str
) -> None:
    """Wait `delay_s` before listening (a model loading: connections are refused meanwhile), serve until
    SIGTERM or SIGINT, then close."""
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        if delay_s > 0:
            log(delay_line)
            await asyncio.sleep(delay_s)
        site = web.TCPSite(runner, host, port, shutdown_timeout=SHUTDOWN_TIMEOUT_S)
        await site.start()
        log(ready_line)
        await stop.wait()
    finally:
        with contextlib.suppress(Exception):
            await runner.cleanup()
