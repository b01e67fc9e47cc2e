"""Client fidelity: our streaming client and GuideLLM side by side on one deterministic server.

Run: `.venv/bin/python benchmarks/client_fidelity.py` (GuideLLM first: `benchmarks/setup_guidellm.sh`).

Why (issue 4, item 7): a tuner is only as good as its measurements, and a client that adds lag to
every token silently corrupts TTFT and ITL. `fidelity_server.py` emits every token at a time fixed in
advance and records when it wrote each chunk, so each client's added lag is measurable, and both
tools measure the same known server, so their figures can be compared definition by definition.

Three phases, each against a fresh server pinned to one core (`--server-cpu`, default 0) while this
process, our client and GuideLLM (with its worker processes) are pinned to the other (`--client-cpu`,
default 1); the tools run one after the other, never together:
1. Agreement (`--align request`: every request's first token exactly `TTFT` after it arrived, then one
   token every `ITL`): closed loop at C = 1, 16, 64 with 40 tok/s per stream and 512-token requests;
   median TTFT, median TPOT/ITL and output throughput by each tool's own definition, and the difference
   in percent (target: within 3%). Then a stress cell at C = 64 and 100 tok/s per stream, where one core
   is not enough for GuideLLM to keep 64 requests in flight (so the two tools offer different loads).
2. Lag (`--align step`: engine-like decode steps, all streams' chunks in one burst every ITL):
   64 and 256 streams of 100 tok/s; added client lag p50/p99 for both tools (targets for ours at 64:
   p50 <= 1 ms, p99 <= 5 ms; at 256 lower than GuideLLM's).
3. llama-server (SmolLM2, no speculation) at C = 1 and 4: both tools' figures on a real engine (no
   server truth there), both asking for its default sampling.
The machine's load average is printed before and after each phase: other work on the machine
distorts both tools, and the tables say so rather than hide it.

Results: printed side by side, written as JSON under `benchmarks/.fidelity-cache/`, and (unless
`--no-docs`) as the section "Client fidelity (measured)" of `--docs` (default docs/metrics.md when it
exists, else docs/client-fidelity.md).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import resource
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from fidelity_analysis import (
    AGREEMENT_HEADER,
    DIAGNOSTIC_HEADER,
    LAG_HEADER,
    AgreementCell,
    LagSamples,
    ToolFigures,
    agreement_rows,
    diagnostic_row,
    guidellm_benchmarks,
    guidellm_figures,
    guidellm_lags,
    guidellm_requests,
    lag_rows,
    markdown_table,
    our_figures,
    our_lags,
    parse_server_log,
    parse_sid,
    percentile,
    replace_section,
    server_figures,
)

from specfrontier.load.client import StreamingClient
from specfrontier.load.health import ClientHealth
from specfrontier.load.workers import measure_closed_loop, resolve_workers
from specfrontier.metrics.window import cell_metrics
from specfrontier.records import Prompt, RequestRecord, Sampling

REPO = Path(__file__).resolve().parents[1]
BENCH = REPO / "benchmarks"
GUIDELLM_VENV = BENCH / ".venv-guidellm"
CACHE = BENCH / ".fidelity-cache"
SERVER = BENCH / "fidelity_server.py"
MODEL_ID = "fidelity-schedule"
SECTION = "Client fidelity (measured)"
PROMPT_WORDS = 32
OFFLINE_ENV = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}


@dataclass(frozen=True, slots=True)
class Plan:
    """What one invocation measures."""

    ttft_ms: float
    itl_ms: float
    """The lag phase's (and the stress cell's) time per token: 100 tok/s per stream, as issue 4 asks."""
    agreement_itl_ms: float
    """The agreement phase's time per token: 40 tok/s per stream, what a loaded GPU server streams at C=64."""
    agreement_c: tuple[int, ...]
    agreement_tokens: int
    agreement_rounds: int
    stress_c: int
    """One more agreement cell at `itl_ms` (100 tok/s per stream): where GuideLLM on one core falls short."""
    stress_tokens: int
    lag_streams: tuple[int, ...]
    lag_tokens: int
    lag_rounds: int
    server_cpu: int
    client_cpu: int
    guidellm_workers: int
    """GuideLLM's worker processes (`GUIDELLM__MAX_WORKER_PROCESSES`); see `--guidellm-workers`."""

    def guidellm_settings(self) -> dict[str, str]:
        return {"GUIDELLM__MAX_WORKER_PROCESSES": str(self.guidellm_workers)}


def loadavg() -> str:
    """The 1/5/15-minute load averages, as /proc/loadavg gives them."""
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


class FidelityServer:
    """`fidelity_server.py` in its own process group, pinned to one core; stopped by group id."""

    def __init__(self, align: str, plan: Plan, *, itl_ms: float | None = None) -> None:
        self.proc = subprocess.Popen(
            [
                sys.executable,
                str(SERVER),
                "--port",
                "0",
                "--align",
                align,
                "--ttft-ms",
                str(plan.ttft_ms),
                "--itl-ms",
                str(plan.itl_ms if itl_ms is None else itl_ms),
                "--max-lifetime-s",
                "1200",
            ],
            stdout=subprocess.PIPE,
            text=True,
            process_group=0,  # own group, same session: stays in our autogroup (see `set_priority`)
        )
        os.sched_setaffinity(self.proc.pid, {plan.server_cpu})
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().strip()
        if not line.startswith("READY port="):
            self.stop()
            raise RuntimeError(f"fidelity server did not start (said {line!r})")
        self.port = int(line.removeprefix("READY port="))
        self.base_url = f"http://127.0.0.1:{self.port}"

    def log(self, *, clear: bool = False) -> dict[str, Any]:
        """Every stream served so far (`clear`: and forget them, so the next tool's log starts empty)."""
        url = f"{self.base_url}/fidelity/log" + ("?clear=1" if clear else "")
        with urllib.request.urlopen(url, timeout=60) as resp:  # noqa: S310 (a loopback URL we built)
            payload: dict[str, Any] = json.load(resp)
        return payload

    def cpu_s(self) -> float:
        """User+system CPU seconds the server has used so far (from /proc)."""
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def stop(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)
        if self.proc.stdout is not None:
            self.proc.stdout.close()


def _prompt(tokens: int) -> Prompt:
    words = " ".join(f"word{i}" for i in range(PROMPT_WORDS))
    return Prompt(prompt_id="fidelity", category="fidelity", api="completion", max_tokens=tokens, text=words)


GREEDY = Sampling(temperature=0.0, ignore_eos=True)
"""What the fidelity server ignores and both tools' synthetic requests amount to: every token is generated."""


@dataclass(frozen=True, slots=True)
class OurRun:
    records: list[RequestRecord]
    health: ClientHealth
    wall_s: float

    @property
    def cpu_fraction(self) -> float:
        """The busiest client process's CPU time / wall time."""
        return max(self.health.cpu_fraction, default=0.0)

    def describe(self) -> str:
        h = self.health
        lag = "-" if h.lag_p99_ms is None else f"{h.lag_p99_ms:.2f}"
        return (
            f"{h.workers} client process(es) on {'/'.join(h.loops)}, client CPU {self.cpu_fraction:.2f} core, "
            f"event-loop lag p99 {lag} ms{' (saturated)' if h.saturated else ''}"
        )


def run_ours(
    base_url: str,
    concurrency: int,
    requests: int,
    tokens: int,
    *,
    keep_alive: bool = True,
    sampling: Sampling = GREEDY,
    prompts: Sequence[Prompt] | None = None,
    warmup_prompts: Sequence[Prompt] | None = None,
) -> OurRun:
    """One warmup pass of `concurrency` requests (discarded), then `requests` measured, closed loop.

    Measured the way `tune` and `bench` measure a cell: `measure_closed_loop` with the worker count
    `client_workers: auto` picks, which is capped at the CPUs this process may use (1 here, by the
    pinning), so it runs in this process. `keep_alive` as in `StreamingClient`: on, as `tune` uses it
    for every engine but llama.cpp; off (one connection per request), as with llama.cpp.
    """
    measured = list(prompts) if prompts else [_prompt(tokens)]
    warmup = list(warmup_prompts) if warmup_prompts else measured
    workers = resolve_workers("auto", streams=concurrency)

    async def go() -> OurRun:
        async with StreamingClient(base_url, model=MODEL_ID, timeout_s=300, keep_alive=keep_alive) as client:
            await measure_closed_loop(
                client, warmup, sampling, concurrency=concurrency, num_requests=concurrency, workers=workers
            )
            wall0 = time.perf_counter()
            records, health = await measure_closed_loop(
                client, measured, sampling, concurrency=concurrency, num_requests=requests, workers=workers
            )
            return OurRun(records, health, time.perf_counter() - wall0)

    return asyncio.run(go())


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_guidellm(
    base_url: str,
    concurrency: int,
    requests: int,
    tokens: int,
    out: Path,
    *,
    data: Path | None = None,
    settings: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """One `guidellm run` (concurrent profile, completions API, synthetic prompts); its JSON report.

    Like ours, it sends `concurrency` warmup requests first: GuideLLM's `warmup` (a request count here)
    leaves them out of its metrics, so both tools measure `requests` requests after a warm start.
    """
    out.unlink(missing_ok=True)
    command = [
        str(GUIDELLM_VENV / "bin" / "guidellm"),
        "run",
        "--backend",
        f"kind=openai_http,target={base_url},model={MODEL_ID},request_format=/v1/completions",
        "--profile",
        f"kind=concurrent,streams={concurrency},warmup={concurrency}",
        "--constraint",
        f"kind=max_requests,count={concurrency + requests}",
        "--data",
        f"kind=json_file,path={data}"
        if data is not None
        else f"kind=synthetic_text,prompt_tokens={PROMPT_WORDS},output_tokens={tokens}",
        "--tokenizer",
        f"kind=huggingface_auto,model={CACHE / 'tokenizer'}",
        "--output",
        f"kind=json,path={out}",
        "--disable-console-interactive",
    ]
    log_path = out.with_suffix(".log")
    with log_path.open("w") as log:
        proc = subprocess.Popen(
            command,
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, **OFFLINE_ENV, **(settings or {})},
            process_group=0,  # own group, same session: stays in our autogroup (see `set_priority`)
            cwd=out.parent,
        )
        try:
            proc.wait(timeout=900)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            raise RuntimeError(f"guidellm ran past 900 s; its log: {log_path}") from None
        except BaseException:  # Ctrl-C: leave no GuideLLM workers behind
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            raise
    if proc.returncode != 0 or not out.is_file():
        tail = log_path.read_text(errors="replace")[-2000:]
        raise RuntimeError(f"guidellm failed (exit {proc.returncode}); log {log_path}:\n{tail}")
    report: dict[str, Any] = json.loads(out.read_text())
    return report


def ensure_guidellm() -> None:
    """Refuse early, with the fix, when GuideLLM or its tokenizer is missing."""
    if not (GUIDELLM_VENV / "bin" / "guidellm").is_file():
        sys.exit("client_fidelity: GuideLLM is not installed; fix: benchmarks/setup_guidellm.sh (or --ours-only)")
    tokenizer = CACHE / "tokenizer"
    if (tokenizer / "tokenizer.json").is_file():
        return
    from specfrontier.engines.llamacpp import packaged_smollm2

    gguf = packaged_smollm2()
    print(f"tokenizer: converting the one inside {gguf.name} for GuideLLM (once) -> {tokenizer}", flush=True)
    script = (
        "import sys, pathlib\n"
        "from transformers import AutoTokenizer\n"
        "p = pathlib.Path(sys.argv[1])\n"
        "AutoTokenizer.from_pretrained(str(p.parent), gguf_file=p.name).save_pretrained(sys.argv[2])\n"
    )
    subprocess.run(
        [str(GUIDELLM_VENV / "bin" / "python"), "-c", script, str(gguf), str(tokenizer)],
        check=True,
        env={**os.environ, **OFFLINE_ENV},
        timeout=600,
    )


def set_priority(nice: int) -> str:
    """Lower this process's niceness (inherited by the server and GuideLLM) and its autogroup's.

    Linux groups tasks by session ("autogroups", /proc/sys/kernel/sched_autogroup_enabled) and shares
    the CPU between groups first: a task's own niceness then only ranks it inside its session. So the
    session's autogroup niceness is set too, and children are started in our session (own process
    group, not a new session). Returns what was achieved, for the report.
    """
    try:
        achieved = os.nice(nice)
    except PermissionError:
        achieved = os.nice(0)
        print(f"client_fidelity: cannot set niceness {nice} (not root); running at {achieved}")
    autogroup = Path("/proc/self/autogroup")
    group = "no autogroup"
    if autogroup.is_file():
        try:
            autogroup.write_text(str(nice))
        except OSError as exc:
            print(f"client_fidelity: cannot set the autogroup niceness ({exc}); other sessions compete equally")
        group = autogroup.read_text().strip()
    return f"{achieved} ({group})"


def reset_autogroup() -> None:
    """Give the session's autogroup back its default niceness: the priority was for the measurement only,
    and the autogroup outlives this process (it belongs to the shell session that started it)."""
    with contextlib.suppress(OSError):
        Path("/proc/self/autogroup").write_text("0")


def _ms(values: Sequence[float], q: float) -> str:
    value = percentile(values, q)
    return "-" if value is None else f"{value:.2f}"


def server_facts(log: dict[str, Any], sids: set[int]) -> dict[str, float | int | None]:
    """How well the server kept its own schedule for the given streams (slip = send - scheduled, ms)."""
    streams = parse_server_log(log)
    slips = [
        (sent - sched) / 1e6
        for sid in sids
        if sid in streams
        for sent, sched in zip(streams[sid].sent_ns, streams[sid].sched_ns, strict=True)
    ]
    return {
        "chunks": len(slips),
        "slip_p50_ms": percentile(slips, 50),
        "slip_p99_ms": percentile(slips, 99),
    }


def _sids_of_ours(records: Sequence[RequestRecord]) -> set[int]:
    return {sid for r in records if (sid := parse_sid(r.output_text)) is not None}


def _sids_of(requests: Sequence[Any]) -> set[int]:
    return {r.sid for r in requests if r.sid is not None}


AGREEMENT_MIN_REQUESTS = 8
"""At C = 1 on a server with a fixed schedule the median of 8 requests is stable, and each takes 12.8 s."""


def _agreement_cells(
    server: FidelityServer,
    plan: Plan,
    levels: Sequence[int],
    tokens: int,
    itl_ms: float,
    out_dir: Path,
    results: dict[str, Any],
    ours_only: bool,
) -> list[AgreementCell]:
    """Both tools at each concurrency, one after the other, on `server`; each against the server's truth."""
    cells: list[AgreementCell] = []
    none = ToolFigures(None, None, None, 0, 0)
    for concurrency in levels:
        requests = max(AGREEMENT_MIN_REQUESTS, plan.agreement_rounds * concurrency)
        server.log(clear=True)
        ours = run_ours(server.base_url, concurrency, requests, tokens)
        mine = our_figures(cell_metrics(ours.records))
        truth_ours = server_figures(parse_server_log(server.log(clear=True)), _sids_of_ours(ours.records))
        print(
            f"C={concurrency} @ {1000 / itl_ms:g} tok/s: ours {requests} requests in {ours.wall_s:.1f} s, "
            f"{ours.describe()}; load {loadavg()}",
            flush=True,
        )
        theirs, truth_theirs = none, none
        if not ours_only:
            cpu0 = _children_cpu_s()
            out = out_dir / f"agree-c{concurrency}-itl{itl_ms:g}.json"
            report = run_guidellm(
                server.base_url, concurrency, requests, tokens, out, settings=plan.guidellm_settings()
            )
            benchmark = guidellm_benchmarks(report)[0]
            theirs = guidellm_figures(benchmark)
            truth_theirs = server_figures(
                parse_server_log(server.log(clear=True)), _sids_of(guidellm_requests(benchmark))
            )
            print(
                f"C={concurrency} @ {1000 / itl_ms:g} tok/s: GuideLLM {theirs.requests} requests, CPU incl. its "
                f"startup {_children_cpu_s() - cpu0:.1f} s; load {loadavg()}",
                flush=True,
            )
        cells.append(AgreementCell(concurrency, mine, theirs, truth_ours, truth_theirs))
        results["agreement"].append(
            {
                "concurrency": concurrency,
                "itl_ms": itl_ms,
                "tokens": tokens,
                "ours": asdict(mine),
                "guidellm": asdict(theirs),
                "server_during_ours": asdict(truth_ours),
                "server_during_guidellm": asdict(truth_theirs),
                "ours_cpu": ours.cpu_fraction,
            }
        )
    return cells


def agreement_phase(
    plan: Plan, out_dir: Path, results: dict[str, Any], ours_only: bool
) -> tuple[list[list[str]], list[list[str]]]:
    """Rows at the agreement rate (C = 1, 16, 64), and the stress cell's rows at 100 tok/s per stream."""
    print(f"\n== phase 1: agreement (align=request), load average before: {loadavg()}", flush=True)
    server = FidelityServer("request", plan, itl_ms=plan.agreement_itl_ms)
    try:
        cells = _agreement_cells(
            server, plan, plan.agreement_c, plan.agreement_tokens, plan.agreement_itl_ms, out_dir, results, ours_only
        )
    finally:
        server.stop()
    server = FidelityServer("request", plan, itl_ms=plan.itl_ms)
    try:
        stress = _agreement_cells(
            server, plan, (plan.stress_c,), plan.stress_tokens, plan.itl_ms, out_dir, results, ours_only
        )
    finally:
        server.stop()
    print(f"load average after phase 1: {loadavg()}")
    results["loadavg"].append(("after agreement", loadavg()))
    return agreement_rows(cells), agreement_rows(stress)


def lag_phase(
    plan: Plan, out_dir: Path, results: dict[str, Any], ours_only: bool
) -> tuple[list[list[str]], list[list[str]]]:
    """Lag rows, and diagnostic rows: ours with kept-alive connections vs one connection per request."""
    print(f"\n== phase 2: lag (align=step), load average before: {loadavg()}", flush=True)
    server = FidelityServer("step", plan)
    cells: list[tuple[int, LagSamples, LagSamples]] = []
    diagnostic: list[list[str]] = []
    try:
        for streams in plan.lag_streams:
            requests = plan.lag_rounds * streams
            cpu0 = server.cpu_s()
            wall0 = time.perf_counter()
            ours = run_ours(server.base_url, streams, requests, plan.lag_tokens)
            server_cpu = (server.cpu_s() - cpu0) / (time.perf_counter() - wall0)
            log = server.log(clear=True)
            mine = our_lags(ours.records, parse_server_log(log))
            facts = server_facts(log, _sids_of_ours(ours.records))
            print(
                f"{streams} streams: ours {requests} requests, {len(mine.every_chunk_ms)} chunks in "
                f"{ours.wall_s:.1f} s ({len(mine.every_chunk_ms) / ours.wall_s:,.0f} chunks/s), "
                f"{ours.describe()}, server CPU {server_cpu:.2f} core, server slip p50/p99 "
                f"{facts['slip_p50_ms'] or 0:.2f}/{facts['slip_p99_ms'] or 0:.2f} ms; load {loadavg()}",
                flush=True,
            )
            theirs = LagSamples((), (), (), (), 0, 0)
            guide_facts: dict[str, float | int | None] = {}
            if not ours_only:
                report = run_guidellm(
                    server.base_url,
                    streams,
                    requests,
                    plan.lag_tokens,
                    out_dir / f"lag-s{streams}.json",
                    settings=plan.guidellm_settings(),
                )
                log = server.log(clear=True)
                requests_g = guidellm_requests(guidellm_benchmarks(report)[0])
                theirs = guidellm_lags(requests_g, parse_server_log(log))
                guide_facts = server_facts(log, _sids_of(requests_g))
                print(
                    f"{streams} streams: GuideLLM {theirs.matched} requests matched, server slip p50/p99 "
                    f"{guide_facts['slip_p50_ms'] or 0:.2f}/{guide_facts['slip_p99_ms'] or 0:.2f} ms; load {loadavg()}",
                    flush=True,
                )
            fresh = run_ours(server.base_url, streams, requests, plan.lag_tokens, keep_alive=False)
            fresh_lags = our_lags(fresh.records, parse_server_log(server.log(clear=True)))
            print(f"{streams} streams: ours, one connection per request, {fresh.describe()}", flush=True)
            diagnostic += [
                diagnostic_row(streams, "kept-alive connections (default)", mine),
                diagnostic_row(streams, "one connection per request (as with llama.cpp)", fresh_lags),
            ]
            cells.append((streams, mine, theirs))
            results["lag"].append(
                {
                    "streams": streams,
                    "ours": {
                        "every_chunk_p50_ms": percentile(mine.every_chunk_ms, 50),
                        "every_chunk_p99_ms": percentile(mine.every_chunk_ms, 99),
                        "first_last_p50_ms": percentile(mine.first_last_ms, 50),
                        "first_last_p99_ms": percentile(mine.first_last_ms, 99),
                        "matched": mine.matched,
                        "unmatched": mine.unmatched,
                        "client_cpu": ours.cpu_fraction,
                        "server_cpu": server_cpu,
                        "server": facts,
                    },
                    "guidellm": {
                        "first_last_p50_ms": percentile(theirs.first_last_ms, 50),
                        "first_last_p99_ms": percentile(theirs.first_last_ms, 99),
                        "matched": theirs.matched,
                        "unmatched": theirs.unmatched,
                        "server": guide_facts,
                    },
                    "ours_connection_per_request": {
                        "every_chunk_p50_ms": percentile(fresh_lags.every_chunk_ms, 50),
                        "every_chunk_p99_ms": percentile(fresh_lags.every_chunk_ms, 99),
                        "request_path_p50_ms": percentile(fresh_lags.request_path_ms, 50),
                    },
                }
            )
    finally:
        server.stop()
    print(f"load average after phase 2: {loadavg()}")
    results["loadavg"].append(("after lag", loadavg()))
    return lag_rows(cells), diagnostic


GUIDELLM_SAMPLING = Sampling(temperature=0.8, ignore_eos=True)
"""What GuideLLM's requests ask llama-server for: no temperature (so the server's default, 0.8, with its
default top-k/top-p/min-p) and `ignore_eos`. Sampling costs CPU per token on a small model, so ours asks
for the same: with greedy ours, TPOT differed by 10% on the same server (measured 2026-12-03)."""
LLAMA_C = (1, 4)
LLAMA_TOKENS = 32
LLAMA_REQUESTS_PER_C = 12


def llama_prompts(count: int, tokens: int, tag: str) -> list[Prompt]:
    """Distinct prompts that differ from their first token on (a number), so llama-server's prompt cache
    never serves one request from another's prefix. `tag` differs per tool too: llama-server keeps
    finished prompts in a host-memory cache, so the second tool would otherwise be served the first
    tool's identical prompts from it (seen: 1 of 19 prompt tokens evaluated)."""
    body = "Write a short story about a robot who learns to paint the sea at night."
    return [
        Prompt(
            prompt_id=f"{tag}{i}", category="llama", api="completion", max_tokens=tokens, text=f"{i + 1} {tag} {body}"
        )
        for i in range(count)
    ]


def llama_phase(plan: Plan, out_dir: Path, results: dict[str, Any], ours_only: bool) -> list[list[str]]:
    """Agreement on a real engine: llama-server (SmolLM2-135M, no speculation) pinned to the server CPU.

    There is no schedule to compare with here, so only the two tools are compared. Both send the same
    prompts in the same order (GuideLLM reads them from a JSON-lines file; its first C are its warmup,
    as ours are; the prompts differ between the tools only in one letter of a tag), `max_tokens` with
    `ignore_eos`, to the completions API.
    """
    from specfrontier.config.load import parse_config
    from specfrontier.engines.llamacpp import LlamaCppAdapter
    from specfrontier.process.launch import ServerProcess, free_port

    print(f"\n== phase 3: llama-server agreement, load average before: {loadavg()}", flush=True)
    cfg = parse_config({"engine": {"threads": 1, "ctx_size": 4096}, "settings": [{"name": "baseline"}]})
    adapter = LlamaCppAdapter(cfg.engine)  # type: ignore[arg-type]
    adapter.prepare(cfg.settings)  # type: ignore[arg-type]
    port = free_port()
    argv = adapter.command(cfg.settings[0], port=port, max_concurrency=max(LLAMA_C))  # type: ignore[arg-type]
    base_url = f"http://127.0.0.1:{port}"
    none = ToolFigures(None, None, None, 0, 0)
    cells: list[AgreementCell] = []
    with ServerProcess(["taskset", "-c", str(plan.server_cpu), *argv], out_dir / "llama-server.log") as server:
        asyncio.run(server.wait_ready(f"{base_url}/health", timeout_s=180))
        # ServerProcess starts a new session, hence a new autogroup: give it our priority too.
        with contextlib.suppress(OSError):
            Path(f"/proc/{server.pid}/autogroup").write_text(str(results["nice"]))
        for concurrency in LLAMA_C:
            requests = LLAMA_REQUESTS_PER_C * concurrency
            warm = llama_prompts(concurrency, LLAMA_TOKENS, f"w{concurrency}a")
            measured = llama_prompts(requests, LLAMA_TOKENS, f"m{concurrency}a")
            ours = run_ours(
                base_url,
                concurrency,
                requests,
                LLAMA_TOKENS,
                keep_alive=False,  # as `tune` and `bench` with llama.cpp: it closes connections after a stream
                sampling=GUIDELLM_SAMPLING,
                prompts=measured,
                warmup_prompts=warm,
            )
            mine = our_figures(cell_metrics(ours.records))
            print(f"C={concurrency}: ours {requests} requests in {ours.wall_s:.1f} s; load {loadavg()}", flush=True)
            theirs = none
            if not ours_only:
                warm = llama_prompts(concurrency, LLAMA_TOKENS, f"w{concurrency}b")
                measured = llama_prompts(requests, LLAMA_TOKENS, f"m{concurrency}b")
                data = out_dir / f"llama-c{concurrency}.jsonl"
                data.write_text(
                    "".join(
                        json.dumps({"prompt": p.text, "output_tokens_count": LLAMA_TOKENS}) + "\n"
                        for p in [*warm, *measured]
                    )
                )
                out = out_dir / f"llama-c{concurrency}.json"
                report = run_guidellm(
                    base_url, concurrency, requests, LLAMA_TOKENS, out, data=data, settings=plan.guidellm_settings()
                )
                theirs = guidellm_figures(guidellm_benchmarks(report)[0])
                print(f"C={concurrency}: GuideLLM {theirs.requests} requests; load {loadavg()}", flush=True)
            cells.append(AgreementCell(concurrency, mine, theirs, none, none))
            results["llama"].append({"concurrency": concurrency, "ours": asdict(mine), "guidellm": asdict(theirs)})
    results["loadavg"].append(("after llama-server", loadavg()))
    return [row[:6] for row in agreement_rows(cells)]


DEFINITIONS = """\
Definitions (ours: `specfrontier.metrics.window`; GuideLLM 0.8.1: `schemas/base/request_stats.py`):
- TTFT. Ours: first content chunk's read - the moment the request is handed to aiohttp, on a kept-alive
  connection (llama.cpp: a new connection per request, so its connect is inside TTFT). GuideLLM: first
  token line - the moment httpx starts writing the request headers on a kept-alive connection. Both
  stamp at read/line time; ours `perf_counter_ns`, GuideLLM `time.time()`.
- TPOT / ITL. Ours `tpot`: (E2E - TTFT) / (completion_tokens - 1) per request, E2E ending at the read
  that carried `[DONE]`; median over requests. GuideLLM `inter_token_latency_ms`: (last token line -
  first token line) / (output_tokens - 1), ending at the last content line (not `[DONE]`); its median
  is token-weighted. With equal-length requests the weighting does not matter; the end point differs
  by the time between the last token and `[DONE]` (here written back to back).
- Output throughput. Ours: sum of server-reported completion tokens / (first send -> last `[DONE]`)
  of the measured window. GuideLLM: the mean of `output_tokens_per_second`, a rate over its measured
  window with each request's tokens placed at the times its chunks arrived.
- Warmup. Both tools send C warmup requests first and leave them out (ours: a discarded closed-loop
  pass; GuideLLM: `warmup=C` in its profile, which also starts its measured window after them).
- Requests: both tools send the same completions requests with `ignore_eos`; on the fidelity server
  sampling does not matter; on llama-server both ask for its default sampling (GuideLLM sends no
  temperature, ours sends the default, 0.8), because sampling costs CPU per token on a small model.
- GuideLLM runs with `GUIDELLM__MAX_WORKER_PROCESSES` = `--guidellm-workers` (default 1): its default of
  10 worker processes on the one core it gets here only adds contention.
- Added client lag: receive stamp - the server's send stamp of the same chunk (same machine clock);
  GuideLLM keeps receive times only for the first and last token of a request, so "first+last" uses
  those two chunks for both tools; "every chunk" is ours over all chunks.
"""


def render(
    plan: Plan,
    agreement: list[list[str]],
    stress: list[list[str]],
    lags: list[list[str]],
    diagnostic: list[list[str]],
    llama: list[list[str]],
    results: dict[str, Any],
    ours_only: bool,
) -> str:
    per_stream = f"{1000 / plan.itl_ms:g} tok/s per stream"
    lines = [
        f"Measured {results['date']} by `.venv/bin/python benchmarks/client_fidelity.py"
        f"{' --quick' if results['quick'] else ''}` (GuideLLM {results['guidellm_version']}"
        f"{', not run' if ours_only else f' with {plan.guidellm_workers} worker process(es)'}).",
        "",
        f"Setup: {os.cpu_count()} cores; fidelity server (aiohttp, 127.0.0.1) pinned to CPU {plan.server_cpu}, "
        f"the benchmark process with our client, and GuideLLM with its worker processes, pinned to CPU "
        f"{plan.client_cpu}; the tools ran one after the other, all at niceness {results['niceness']}. "
        f"Server schedule: TTFT {plan.ttft_ms:g} ms, one token per chunk; completions API. Load average "
        "(1/5/15 min; GuideLLM's own processes count in it): "
        + "; ".join(f"{when} {value}" for when, value in results["loadavg"])
        + ".",
        "",
        f"Agreement (closed loop, {plan.agreement_tokens} output tokens per request; the server aligned per "
        f"request: TTFT exactly {plan.ttft_ms:g} ms after a request arrived, then a token every "
        f"{plan.agreement_itl_ms:g} ms, {1000 / plan.agreement_itl_ms:g} tok/s per stream). The server's "
        "truth is computed from its own stamps for the same requests (TTFT = first send - arrival, ITL = "
        "(last send - first send) / (tokens - 1), throughput = tokens / (first arrival -> last send), "
        "concurrency = sum of (last send - arrival) / that window), so each tool's distance from it is what "
        "that tool added:",
        "",
        markdown_table(AGREEMENT_HEADER, agreement),
        "",
        f"Stress cell, same method at {per_stream} ({plan.stress_tokens} output tokens per request), where one "
        "core is not enough for GuideLLM to keep C requests in flight:",
        "",
        markdown_table(AGREEMENT_HEADER, stress),
        "",
        f"Added client lag ({plan.lag_tokens} output tokens per request, {per_stream}; the server aligned to "
        f"{plan.itl_ms:g} ms decode steps: every stream's chunk in one burst):",
        "",
        markdown_table(LAG_HEADER, lags),
        "",
        "Diagnostic, ours only, same server: our client with kept-alive connections (the default) vs one new "
        "connection per request (what it uses with llama.cpp, which closes connections after a stream):",
        "",
        markdown_table(DIAGNOSTIC_HEADER, diagnostic),
        "",
        *(
            [
                f"Agreement on a real engine: llama-server (llama.cpp b11434, SmolLM2-135M Q4_1, no speculation, "
                f"1 thread, {max(LLAMA_C)} slots) pinned to CPU {plan.server_cpu}; the same {LLAMA_TOKENS}-token "
                "requests and prompts of the same shape for both tools (no server truth here):",
                "",
                markdown_table(AGREEMENT_HEADER[:6], llama),
                "",
            ]
            if llama
            else []
        ),
        DEFINITIONS,
    ]
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Our client vs GuideLLM on a deterministic-schedule server.")
    parser.add_argument(
        "--quick", action="store_true", help="fewer requests (a smoke run; not written to the docs unless --docs)"
    )
    parser.add_argument("--ours-only", action="store_true", help="skip GuideLLM (its columns stay empty)")
    parser.add_argument(
        "--guidellm-workers",
        type=int,
        default=1,
        help="GuideLLM worker processes (GUIDELLM__MAX_WORKER_PROCESSES). Default 1: its own default of 10 "
        "processes sharing the one core it gets here is its worst case (measured at C=64, 100 tok/s per "
        "stream: median TTFT 155 ms with 10, 97 ms with 1, against the server's 51 ms)",
    )
    parser.add_argument("--server-cpu", type=int, default=0)
    parser.add_argument("--client-cpu", type=int, default=1)
    parser.add_argument("--docs", type=Path, default=None, help="Markdown file to write the section into")
    parser.add_argument("--no-docs", action="store_true")
    parser.add_argument(
        "--phases",
        default="agreement,lag,llama",
        help="comma-separated subset of agreement,lag,llama (default: all three)",
    )
    parser.add_argument(
        "--nice",
        type=int,
        default=-20,
        help="niceness for this process and its children (server, GuideLLM), so other work on a shared "
        "machine disturbs both tools less; needs root for < 0 (else it runs at 0 and says so)",
    )
    args = parser.parse_args(argv)
    args.phases = {p.strip() for p in args.phases.split(",") if p.strip()}
    if not args.phases or not args.phases <= {"agreement", "lag", "llama"}:
        parser.error(f"--phases: expected a subset of agreement,lag,llama, got {sorted(args.phases)}")
    cpus = os.sched_getaffinity(0)
    for name in ("server_cpu", "client_cpu"):
        if getattr(args, name) not in cpus:
            parser.error(f"--{name.replace('_', '-')} {getattr(args, name)} is not an allowed CPU ({sorted(cpus)})")
    if args.server_cpu == args.client_cpu:
        parser.error("--server-cpu and --client-cpu must differ: the point is that they do not share a core")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    plan = Plan(
        ttft_ms=50.0,
        itl_ms=10.0,
        agreement_itl_ms=25.0,
        agreement_c=(1, 16, 64),
        agreement_tokens=64 if args.quick else 512,
        agreement_rounds=2 if args.quick else 4,
        stress_c=64,
        stress_tokens=64,
        lag_streams=(64, 256),
        lag_tokens=64 if args.quick else 128,
        lag_rounds=2 if args.quick else 4,
        server_cpu=args.server_cpu,
        client_cpu=args.client_cpu,
        guidellm_workers=args.guidellm_workers,
    )
    if not args.ours_only:
        ensure_guidellm()
    niceness = set_priority(args.nice)
    os.sched_setaffinity(0, {plan.client_cpu})
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    out_dir = CACHE / f"run-{stamp}"
    out_dir.mkdir(parents=True, exist_ok=True)
    version = "-"
    if not args.ours_only:
        version = (
            subprocess.run(
                [
                    str(GUIDELLM_VENV / "bin" / "python"),
                    "-c",
                    "import importlib.metadata as m; print(m.version('guidellm'))",
                ],
                capture_output=True,
                text=True,
                check=True,
            )
            .stdout.strip()
            .removeprefix("guidellm version: ")
        )
    results: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "quick": args.quick,
        "guidellm_version": version,
        "plan": asdict(plan),
        "niceness": niceness,
        "nice": args.nice,
        "loadavg": [("before", loadavg())],
        "agreement": [],
        "lag": [],
        "llama": [],
    }
    try:
        agreement, stress = (
            agreement_phase(plan, out_dir, results, args.ours_only) if "agreement" in args.phases else ([], [])
        )
        lags, diagnostic = lag_phase(plan, out_dir, results, args.ours_only) if "lag" in args.phases else ([], [])
        llama = llama_phase(plan, out_dir, results, args.ours_only) if "llama" in args.phases else []
    finally:
        reset_autogroup()
    text = render(plan, agreement, stress, lags, diagnostic, llama, results, args.ours_only)
    print("\n" + text)
    (out_dir / "results.json").write_text(json.dumps(results, indent=2))
    print(f"raw results: {out_dir}")
    if args.quick and args.docs is None and not args.no_docs:
        print("--quick results are a smoke run: not written to the docs (give --docs FILE to write them)")
    elif not args.no_docs:
        docs = args.docs or (REPO / "docs" / "metrics.md" if (REPO / "docs" / "metrics.md").is_file() else None)
        docs = docs or REPO / "docs" / "client-fidelity.md"
        current = docs.read_text() if docs.is_file() else "# Client fidelity\n"
        docs.write_text(replace_section(current, SECTION, text))
        print(f"wrote section '{SECTION}' of {docs}")


if __name__ == "__main__":
    main()
