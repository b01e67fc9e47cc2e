"""`python -m specfrontier.sim.sglang_frontend`: SGLang 0.5.23's own server with the simulator as its GPU.

Run with the Python of `.venv-sglang` (`scripts/install.sh --sglang`: the registry wheel `sglang==0.5.23`
without its GPU dependencies, CPU torch). It takes exactly `python -m sglang.launch_server`'s arguments
and runs SGLang's own launch path: `prepare_server_args` (SGLang's parser, so `--help` is SGLang's and
unknown flags are refused as SGLang refuses them), `launch_server` (the start-up resolution hooks: the
reset of an unset `--max-running-requests` to 48 under speculation, NGRAM's breadth as topk and steps 0,
the topk-1 chain's draft tokens; the TokenizerManager, the DetokenizerManager process, the FastAPI app with
`/health_generate`, `/server_info`, `/v1/chat/completions`, `/v1/completions`, `/generate`, uvicorn).
Only the scheduler process is replaced, through `launch_server`'s own `run_scheduler_process_func`
parameter, by `sim.sglang_scheduler`: the simulator decides when tokens are ready and how many drafts
each verify step accepted; SGLang's code does everything else. What it serves is a MODEL.

What differs from SGLang on a GPU (docs/architecture.md, "SGLang's own front end as the test double"):
- `--device cpu` is added when no device is given (this machine has no accelerator): SGLang's resolution
  then takes its CPU paths (the torch_native attention backend, no overlap schedule) where a GPU server
  would take CUDA's; the speculative settings, the capacity and the request path resolve the same way.
- `--skip-server-warmup` is added when absent (the warm-up request would only cost a launch a second).
- torchvision's C++ ops are CUDA builds on the registry; the front end imports torchvision only for
  multimodal transforms, so the two operator schemas its import registers fake kernels for (`nms`,
  `qnms`) are declared first (`sglang_scheduler.declare_torchvision_schemas`) and no kernel is ever run.
- The simulator's own options are `--sim-profile` (a shipped profile's name, or a profile JSON file's path),
  `--sim-workload`, `--sim-time-scale` and `--sim-seed`,
  and one fault: `--sim-crash-after N` (with `--sim-crash-once-file PATH`) kills the scheduler process after
  N answered requests, and SGLang's own watchdog takes the server down; they are taken off the command line
  before SGLang parses it.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

from specfrontier.sim.sglang_scheduler import ENV_PREFIX

SIM_OPTIONS = (
    "--sim-profile",
    "--sim-workload",
    "--sim-time-scale",
    "--sim-seed",
    "--sim-crash-after",
    "--sim-crash-once-file",
)
SGLANG_VERSION = "0.5.23"
"""The SGLang whose private launch names (`launch_server`'s scheduler hook, the ZMQ messages) this speaks."""


def take_sim_options(argv: Sequence[str]) -> tuple[list[str], dict[str, str]]:
    """Split `--sim-NAME VALUE` (or `--sim-NAME=VALUE`) from SGLang's arguments."""
    rest: list[str] = []
    options: dict[str, str] = {}
    items = list(argv)
    i = 0
    while i < len(items):
        arg = items[i]
        name, eq, value = arg.partition("=")
        if name in SIM_OPTIONS:
            if not eq:
                if i + 1 >= len(items):
                    raise SystemExit(f"sglang_frontend: {name} needs a value")
                value = items[i + 1]
                i += 1
            options[name.removeprefix("--sim-").replace("-", "_")] = value
        else:
            rest.append(arg)
        i += 1
    return rest, options


def with_defaults(argv: list[str]) -> list[str]:
    """`--device cpu` and `--skip-server-warmup` unless the command names them (see the module docstring)."""
    out = list(argv)
    if not any(a == "--device" or a.startswith("--device=") for a in out) and "--help" not in out:
        out += ["--device", "cpu"]
    if "--skip-server-warmup" not in out and "--help" not in out:
        out.append("--skip-server-warmup")
    return out


def main(argv: Sequence[str] | None = None) -> int:
    """Parse and launch as `sglang.launch_server` does, with the simulated scheduler."""
    args, options = take_sim_options(sys.argv[1:] if argv is None else argv)
    for name, value in options.items():
        os.environ[ENV_PREFIX + name.upper()] = value  # inherited by the spawned scheduler
    from sglang.srt.entrypoints.http_server import launch_server
    from sglang.srt.server_args import prepare_server_args

    from specfrontier.sim.sglang_scheduler import run_simulated_scheduler

    server_args = prepare_server_args(with_defaults(args))
    launch_server(server_args, run_scheduler_process_func=run_simulated_scheduler)
    return 0


if __name__ == "__main__":
    sys.exit(main())
