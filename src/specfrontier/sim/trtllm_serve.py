"""`python -m specfrontier.sim.trtllm_serve`: the simulator launched the way `trtllm-serve` is launched.

The server it starts is a MODEL of a TensorRT-LLM deployment (a simulator profile), not a measurement of
one, and this face was written from TensorRT-LLM's source, never compared with a running trtllm-serve.
Its command line takes trtllm-serve's click spellings (underscores, aliases, no prefix abbreviations), so
the TensorRT-LLM adapter can probe `serve --help` and launch it exactly as it launches the real server:

    [serve] MODEL [--host localhost] [--port 8000] [--backend pytorch] [--max_batch_size 2048]
        [--max_num_tokens 8192] [--max_seq_len N] [--tensor_parallel_size/--tp_size N]
        [--free_gpu_memory_fraction/--kv_cache_free_gpu_memory_fraction F] [--config/--extra_llm_api_options FILE]

The options file is applied over the flags, as trtllm-serve applies it. Read from it: `enable_iter_perf_stats`,
`max_stats_len`, `return_perf_metrics`, `max_batch_size`, `max_num_tokens`, `max_seq_len` and
`speculative_config`; other keys are accepted and logged as not modelled. `speculative_config` with
`decoding_type: Eagle3` (or its alias `Eagle`) or `MTP` becomes a draft chain of `max_draft_len` tokens
(MTP: else `num_nextn_predict_layers`) under the profile's EAGLE acceptance; the refusals trtllm-serve makes
(`max_draft_len` must be > 0, Eagle needs a draft model) are made too. NGram, DraftTarget and the other
drafters are refused: the simulator has no model of them.

Simulator options, spelled like the rest: `--sim_profile`, `--sim_workload`, `--sim_time_scale`, `--sim_seed`,
`--sim_startup_s` (seconds before the port is listened on: trtllm-serve loads the model with the port bound
but not listening, so connections are refused until it is ready) and `--sim_allow_remote`. The face binds
only the host it is given and refuses a non-loopback one unless `--sim_allow_remote` is passed.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from specfrontier.errors import ConfigError
from specfrontier.sim.costs import capacity
from specfrontier.sim.http_face import log
from specfrontier.sim.http_protocol import FaceConfig
from specfrontier.sim.profile import load_profile
from specfrontier.sim.schedule import Slots
from specfrontier.sim.serving import add_simulator_options, is_loopback, serve_app
from specfrontier.sim.setting import ResolvedSetting
from specfrontier.sim.trtllm_face import TrtllmFaceConfig, build_trtllm_app

VERSION = "1.2.0+sim"
"""What `/version` answers: the release line the face was written from, marked as the simulator."""
DEFAULT_MAX_SEQ_LEN = 32768
DEFAULT_STATS_LEN = 1000
MODELLED_KEYS = frozenset(
    {
        "enable_iter_perf_stats",
        "max_stats_len",
        "return_perf_metrics",
        "max_batch_size",
        "max_num_tokens",
        "max_seq_len",
        "speculative_config",
    }
)
CHAIN_TYPES = ("Eagle3", "Eagle", "MTP")


def build_parser() -> argparse.ArgumentParser:
    """trtllm-serve's `serve` options (the subset the face uses or records), then the simulator's."""
    parser = argparse.ArgumentParser(
        prog="python -m specfrontier.sim.trtllm_serve",
        description="Simulated trtllm-serve (a MODEL of a TensorRT-LLM deployment, not a measurement): "
        "OpenAI-compatible streaming endpoints and iteration stats paced by the simulator core.",
        allow_abbrev=False,
    )
    parser.add_argument("model", help="MODEL: recorded and served as the model name; no weights are loaded.")
    trt = parser.add_argument_group("trtllm-serve options (same spellings as trtllm-serve serve)")
    trt.add_argument("--tokenizer", default=None, help="Accepted and recorded.")
    trt.add_argument("--host", default="localhost", help="Hostname of the server (loopback unless --sim_allow_remote).")
    trt.add_argument("--port", type=int, default=8000, help="Port of the server.")
    trt.add_argument("--backend", default="pytorch", help="pytorch (or _autodeploy); the face models no other.")
    trt.add_argument("--log_level", default="info", help="Accepted and recorded.")
    trt.add_argument("--max_beam_width", type=int, default=1, help="Accepted; beams are not modelled.")
    trt.add_argument("--max_batch_size", type=int, default=2048, help="Maximum number of requests scheduled.")
    trt.add_argument("--max_num_tokens", type=int, default=8192, help="Accepted and recorded.")
    trt.add_argument("--max_seq_len", type=int, default=None, help="Longest prompt + output, in tokens.")
    trt.add_argument("--tensor_parallel_size", "--tp_size", type=int, default=1, help="Accepted and recorded.")
    trt.add_argument("--pipeline_parallel_size", "--pp_size", type=int, default=1, help="Accepted and recorded.")
    trt.add_argument("--moe_expert_parallel_size", "--ep_size", type=int, default=None, help="Accepted.")
    trt.add_argument("--gpus_per_node", type=int, default=None, help="Accepted and recorded.")
    trt.add_argument(
        "--free_gpu_memory_fraction", "--kv_cache_free_gpu_memory_fraction", type=float, default=0.9, help="Recorded."
    )
    trt.add_argument("--num_postprocess_workers", type=int, default=0, help="Accepted and recorded.")
    trt.add_argument("--trust_remote_code", action="store_true", help="Accepted and recorded.")
    trt.add_argument("--revision", default=None, help="Accepted and recorded.")
    trt.add_argument(
        "--config", "--extra_llm_api_options", dest="extra_llm_api_options", default=None, help="YAML options file."
    )
    trt.add_argument("--reasoning_parser", default=None, help="Accepted and recorded.")
    trt.add_argument("--tool_parser", default=None, help="Accepted and recorded.")
    add_simulator_options(
        parser, lambda name: "--sim_" + name.replace("-", "_"), startup_help="Seconds before the port is listened on."
    )
    return parser


def read_options(path: str | None) -> dict[str, Any]:
    """The options file as a mapping ({} without one); ConfigError as trtllm-serve would fail on it."""
    if path is None:
        return {}
    try:
        data = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(f"cannot read the options file {path}: {exc}") from exc
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: Configuration file root must be a mapping.")
    return data


def _positive_int(options: Mapping[str, Any], key: str, default: int | None) -> int | None:
    value = options.get(key, default)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{key} = {value!r}: must be a positive integer")
    return value


def resolve_speculation(spec: object, max_batch_size: int) -> ResolvedSetting:
    """`speculative_config` -> the simulator's resolved chain, with trtllm-serve's own refusals."""
    if spec is None:
        return ResolvedSetting(False, 0, 1, 1, max_batch_size)
    if not isinstance(spec, Mapping):
        raise ConfigError("speculative_config: must be a mapping")
    kind = spec.get("decoding_type")
    if kind not in CHAIN_TYPES:
        raise ConfigError(
            f"speculative_config.decoding_type = {kind!r}: the simulator models only draft chains of "
            f"{', '.join(CHAIN_TYPES)} (it has no model of NGram, DraftTarget or the other drafters)"
        )
    tree = [
        k for k in ("eagle_choices", "use_dynamic_tree", "dynamic_tree_max_topK") if spec.get(k) not in (None, False)
    ]
    if tree:  # run as a chain it would be a wrong prediction, not a missing one
        raise ConfigError(f"speculative_config.{tree[0]}: the simulator models only draft chains, not an Eagle3 tree")
    depth = spec.get("max_draft_len")
    if kind == "MTP" and depth is None:
        depth = spec.get("num_nextn_predict_layers")
        if depth is None:
            raise ConfigError(
                "speculative_config: MTP without max_draft_len takes the depth from the checkpoint, and the "
                "simulator has none; set max_draft_len"
            )
    label = "Eagle" if kind != "MTP" else "MTP"
    if isinstance(depth, bool) or not isinstance(depth, int) or depth <= 0:
        raise ConfigError(f"max_draft_len must be > 0 for {label}")
    if kind != "MTP" and spec.get("speculative_model", spec.get("speculative_model_dir")) is None:
        raise ConfigError("Draft model must be provided for EAGLE")
    head = "EAGLE3" if kind != "MTP" else None  # TensorRT-LLM's Eagle is Eagle3; MTP uses the model's own layers
    slots = _draft_len_slots(spec.get("draft_len_schedule"), depth)
    return ResolvedSetting(
        True, depth, 1, depth + 1, max_batch_size, algorithm=head, schedule=slots, schedule_start=depth
    )


def _draft_len_slots(schedule: object, max_draft_len: int) -> Slots:
    """`draft_len_schedule` (keys are UPPER bounds; no speculation above the last) as the simulator's ranges
    keyed by their first batch size, with TensorRT-LLM's own refusals (llm_args.py @00043967)."""
    if schedule is None:
        return ()
    if not isinstance(schedule, Mapping) or not schedule:
        raise ConfigError("draft_len_schedule: must be a non-empty mapping of batch size to draft length")
    try:
        items = sorted((int(k), int(v)) for k, v in schedule.items())
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"draft_len_schedule: keys and values must be integers ({exc})") from exc
    for key, value in items:
        if key < 1 or not 0 <= value <= max_draft_len:
            raise ConfigError(f"draft_len_schedule[{key}] = {value}: batch sizes >= 1, values in [0, max_draft_len]")
    if items[0][1] != max_draft_len:
        raise ConfigError("draft_len_schedule: the value at the smallest batch size must equal max_draft_len")
    starts = [1, *(key + 1 for key, _ in items[:-1])]
    return (*((lo, (value,)) for lo, (_, value) in zip(starts, items, strict=True)), (items[-1][0] + 1, (0,)))


def make_config(args: argparse.Namespace) -> TrtllmFaceConfig:
    """The face's configuration from the flags and the options file over them; ConfigError where
    trtllm-serve (or the simulator) would refuse to start."""
    if args.backend not in ("pytorch", "_autodeploy"):
        raise ConfigError(f"--backend {args.backend}: the simulator models the PyTorch backend only")
    options = read_options(args.extra_llm_api_options)
    for key in sorted(set(options) - MODELLED_KEYS):
        log(f"options file key {key!r} accepted but not modelled by the simulator", "WARNING")
    max_batch_size = _positive_int(options, "max_batch_size", args.max_batch_size) or args.max_batch_size
    max_num_tokens = _positive_int(options, "max_num_tokens", args.max_num_tokens) or args.max_num_tokens
    max_seq_len = _positive_int(options, "max_seq_len", args.max_seq_len) or DEFAULT_MAX_SEQ_LEN
    stats_len = options.get("max_stats_len", DEFAULT_STATS_LEN)
    if isinstance(stats_len, bool) or not isinstance(stats_len, int) or stats_len < -1:
        raise ConfigError(f"max_stats_len = {stats_len!r}: must be an integer >= -1")
    setting = resolve_speculation(options.get("speculative_config"), max_batch_size)
    profile = load_profile(args.sim_profile)
    profile.workload(args.sim_workload, where="sim trtllm_serve --sim_workload")
    if not args.sim_time_scale > 0:
        raise ConfigError(f"--sim_time_scale {args.sim_time_scale}: must be > 0")
    cap = capacity(profile, setting)
    model_dir = Path(args.model)
    model_name = model_dir.name if model_dir.is_dir() else args.model
    server_args = {
        "model": args.model,
        "backend": args.backend,
        "max_batch_size": max_batch_size,
        "max_num_tokens": max_num_tokens,
        "max_seq_len": max_seq_len,
        "tensor_parallel_size": args.tensor_parallel_size,
        "free_gpu_memory_fraction": args.free_gpu_memory_fraction,
        "speculative_config": options.get("speculative_config"),
    }
    base = FaceConfig(
        profile=profile,
        setting=setting,
        workload=args.sim_workload,
        seed=args.sim_seed,
        time_scale=args.sim_time_scale,
        server_args=server_args,
        model_name=model_name,
        context_length=max_seq_len,
        max_total_num_tokens=cap * max_seq_len,
        startup_s=max(0.0, args.sim_startup_s),
    )
    return TrtllmFaceConfig(
        base=base,
        max_batch_size=max_batch_size,
        max_num_tokens=max_num_tokens,
        iter_perf_stats=bool(options.get("enable_iter_perf_stats", False)),
        max_stats_len=None if stats_len == -1 else max(stats_len, 1),
        drain_on_completion=bool(options.get("return_perf_metrics", False)),
        version=VERSION,
    )


async def serve(config: TrtllmFaceConfig, host: str, port: int) -> None:
    """Load (the modelled start-up delay, port not listened on), serve until SIGTERM or SIGINT, then close."""
    await serve_app(
        build_trtllm_app(config),
        host,
        port,
        delay_s=config.base.startup_s,
        delay_line=f"loading the model (simulated, {config.base.startup_s:g} s; connections are refused meanwhile)",
        ready_line=f"Uvicorn running on http://{host}:{port} (simulated trtllm-serve: a MODEL)",
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Parse (a leading `serve` is trtllm-serve's default subcommand), check, then serve; the exit status."""
    args_in = list(sys.argv[1:] if argv is None else argv)
    if args_in[:1] == ["serve"]:
        args_in = args_in[1:]
    args = build_parser().parse_args(args_in)
    if not is_loopback(args.host) and not args.sim_allow_remote:
        print(
            f"ValueError: host = {args.host!r}: not a loopback address; the simulator binds only loopback "
            "unless --sim_allow_remote is given; fix: use --host 127.0.0.1",
            file=sys.stderr,
            flush=True,
        )
        return 1
    try:
        config = make_config(args)
    except ConfigError as exc:
        print(f"ValueError: {exc}", file=sys.stderr, flush=True)
        return 1
    log(f"server args {config.base.server_args} (simulated profile {config.base.profile.name}: a MODEL)")
    try:
        asyncio.run(serve(config, args.host, args.port))
    except OSError as exc:
        print(f"RuntimeError: Failed to bind socket to {args.host}:{args.port}: {exc}", file=sys.stderr, flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
