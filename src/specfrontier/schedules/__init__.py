"""Schedules: the measured best speculation depth per batch size, exported in the formats vLLM
(`num_speculative_tokens_per_batch_size`) and SGLang (adaptive `candidate_steps` per batch size) read,
and the static best setting for a declared workload (interactive, throughput, SLO-bound)."""

from specfrontier.schedules.choose import (
    DepthSchedule,
    LevelChoice,
    ScheduleEntry,
    StaticChoice,
    depth_schedule,
    static_choices,
    stored_setting,
)
from specfrontier.schedules.sglang import sglang_adaptive_command, sglang_adaptive_config
from specfrontier.schedules.vllm import vllm_command, vllm_speculative_config

__all__ = [
    "DepthSchedule",
    "LevelChoice",
    "ScheduleEntry",
    "StaticChoice",
    "depth_schedule",
    "sglang_adaptive_command",
    "sglang_adaptive_config",
    "static_choices",
    "stored_setting",
    "vllm_command",
    "vllm_speculative_config",
]
