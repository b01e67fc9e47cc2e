"""Serving one of the simulator's faces as a process: the loop both `sim.serve` (SGLang's interface) and
`sim.trtllm_serve` (trtllm-serve's) run, and the loopback check they share."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ipaddress
import signal
from collections.abc import Callable

from aiohttp import web

from specfrontier.sim.http_face import log

DEFAULT_PROFILE = "seed-qwen3.5-122b-a10b"
"""The profile a face serves when none is named."""
SHUTDOWN_TIMEOUT_S = 1.0
"""Seconds open streams get to finish after SIGTERM or SIGINT."""


def positive_float(text: str) -> float:
    """An argparse type: a float above 0."""
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
    return value


def non_negative_float(text: str) -> float:
    """An argparse type: a float of 0 or more."""
    value = float(text)
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {text}")
    return value


def add_simulator_options(parser: argparse.ArgumentParser, flag: Callable[[str], str], *, startup_help: str) -> None:
    """The simulator's own options, the same for every face, each spelled as the face's engine spells its
    flags (`flag("time-scale")`: `--time-scale` for SGLang's, `--sim_time_scale` for trtllm-serve's)."""
    sim = parser.add_argument_group("simulator")
    sim.add_argument(flag("profile"), default=DEFAULT_PROFILE, help=f"Simulator profile (default {DEFAULT_PROFILE}).")
    sim.add_argument(flag("workload"), default="synthetic", help="Workload class of the profile (acceptance, lengths).")
    sim.add_argument(flag("time-scale"), type=positive_float, default=1.0, help="Run X times faster than modelled.")
    sim.add_argument(flag("seed"), type=int, default=0, help="Seed of the sampled acceptance and output lengths.")
    sim.add_argument(flag("startup-s"), type=non_negative_float, default=0.2, help=startup_help)
    sim.add_argument(flag("allow-remote"), action="store_true", help="Allow binding a non-loopback host.")


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
