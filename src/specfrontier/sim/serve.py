"""`python -m specfrontier.sim.serve`: launch the simulator's HTTP face the way a real SGLang is launched.

The server it starts is a MODEL of an SGLang deployment (a profile), not a measurement of one. The
command line takes SGLang's own flag spellings (engines.md 1.1-1.4) so that the SGLang adapter can
launch it, probe `--help` and read `/server_info` exactly as it does for `sglang.launch_server`; it
applies SGLang's start-up rules through `resolve_setting` and prints SGLang's warnings and errors.

Fault knobs (`--fail-at-start`, `--oom-above`, `--crash-after` with `--crash-once-file` and
`--crash-linger`, `--hang`,
`--stall-stream-after`, `--malformed-sse`, `--slow-start`, `--bind-delay`, `--fork-child`) make the
failures a real server shows on demand, for reliability tests of the launcher, the client and the sweep
(tests/faults/, docs/reliability.md).

The face binds only the host it is given (127.0.0.1 by default); a host that is not a loopback address
is refused unless `--allow-remote` is passed, so it is never exposed on other interfaces by accident.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from specfrontier.errors import ConfigError
from specfrontier.sim.costs import capacity
from specfrontier.sim.http_face import FaceConfig, build_app, log
from specfrontier.sim.profile import load_profile
from specfrontier.sim.serving import add_simulator_options, is_loopback, non_negative_float, serve_app
from specfrontier.sim.setting import ResolvedSetting, SimSetting, resolve_setting

"""How long a stopping server waits for open streams; short, because stalled streams never end."""


def build_parser() -> argparse.ArgumentParser:
    """SGLang's spellings (prefixes allowed, as in SGLang), then the simulator's own options and faults."""
    parser = argparse.ArgumentParser(
        prog="python -m specfrontier.sim.serve",
        description="Simulated SGLang server (a MODEL of a deployment, not a measurement): "
        "OpenAI-compatible streaming endpoints paced by the simulator core.",
    )
    sg = parser.add_argument_group("SGLang launch flags (same spellings as sglang.launch_server)")
    sg.add_argument("--model-path", default="sim", help="Accepted and recorded; the simulator loads no weights.")
    sg.add_argument("--served-model-name", default=None, help="Model name in responses (default: --model-path).")
    sg.add_argument("--host", default="127.0.0.1", help="Interface to bind (loopback unless --allow-remote).")
    sg.add_argument("--port", type=int, default=30000, help="Port to bind.")
    sg.add_argument("--tp-size", "--tensor-parallel-size", type=int, default=1, help="Accepted and recorded.")
    sg.add_argument("--speculative-algorithm", default=None, help="EAGLE, EAGLE3 or NEXTN (an alias of EAGLE).")
    sg.add_argument("--speculative-draft-model-path", "--speculative-draft-model", default=None, help="Recorded.")
    sg.add_argument("--speculative-num-steps", type=int, default=None, help="Draft depth.")
    sg.add_argument("--speculative-eagle-topk", type=int, default=None, help="Branching per draft step.")
    sg.add_argument("--speculative-num-draft-tokens", type=int, default=None, help="Verified tokens incl. root.")
    sg.add_argument("--max-running-requests", type=int, default=None, help="Cap on running requests.")
    sg.add_argument("--speculative-adaptive", action="store_true", help="Per-batch-size steps from the config.")
    sg.add_argument("--speculative-adaptive-config", default=None, help="JSON: candidate_steps per batch size.")
    sg.add_argument("--context-length", type=int, default=32768, help="Longest prompt + output, in tokens.")
    sg.add_argument("--max-total-tokens", type=int, default=None, help="Reported as max_total_num_tokens.")
    sg.add_argument("--mem-fraction-static", type=float, default=None, help="Accepted and recorded.")
    sg.add_argument("--chunked-prefill-size", type=int, default=None, help="Accepted and recorded.")
    sg.add_argument("--cuda-graph-max-bs-decode", type=int, default=None, help="Accepted and recorded.")
    sg.add_argument("--cuda-graph-max-bs-prefill", type=int, default=None, help="Accepted and recorded.")
    for flag in ("--enable-metrics", "--trust-remote-code", "--skip-server-warmup", "--disable-radix-cache"):
        sg.add_argument(flag, action="store_true", help="Accepted and recorded.")
    sg.add_argument("--log-level", default="info", help="Accepted and recorded.")
    add_simulator_options(parser, lambda name: f"--{name}", startup_help="Seconds /health answers 503.")
    fault = parser.add_argument_group("fault injection (reliability tests)")
    fault.add_argument("--fail-at-start", action="store_true", help="Exit 1 at once with an error line.")
    fault.add_argument("--oom-above", type=int, default=None, metavar="N", help="CUDA OOM exit if MRR > N.")
    fault.add_argument("--crash-after", type=int, default=None, metavar="N", help="Exit 1 after N completions.")
    fault.add_argument("--hang", action="store_true", help="Listen but never become healthy.")
    fault.add_argument("--stall-stream-after", type=int, default=None, metavar="N", help="Stop streams at N tokens.")
    fault.add_argument("--malformed-sse", action="store_true", help="Send one broken JSON chunk per stream.")
    fault.add_argument("--slow-start", type=non_negative_float, default=None, metavar="S", help="503 for S s.")
    fault.add_argument(
        "--crash-once-file", default=None, metavar="PATH", help="--crash-after only while PATH is absent; creates it."
    )
    fault.add_argument(
        "--crash-linger",
        type=non_negative_float,
        default=0.0,
        metavar="S",
        help="--crash-after closes every socket, then exits only after S s.",
    )
    fault.add_argument(
        "--bind-delay",
        type=non_negative_float,
        default=0.0,
        metavar="S",
        help="Bind the port only after S s (SGLang and vLLM load the model before they listen).",
    )
    fault.add_argument(
        "--fork-child",
        action="store_true",
        help="Start a child process that outlives its parent (as vLLM's engine core does).",
    )
    return parser


FORKED_CHILD_MARK = "specfrontier-sim-forked-child"
"""In the forked child's command line, so tests can find it."""


def _fork_child() -> subprocess.Popen[bytes]:
    """A long-lived child in the server's process group with no parent-death signal of its own, like the
    engine-core and scheduler processes vLLM and SGLang start: it survives its parent unless the whole
    group is stopped."""
    code = f"import time  # {FORKED_CHILD_MARK}\nwhile True:\n    time.sleep(3600)\n"
    return subprocess.Popen(
        [sys.executable, "-c", code], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )


def _sglang_warnings(args: argparse.Namespace, resolved: ResolvedSetting) -> list[str]:
    """The warnings SGLang's speculative hook logs for the rewrites `resolve_setting` applied."""
    lines: list[str] = []
    if not resolved.speculative:
        return lines
    if args.speculative_num_steps is None:
        lines.append(
            "speculative_num_steps, speculative_eagle_topk and speculative_num_draft_tokens are auto-chosen: "
            f"({resolved.num_steps}, {resolved.eagle_topk}, {resolved.num_draft_tokens})"
        )
    draft = args.speculative_num_draft_tokens
    if resolved.eagle_topk == 1 and draft is not None and draft != resolved.num_draft_tokens:
        lines.append(
            "speculative_num_draft_tokens is adjusted to speculative_num_steps + 1 when speculative_eagle_topk == 1: "
            f"{draft} -> {resolved.num_draft_tokens}"
        )
    if args.max_running_requests is None:
        lines.append(
            f"Max running requests is reset to {resolved.max_running_requests} for speculative decoding. "
            "You can override this by explicitly setting --max-running-requests."
        )
    return lines


def _server_args(args: argparse.Namespace, resolved: ResolvedSetting, algorithm: str | None) -> dict[str, Any]:
    """SGLang's resolved server args as /server_info serves them (the accepted-only flags recorded too)."""
    spec = resolved.speculative
    return {
        "model_path": args.model_path,
        "served_model_name": args.served_model_name or args.model_path,
        "host": args.host,
        "port": args.port,
        "tp_size": args.tp_size,
        "speculative_algorithm": algorithm if spec else None,
        "speculative_draft_model_path": args.speculative_draft_model_path,
        "speculative_num_steps": resolved.num_steps if spec else None,
        "speculative_eagle_topk": resolved.eagle_topk if spec else None,
        "speculative_num_draft_tokens": resolved.num_draft_tokens if spec else None,
        "max_running_requests": resolved.max_running_requests,
        "context_length": args.context_length,
        "max_total_tokens": args.max_total_tokens,
        "mem_fraction_static": args.mem_fraction_static,
        "chunked_prefill_size": args.chunked_prefill_size,
        "cuda_graph_max_bs_decode": args.cuda_graph_max_bs_decode,
        "cuda_graph_max_bs_prefill": args.cuda_graph_max_bs_prefill,
        "enable_metrics": args.enable_metrics,
        "trust_remote_code": args.trust_remote_code,
        "skip_server_warmup": args.skip_server_warmup,
        "disable_radix_cache": args.disable_radix_cache,
        "log_level": args.log_level,
    }


def _fail(message: str) -> int:
    print(message, file=sys.stderr, flush=True)
    return 1


def _adaptive(args: argparse.Namespace) -> tuple[tuple[int, tuple[int, ...]], ...]:
    """The adaptive config file as (batch size, candidate steps) entries; ConfigError where SGLang's parser refuses."""
    if not args.speculative_adaptive:
        return ()
    path = args.speculative_adaptive_config
    if path is None:
        raise ConfigError("sim serve: --speculative-adaptive without --speculative-adaptive-config; fix: pass the file")
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        entries = tuple((int(key), tuple(int(d) for d in value["candidate_steps"])) for key, value in data.items())
    except (OSError, ValueError, TypeError, KeyError, AttributeError) as exc:
        raise ConfigError(
            f"sim serve: --speculative-adaptive-config {path}: not a config of "
            f'{{"<batch size>": {{"candidate_steps": [steps]}}}} ({exc}); fix: write it in that form'
        ) from exc
    return entries


def make_config(args: argparse.Namespace) -> FaceConfig:
    """Resolve the setting with SGLang's rules and build the face's config; ConfigError when SGLang would refuse."""
    profile = load_profile(args.profile)
    profile.workload(args.workload, where="sim serve --workload")
    algorithm = args.speculative_algorithm.upper() if args.speculative_algorithm is not None else None
    if algorithm == "NEXTN":  # SGLang resolves the NEXTN alias to EAGLE
        algorithm = "EAGLE"
    setting = SimSetting(
        algorithm,
        args.speculative_num_steps,
        args.speculative_eagle_topk,
        args.speculative_num_draft_tokens,
        args.max_running_requests,
        _adaptive(args),
    )
    resolved = resolve_setting(setting, spec_default_cap=profile.capacity.spec_default_cap)
    for line in _sglang_warnings(args, resolved):
        log(line, "WARNING")
    cap = capacity(profile, resolved)
    if args.context_length < 2:
        raise ConfigError(f"sim serve: context_length = {args.context_length}: must be >= 2; fix: pass a larger one")
    return FaceConfig(
        profile=profile,
        setting=resolved,
        workload=args.workload,
        seed=args.seed,
        time_scale=args.time_scale,
        server_args=_server_args(args, resolved, algorithm),
        model_name=args.served_model_name or args.model_path,
        context_length=args.context_length,
        # Not modelled (the profile has no KV-token law): a nominal pool that never binds.
        max_total_num_tokens=args.max_total_tokens or cap * args.context_length,
        startup_s=max(args.startup_s, args.slow_start or 0.0),
        hang=args.hang,
        stall_stream_after=args.stall_stream_after,
        malformed_sse=args.malformed_sse,
        crash_after=args.crash_after,
        crash_once_file=args.crash_once_file,
        crash_linger_s=args.crash_linger,
    )


async def serve(config: FaceConfig, host: str, port: int, bind_delay_s: float = 0.0) -> None:
    """Run the face until SIGTERM or SIGINT, then close it (open streams get SHUTDOWN_TIMEOUT_S)."""
    await serve_app(
        build_app(config),
        host,
        port,
        delay_s=bind_delay_s,
        delay_line=f"loading weights before binding the port ({bind_delay_s:g} s, --bind-delay)",
        ready_line=f"Uvicorn running on http://{host}:{port} "
        f"(simulated SGLang: a MODEL, time scale {config.time_scale})",
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Parse, apply SGLang's start-up rules and the start-up faults, then serve; returns the exit status."""
    args = build_parser().parse_args(argv)
    if args.fail_at_start:
        return _fail("RuntimeError: simulated start-up failure (--fail-at-start)")
    if not is_loopback(args.host) and not args.allow_remote:
        return _fail(
            f"ValueError: host = {args.host!r}: not a loopback address; the simulator binds only 127.0.0.1/::1 "
            "unless --allow-remote is given; fix: use --host 127.0.0.1"
        )
    try:
        config = make_config(args)
    except ConfigError as exc:
        return _fail(f"ValueError: {exc}")
    mrr = config.setting.max_running_requests or capacity(config.profile, config.setting)
    if args.oom_above is not None and mrr > args.oom_above:
        return _fail(
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. "
            f"(simulated: max_running_requests = {mrr} > --oom-above {args.oom_above})"
        )
    log(f"server_args={config.server_args} (simulated profile {config.profile.name}: a MODEL, not a measurement)")
    if args.fork_child:
        child = _fork_child()
        log(f"started child process {child.pid} (--fork-child)")
    try:
        asyncio.run(serve(config, args.host, args.port, args.bind_delay))
    except OSError as exc:
        return _fail(f"OSError: cannot bind {args.host}:{args.port}: {exc.strerror or exc}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
