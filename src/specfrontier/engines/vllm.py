"""vLLM, known so far by how its settings spell the speculative parameters and by its schedule format.

Tables measured on vLLM (`specfrontier import`) and the vLLM schedule format use these names; the
adapter that launches `vllm serve` per setting is not built yet (see the open issues).

The schedule format:A depth schedule as vLLM's `--speculative-config` with `num_speculative_tokens_per_batch_size`.

Format (vLLM `vllm/v1/spec_decode/dynamic/utils.py`, `validate_and_normalize_dynamic_sd_schedule` and
`build_dynamic_sd_schedule_lookup`, read at the source): a non-empty list of `[bs_lo, bs_hi, K]`
entries, positive batch sizes with lo <= hi, K >= 0, sorted ranges that do not overlap, the first
starting at 1; a batch size in a gap takes the previous K, one above the last range the last K, and
every K is capped at `num_speculative_tokens`, which is the startup maximum (buffers are sized for it),
so it is set to the deepest K of the schedule. SGLang algorithms map to vLLM methods as in
shared/reference/engines.md section 5 (a chain of `num_steps` = `num_speculative_tokens`).
"""

from __future__ import annotations

import json
import shlex
from typing import Any, ClassVar

from specfrontier.engines.base import EngineSetting, ParamNames, ScheduleFormat
from specfrontier.engines.registry import register_names, register_schedule_format
from specfrontier.errors import ConfigError

VLLM_NAMES = ParamNames(
    depth=("num_speculative_tokens",),
    family=("method",),
    draft_length=("num_speculative_tokens",),
)

register_names("vllm", VLLM_NAMES)


VLLM_METHOD = {"EAGLE": "eagle", "EAGLE3": "eagle3", "NEXTN": "mtp", "STANDALONE": "draft_model"}


def _method(schedule: Any) -> str:
    algorithm = schedule.template.drafter or ""
    if algorithm not in VLLM_METHOD:
        raise ConfigError(
            f"setting {schedule.template.name!r}: algorithm = {algorithm!r} has no vLLM dynamic-K method; "
            f"fix: export --engine sglang, or schedule one of {', '.join(VLLM_METHOD)}"
        )
    return VLLM_METHOD[algorithm]


def vllm_speculative_config(schedule: Any, *, draft_model: str = "<draft-model-path>") -> dict[str, Any]:
    """The `--speculative-config` object: method, draft, maximum K, and the per-batch-size table."""
    if schedule.max_depth == 0:
        raise ConfigError(
            "schedule: no speculative setting beat the baseline at any measured level, so there is nothing to "
            "schedule; fix: run without speculation (see the static choices)"
        )
    config: dict[str, Any] = {"method": _method(schedule)}
    if config["method"] != "mtp":
        config["model"] = draft_model
    config["num_speculative_tokens"] = schedule.max_depth
    config["num_speculative_tokens_per_batch_size"] = [[e.batch_lo, e.batch_hi, e.depth] for e in schedule.entries]
    return config


def vllm_command(speculative_config: dict[str, Any], *, model: str = "<model-path>") -> str:
    """`vllm serve` with the schedule (bound to 127.0.0.1; vLLM listens on all interfaces by default)."""
    argv = ["vllm", "serve", model, "--host", "127.0.0.1", "--speculative-config", json.dumps(speculative_config)]
    return shlex.join(argv)


class VllmDynamicSchedule(ScheduleFormat):
    """vLLM's `--speculative-config` with `num_speculative_tokens_per_batch_size`, and `vllm serve`."""

    engine: ClassVar[str] = "vllm"

    def config(self, schedule: Any, *, draft_model: str) -> dict[str, Any]:
        return vllm_speculative_config(schedule, draft_model=draft_model)

    def command(
        self, schedule: Any, config: dict[str, Any], config_path: str, *, model: str, draft_model: str | None
    ) -> str:
        return vllm_command(config, model=model)

    def static_command(
        self, setting: EngineSetting, stored: tuple[str, ...] | None, *, model: str, draft_model: str | None
    ) -> str:
        """`vllm serve` with the setting's drafter and depth as vLLM's speculative config."""
        argv = ["vllm", "serve", model, "--host", "127.0.0.1"]
        if setting.speculative:
            method = VLLM_METHOD.get(setting.drafter or "")
            if setting.depth is None or method is None:
                return f"(no vLLM equivalent of {setting.name}: vLLM has no tree/top-k drafting or {setting.drafter})"
            spec: dict[str, Any] = {"method": method, "num_speculative_tokens": setting.depth}
            if method != "mtp":
                spec["model"] = draft_model or "<draft-model-path>"
            argv += ["--speculative-config", json.dumps(spec)]
        return shlex.join(argv)


register_schedule_format(VllmDynamicSchedule())

__all__ = ["VLLM_METHOD", "VLLM_NAMES", "VllmDynamicSchedule", "vllm_command", "vllm_speculative_config"]
