"""A depth schedule as SGLang's adaptive speculative config (`--speculative-adaptive-config FILE`).

Format (SGLang `python/sglang/srt/speculative/adaptive_spec_params.py` and `adaptive_step_router.py`,
read at the source): a JSON object whose integer-string keys are batch sizes, each with a non-empty
`candidate_steps` list of non-negative ints; a running batch is routed to the largest key not above
it (the smallest key below that). Within a slot the EMA controller moves among its candidates by
acceptance; one candidate per slot pins the depth chosen from the measurements. The union of the
candidates sizes the buffers, and `--speculative-num-steps` must be one of them (checked at startup),
so it is set to the deepest. Adaptive mode runs EAGLE/EAGLE3 with eagle_topk 1 only.
"""

from __future__ import annotations

import shlex
from typing import Any

from specfrontier.errors import ConfigError
from specfrontier.schedules.choose import DepthSchedule

ADAPTIVE_ALGORITHMS = ("EAGLE", "EAGLE3")


def sglang_adaptive_config(schedule: DepthSchedule) -> dict[str, Any]:
    """`{"<batch size>": {"candidate_steps": [steps]}, ...}`, one pinned slot per schedule range."""
    algorithm = schedule.template.algorithm or ""
    if algorithm not in ADAPTIVE_ALGORITHMS:
        raise ConfigError(
            f"setting {schedule.template.name!r}: algorithm = {algorithm!r}: SGLang's adaptive mode runs "
            f"{'/'.join(ADAPTIVE_ALGORITHMS)} only; fix: export --engine vllm, or schedule an EAGLE3 ladder"
        )
    if schedule.max_depth == 0:
        raise ConfigError(
            "schedule: no speculative setting beat the baseline at any measured level, so there is nothing to "
            "schedule; fix: run without speculation (see the static choices)"
        )
    return {str(e.batch_lo): {"candidate_steps": [e.depth]} for e in schedule.entries}


def sglang_adaptive_command(
    schedule: DepthSchedule,
    config_path: str,
    *,
    model: str = "<model-path>",
    draft_model: str | None = "<draft-model-path>",
) -> str:
    """`sglang.launch_server` in adaptive mode at the schedule's deepest step, reading `config_path`."""
    steps = schedule.max_depth
    t = schedule.template
    argv = ["python", "-m", "sglang.launch_server", "--model-path", model, "--speculative-algorithm", t.algorithm or ""]
    if draft_model is not None:
        argv += ["--speculative-draft-model-path", draft_model]
    argv += ["--speculative-num-steps", str(steps), "--speculative-eagle-topk", "1"]
    argv += ["--speculative-num-draft-tokens", str(steps + 1)]
    argv += ["--speculative-adaptive", "--speculative-adaptive-config", config_path]
    if t.max_running_requests is not None:
        argv += ["--max-running-requests", str(t.max_running_requests)]
    return shlex.join(argv)


__all__ = ["ADAPTIVE_ALGORITHMS", "sglang_adaptive_command", "sglang_adaptive_config"]
