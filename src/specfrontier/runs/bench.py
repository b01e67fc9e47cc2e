"""`specfrontier bench`: measure a server that is already running, with the same cells, metrics and store.

No launch and no stop: the server (llama-server, vLLM, SGLang or any OpenAI-compatible engine) belongs
to the user. The run holds one setting named after the server (no launch command, no startup time, no
cold start). What the server tells about itself is used where it answers and recorded with its source:
capacity from llama.cpp `/props` (total_slots) or SGLang `/server_info` (max_running_requests), else
"unknown"; acceptance from llama.cpp `/metrics` counter diffs around each window when that endpoint is
on, else from per-request stats in the stream (llama.cpp `timings`, SGLang `meta_info`), else none.

Order: the URL and every option are checked first (ConfigError naming the option and the fix), then the
server is probed (EngineError if it does not answer), and only then is the store opened.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import platform
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import aiohttp

import specfrontier
from specfrontier.config.common import DEFAULT_CELL_LIFETIMES
from specfrontier.config.limits import MAX_CLIENT_WORKERS, MAX_CONCURRENCY, MAX_RATE, MAX_REQUEST_TIMEOUT_S
from specfrontier.engines.base import Capacity, EngineAdapter
from specfrontier.engines.registry import specs
from specfrontier.errors import ConfigError, EngineError, EngineResponseError, SpecFrontierError
from specfrontier.load import StreamingClient, run_closed_loop
from specfrontier.load.workers import (
    ClientWorkers,
)
from specfrontier.records import Prompt, RequestSpecStats, Sampling, SpecCounters
from specfrontier.runs.cell import CellLoad, measure_cell, require_evidence
from specfrontier.runs.pacing import CellSizer
from specfrontier.runs.running import watch_running
from specfrontier.store import Store
from specfrontier.workloads import load_prompts
from specfrontier.workloads.resolve import ResolvedWorkload

_PROBE_TIMEOUT = aiohttp.ClientTimeout(total=10)
METRICS_SOURCE = "the server's /metrics counter diff around the window"


def server_root(url: str) -> str:
    """The server root from --url (a trailing `/v1` or `/` is dropped); ConfigError if it is not one."""
    parts = urlsplit(url.strip())
    fix = "fix: pass the server's base URL, e.g. --url http://127.0.0.1:8080"
    if parts.scheme not in ("http", "https"):
        raise ConfigError(f"--url = {url!r}: scheme {parts.scheme or '(none)'!r} is not http or https; {fix}")
    if not parts.hostname:
        raise ConfigError(f"--url = {url!r}: no host; {fix}")
    try:
        port = parts.port
    except ValueError as exc:
        raise ConfigError(f"--url = {url!r}: bad port ({exc}); {fix}") from exc
    if parts.query or parts.fragment or parts.username or parts.password:
        raise ConfigError(f"--url = {url!r}: query, fragment or credentials are not allowed; {fix}")
    path = parts.path.rstrip("/").removesuffix("/v1").rstrip("/")
    if path.endswith(("/chat/completions", "/completions")):
        raise ConfigError(f"--url = {url!r}: an endpoint, not the server root; {fix}")
    netloc = parts.hostname if port is None else f"{parts.hostname}:{port}"
    if ":" in parts.hostname:  # IPv6 literal
        netloc = f"[{parts.hostname}]" + ("" if port is None else f":{port}")
    return f"{parts.scheme}://{netloc}{path}"


def parse_levels(text: str | None, option: str, kind: type[int] | type[float]) -> tuple[Any, ...]:
    """'1,16,64' -> (1, 16, 64), sorted and unique; ConfigError naming the option otherwise."""
    if text is None:
        return ()
    values = []
    for item in text.split(","):
        try:
            value = kind(item.strip())
        except ValueError:
            raise ConfigError(
                f"{option} = {text!r}: {item.strip()!r} is not a {'whole number' if kind is int else 'number'}; "
                f"fix: pass a comma-separated list, e.g. {option} {'1,16,64' if kind is int else '1,2.5,4'}"
            ) from None
        if not value > 0 or (isinstance(value, float) and not math.isfinite(value)):
            raise ConfigError(f"{option} = {text!r}: {item.strip()!r} must be > 0; fix: use positive values")
        values.append(value)
    return tuple(sorted(set(values)))


@dataclass(frozen=True, slots=True)
class BenchOptions:
    """Everything `bench` needs, checked by `validate` before any network traffic."""

    url: str
    concurrency: tuple[int, ...] = ()
    rates: tuple[float, ...] = ()
    burstiness: float = 1.0
    duration_s: float | None = None
    requests: int | None = None
    warmup_s: float = 0.0
    cooldown_s: float = 0.0
    max_in_flight: int | None = None
    seed: int = 0
    model: str | None = None
    api: str | None = None
    """chat or completion; None: each prompt's own."""
    prompts: str = "builtin:cpu-mix"
    max_tokens: int = 48
    temperature: float = 0.0
    ignore_eos: bool = False
    repeats: int = 3
    rounds_per_cell: int = 2
    cell_duration_s: float | None = None
    """Closed loop: with `cell_lifetimes`, the longest a cell sends (seconds); alone, how long every cell
    sends (whole passes go on until then)."""
    cell_lifetimes: float | None = None
    """Closed loop: send for this many request lifetimes (C = 1: half as many), as `tune` sizes its cells
    (`runs.pacing.CellSizer`); None: DEFAULT_CELL_LIFETIMES unless `--cell-duration` is given alone."""
    warmup_rounds: int = 1
    max_client_lag_share: float | None = None
    """The evidence rule's bound on the client's lag (`--max-client-lag-share`; None: the default, as tune's)."""
    request_timeout_s: float = 300.0
    max_consecutive_timeouts: int = 3
    """Requests in a row that may time out before the server is taken as stalled and the run stops."""
    client_workers: ClientWorkers = "auto"
    """Client processes per cell: a number or 'auto' (see `specfrontier.load.workers`)."""
    keep_alive: bool | None = None
    """Reuse connections between requests; None: as `tune` does for the detected engine (see `keep_alive`)."""
    store: Path = Path("specfrontier.db")
    root: str = field(default="", init=False)

    @property
    def open_loop(self) -> bool:
        return bool(self.rates)

    @property
    def lifetimes(self) -> float | None:
        """How many request lifetimes a closed-loop cell sends for: `--cell-lifetimes`, else tune's default
        (DEFAULT_CELL_LIFETIMES) unless `--cell-duration` alone fixes the length (None)."""
        if self.cell_lifetimes is not None or self.cell_duration_s is not None:
            return self.cell_lifetimes
        return DEFAULT_CELL_LIFETIMES

    def validate(self) -> BenchOptions:
        """Check every option (ConfigError naming it and the fix); returns self with the server root set."""
        object.__setattr__(self, "root", server_root(self.url))
        if self.concurrency and self.rates:
            raise ConfigError("--concurrency and --rate both given; fix: pass one (closed loop or open loop)")
        if not self.concurrency and not self.rates:
            raise ConfigError("neither --concurrency nor --rate given; fix: pass e.g. --concurrency 1,16,64")
        if self.open_loop and (self.duration_s is None) == (self.requests is None):
            raise ConfigError("--rate needs exactly one of --duration or --requests; fix: pass one of them")
        if not self.open_loop and (self.duration_s is not None or self.requests is not None):
            raise ConfigError("--duration/--requests apply to --rate only; fix: drop them or pass --rate")
        checks: list[tuple[bool, str, str]] = [
            (self.api in (None, "chat", "completion"), f"--api = {self.api!r}", "use chat or completion"),
            (self.burstiness > 0, f"--burstiness = {self.burstiness}", "must be > 0 (1 = Poisson)"),
            (self.duration_s is None or self.duration_s > 0, f"--duration = {self.duration_s}", "must be > 0"),
            (self.requests is None or self.requests >= 2, f"--requests = {self.requests}", "must be >= 2"),
            (self.warmup_s >= 0 and self.cooldown_s >= 0, "--warmup-s/--cooldown-s", "must be >= 0"),
            (self.max_in_flight is None or self.max_in_flight >= 1, "--max-in-flight", "must be >= 1"),
            (self.max_tokens >= 1, f"--max-tokens = {self.max_tokens}", "must be >= 1"),
            (1 <= self.repeats <= 50, f"--repeats = {self.repeats}", "must be 1..50"),
            (self.rounds_per_cell >= 1, f"--rounds = {self.rounds_per_cell}", "must be >= 1"),
            (
                self.cell_duration_s is None or self.cell_duration_s > 0,
                f"--cell-duration = {self.cell_duration_s}",
                "must be > 0",
            ),
            (
                self.cell_lifetimes is None or 4 <= self.cell_lifetimes <= 1000,
                f"--cell-lifetimes = {self.cell_lifetimes}",
                "must be 4..1000 (a steady span needs 4 request lifetimes; tune's limit too)",
            ),
            (self.warmup_rounds >= 0, f"--warmup-rounds = {self.warmup_rounds}", "must be >= 0"),
            (
                self.max_client_lag_share is None
                or (math.isfinite(self.max_client_lag_share) and 0 < self.max_client_lag_share <= 10),
                f"--max-client-lag-share = {self.max_client_lag_share}",
                "must be above 0 and at most 10 (a share of the request lifetime)",
            ),
            (
                math.isfinite(self.request_timeout_s) and 0 < self.request_timeout_s <= MAX_REQUEST_TIMEOUT_S,
                f"--request-timeout = {self.request_timeout_s:g}",
                f"must be a finite number of seconds above 0 and at most {MAX_REQUEST_TIMEOUT_S:g} (tune's limit too)",
            ),
            (
                self.client_workers == "auto" or (isinstance(self.client_workers, int) and self.client_workers >= 1),
                f"--client-workers = {self.client_workers!r}",
                "must be a whole number >= 1 or auto",
            ),
        ]
        for ok, what, rule in checks:
            if not ok:
                raise ConfigError(f"{what}: {rule}; fix: pass a valid value")
        self._check_limits()
        if self.duration_s is not None and self.warmup_s + self.cooldown_s >= self.duration_s:
            raise ConfigError(
                f"--warmup-s + --cooldown-s = {self.warmup_s + self.cooldown_s}: leaves nothing of --duration "
                f"{self.duration_s} to measure; fix: lower them or raise --duration"
            )
        return self

    def _check_limits(self) -> None:
        """The upper bounds `tune` applies to the same quantities (config.limits), so that a load `tune`
        refuses is not accepted here either."""
        top_c = max(self.concurrency, default=0)
        if top_c > MAX_CONCURRENCY:
            raise ConfigError(
                f"--concurrency = {top_c}: more than {MAX_CONCURRENCY} clients (tune's limit too); "
                f"fix: pass levels from 1 to {MAX_CONCURRENCY}"
            )
        top_rate = max(self.rates, default=0.0)
        if top_rate > MAX_RATE:
            raise ConfigError(
                f"--rate = {top_rate:.12g}: more than {MAX_RATE:g} req/s (tune's limit too); "
                f"fix: pass rates up to {MAX_RATE:g}"
            )
        if self.max_in_flight is not None and self.max_in_flight > MAX_CONCURRENCY:
            raise ConfigError(
                f"--max-in-flight = {self.max_in_flight}: more than {MAX_CONCURRENCY} (tune's limit too); "
                f"fix: pass a cap from 1 to {MAX_CONCURRENCY}"
            )
        if isinstance(self.client_workers, int) and self.client_workers > MAX_CLIENT_WORKERS:
            raise ConfigError(
                f"--client-workers = {self.client_workers}: more than {MAX_CLIENT_WORKERS} processes "
                f"(tune's limit too); fix: pass a number from 1 to {MAX_CLIENT_WORKERS}, or auto"
            )

    def workload_label(self) -> str:
        eos = "ignore" if self.ignore_eos else "natural"
        return f"{self.prompts}|t={self.temperature}|max={self.max_tokens}|eos={eos}"


@dataclass(frozen=True, slots=True)
class ServerFacts:
    """What the running server said about itself (each with where it was read)."""

    engine: str
    """The recognising adapter's label (e.g. 'llama.cpp', 'sglang'), or 'openai-compatible' when no
    registered adapter recognised the server."""
    model: str | None
    capacity: Capacity | None
    capacity_source: str
    version: str
    adapter: type[EngineAdapter[Any]] | None = None
    """The adapter that recognised the server: its stream stats, request fields, counters, keep-alive."""
    running_limit_read: bool = True
    """False where `capacity` is an upper bound only (`Detected.running_limit_read`)."""


async def probe_server(session: aiohttp.ClientSession, root: str, model: str | None) -> ServerFacts:
    """Check the server answers (`/v1/models`), then ask every registered adapter whether it recognises
    the server (`EngineAdapter.detect`): the first that does names the engine and its capacity."""
    try:
        async with session.get(f"{root}/v1/models") as resp:
            if resp.status >= 400 and resp.status != 404:
                raise EngineResponseError(
                    f"--url = {root!r}: GET /v1/models answered {resp.status}; "
                    "fix: check the URL points at an OpenAI-compatible server that is ready"
                )
            models = await resp.json(content_type=None) if resp.status == 200 else None
    except (aiohttp.ClientError, OSError, TimeoutError) as exc:
        raise EngineError(
            f"--url = {root!r}: no answer ({type(exc).__name__}: {exc}); fix: start the server or correct --url"
        ) from exc
    if model is None and isinstance(models, Mapping):
        data = models.get("data")
        if isinstance(data, list) and data and isinstance(data[0], Mapping) and isinstance(data[0].get("id"), str):
            model = data[0]["id"]
    for spec in specs():
        if not spec.detectable:
            continue
        found = await spec.adapter.detect(session, root)
        if found is not None:
            return ServerFacts(
                spec.adapter.label(),
                model,
                found.capacity,
                found.capacity_source,
                found.version,
                spec.adapter,
                found.running_limit_read,
            )
    asked = ", ".join(s.adapter.label() for s in specs() if s.detectable)
    return ServerFacts("openai-compatible", model, None, f"unknown (no engine recognised it: {asked})", "?")


def _detected(engine: str) -> type[EngineAdapter[Any]] | None:
    return next((s.adapter for s in specs() if s.detectable and s.adapter.label() == engine), None)


def any_spec_stats(chunk: Mapping[str, Any]) -> RequestSpecStats | None:
    """Per-request speculative stats in whichever registered engine's form the chunk carries them."""
    for spec in specs():
        found = spec.adapter.request_spec_stats(chunk)
        if found is not None:
            return found
    return None


def keep_alive(engine: str) -> bool:
    """Whether to reuse connections with this engine: what its adapter tells `tune` (`keep_alive`); an
    engine no adapter recognised gets the default (reuse)."""
    adapter = _detected(engine)
    return adapter.keep_alive if adapter is not None else EngineAdapter.keep_alive


def request_extras(engine: str) -> dict[str, Any]:
    """Engine-specific body fields, as `tune` sends them (the adapter's `request_extras`)."""
    adapter = _detected(engine)
    return adapter.request_extras() if adapter is not None else {}


async def _metrics_counters(session: aiohttp.ClientSession, root: str, engine: str) -> SpecCounters | None:
    """The server's cumulative counters, where its adapter reads some; None when it has none or they
    cannot be read (a server launched without its metrics endpoint)."""
    adapter = _detected(engine)
    if adapter is None:
        return None
    try:
        return await adapter.spec_counters(session, root)
    except (EngineResponseError, aiohttp.ClientError, OSError, TimeoutError):
        return None


TOKENS_NOTE_KEY = "output_tokens"
"""The run environment's note on how output tokens were counted, when not from the server's `usage`."""


def tokens_from_chunks_note(root: str) -> str:
    """Why a bench run's token counts are chunk counts, and how to get exact ones."""
    return (
        f"output tokens counted as one per streamed chunk: {root} sends no `usage` in its streams (a lower bound "
        "when it speculates: one chunk can carry several tokens); fix: have the server honour "
        "stream_options.include_usage (vLLM, SGLang and llama.cpp do) for exact counts"
    )


def _environment(facts: ServerFacts) -> dict[str, Any]:
    return {
        "specfrontier": specfrontier.__version__,
        "engine_version": facts.version,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "simulated": False,
        "time_scale": 1.0,
        "external_server": True,
    }


class Bench:
    """One `bench` run: probe, warm up, measure every (repeat, level) cell, store; no launch, no stop."""

    def __init__(self, options: BenchOptions, facts: ServerFacts, prompts: list[Prompt], store: Store) -> None:
        self.o, self.facts, self.prompts, self.store = options, facts, prompts, store
        self.sampling = Sampling(temperature=options.temperature, ignore_eos=options.ignore_eos)
        self.setting = f"{facts.engine}@{urlsplit(options.root).netloc}"
        self.on_cell_done: Any = None
        self.sizer = CellSizer(options.lifetimes, options.cell_duration_s, cap_name="--cell-duration")
        """Each closed-loop cell's length from the measured request lifetime, as `tune` sizes its cells."""

    def warmup_concurrency(self, top: int) -> int:
        """The warm-up's concurrency: the top level, or, where the server's capacity is only an upper bound
        (vLLM without `max_num_seqs`), twice it (at most that bound + 1), so requests wait if the server
        admits fewer than that and its live gauges show the limit it runs (`RunningPeak.describe`)."""
        cap = self.facts.capacity
        if self.facts.running_limit_read or cap is None or top >= cap.max_running_requests:
            return top
        return min(2 * top, cap.max_running_requests + 1)

    def new_run(self) -> str:
        o = self.o
        config = {
            "bench": {
                "url": o.root,
                "model": self.facts.model,
                "concurrency": list(o.concurrency),
                "rates": list(o.rates),
                "burstiness": o.burstiness,
                "duration_s": o.duration_s,
                "requests": o.requests,
                "warmup_s": o.warmup_s,
                "cooldown_s": o.cooldown_s,
                "max_in_flight": o.max_in_flight,
                "seed": o.seed,
                "repeats": o.repeats,
                "rounds_per_cell": o.rounds_per_cell,
                "cell_duration_s": o.cell_duration_s,
                "cell_lifetimes": o.lifetimes,
                "warmup_rounds": o.warmup_rounds,
                "max_client_lag_share": o.max_client_lag_share,
                "request_timeout_s": o.request_timeout_s,
                "workload": {"prompts": o.prompts, "api": o.api, "max_tokens": o.max_tokens},
            }
        }
        return self.store.create_run(engine=self.facts.engine, config=config, environment=_environment(self.facts))

    async def run(self, run_id: str) -> None:
        """Measure every cell; the run ends done, interrupted, or (a server failure: every request of a
        window failed, or it stopped answering) incomplete when some cells were stored, else failed."""
        try:
            await self._run(run_id)
        except (asyncio.CancelledError, KeyboardInterrupt):
            self._mark(run_id, "interrupted", "interrupted")
            raise
        except EngineError as exc:
            stored = self.store.done_cells(run_id) or self.store.done_open_cells(run_id)
            self._mark(run_id, "incomplete" if stored else "failed", "failed", str(exc))
            raise
        except BaseException as exc:
            self._mark(run_id, "failed", "failed", f"{type(exc).__name__}: {exc}")
            raise
        self.store.set_run_status(run_id, "done")

    def _mark(self, run_id: str, status: str, setting_status: str, error: str | None = None) -> None:
        """Set the run's status, and its setting's (a setting left `running` reads as still measuring),
        on the way out of an error without hiding it (the store may be the error)."""
        with contextlib.suppress(SpecFrontierError):
            self.store.set_run_status(run_id, status)
            self.store.update_setting(run_id, self.setting, status=setting_status, error=error)  # if it was added

    async def _run(self, run_id: str) -> None:
        o = self.o
        async with (
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as session,
            StreamingClient(
                o.root,
                model=self.facts.model,
                timeout_s=o.request_timeout_s,
                spec_stats_extractor=any_spec_stats,
                extra_body=request_extras(self.facts.engine),
                keep_alive=keep_alive(self.facts.engine) if o.keep_alive is None else o.keep_alive,
                max_consecutive_timeouts=o.max_consecutive_timeouts,
                tokens_from_chunks=True,
            ) as client,
        ):
            top = max(o.concurrency) if o.concurrency else (o.max_in_flight or max(1, math.ceil(max(o.rates))))
            offered = self.warmup_concurrency(top)
            adapter = _detected(self.facts.engine)
            read = adapter.running_now if adapter is not None else EngineAdapter.running_now
            async with watch_running(read, session, o.root) as peak:
                warm = await run_closed_loop(
                    client, self.prompts, self.sampling, concurrency=offered, num_requests=o.warmup_rounds * offered
                )
            require_evidence(warm, "the warmup")
            self.sizer.warmed_up(warm, offered)  # the first cells' lifetime: the top level's, an upper bound
            if client.chunk_counted:  # the server ignores include_usage: say so once, in the run's record
                self.store.merge_environment(run_id, TOKENS_NOTE_KEY, tokens_from_chunks_note(o.root))
            # Whether the server speculates is known only from what it reports: drafted tokens in warmup.
            speculative = any(r.spec is not None and r.spec.draft_tokens > 0 for r in warm)
            params = {
                "url": o.root,
                "model": self.facts.model,
                "engine": self.facts.engine,
                "keep_alive": client.keep_alive,
            }
            self.store.add_setting(
                run_id, setting_id=self.setting, position=0, name=self.setting, params=params, speculative=speculative
            )
            cap = self.facts.capacity
            observed = peak.describe(cap, offered) if cap is not None else None
            self.store.update_setting(
                run_id,
                self.setting,
                status="running",
                capacity=observed.max_running_requests if observed else None,
                capacity_source=observed.source if observed else self.facts.capacity_source,
                context_tokens=cap.context_tokens if cap else None,
            )
            levels: tuple[float, ...] = o.rates or tuple(o.concurrency)
            for repeat in range(o.repeats):
                for level in levels:
                    await self._cell(run_id, session, client, level, repeat)
            self.store.update_setting(run_id, self.setting, status="done")

    async def _cell(
        self, run_id: str, session: aiohttp.ClientSession, client: StreamingClient, level: float, repeat: int
    ) -> None:
        o = self.o

        async def read_counters() -> SpecCounters | None:
            return await _metrics_counters(session, o.root, self.facts.engine)

        workload = ResolvedWorkload(
            o.workload_label(), tuple(self.prompts), self.sampling, greedy=self.sampling.temperature == 0.0
        )
        load = self.sizer.sized(self.load, self.setting, workload.key, level)
        measured = await measure_cell(
            client, workload, level, load, read_counters=read_counters, counters_source=METRICS_SOURCE
        )
        done = measured.store(self.store, run_id, self.setting, workload.key, repeat)
        self.sizer.cell_done(done)
        if self.on_cell_done is not None:
            self.on_cell_done(done)

    @property
    def load(self) -> CellLoad:
        """How every cell applies load: bench's options in the shape `tune` uses."""
        o = self.o
        return CellLoad.of(
            "open" if o.open_loop else "closed", o.rounds_per_cell, o.client_workers, o, o.cell_duration_s
        )


def parse_client_workers(text: str) -> ClientWorkers:
    """`--client-workers`: 'auto' or a whole number >= 1."""
    if text.strip() == "auto":
        return "auto"
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise ConfigError(f"--client-workers = {text!r}: not a worker count; fix: pass a whole number >= 1 or auto")
    return value


async def open_bench(options: BenchOptions) -> tuple[Bench, str]:
    """Validate the options, probe the server, load prompts, then open the store and create the run."""
    options.validate()
    prompts = load_prompts(options.prompts, max_tokens=options.max_tokens, api=options.api, where="--prompts")
    async with aiohttp.ClientSession(timeout=_PROBE_TIMEOUT) as session:
        facts = await probe_server(session, options.root, options.model)
    bench = Bench(options, facts, prompts, Store(options.store))
    return bench, bench.new_run()


__all__ = [
    "METRICS_SOURCE",
    "TOKENS_NOTE_KEY",
    "Bench",
    "BenchOptions",
    "ServerFacts",
    "any_spec_stats",
    "keep_alive",
    "open_bench",
    "parse_client_workers",
    "parse_levels",
    "probe_server",
    "server_root",
]
