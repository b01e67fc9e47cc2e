"""The engines' own rules for reading a schedule, restated from their source for the tests.

vLLM `vllm/v1/spec_decode/dynamic/utils.py` (validate_and_normalize_dynamic_sd_schedule,
build_dynamic_sd_schedule_lookup) and SGLang `python/sglang/srt/speculative/adaptive_spec_params.py`
(_load_adaptive_config, resolve_candidate_steps_from_config), `adaptive_step_router.py`
(batch_size_key_for_batch) and `arg_groups/speculative_hook.py` (_init_adaptive_speculative_params).
Kept apart from the exporter so a test does not check the exporter against itself.
"""

from __future__ import annotations

import bisect
from typing import Any


def vllm_lookup(schedule: object, max_batch_size: int, num_speculative_tokens: int) -> list[int]:
    """K per batch size (index 0 unused), raising ValueError where vLLM raises (3-item entries)."""
    if num_speculative_tokens <= 0 or max_batch_size <= 0:
        raise ValueError("num_speculative_tokens and max batch size must be > 0")
    if not isinstance(schedule, list) or not schedule:
        raise ValueError("schedule must be a non-empty list")
    parsed: list[tuple[int, int, int]] = []
    for entry in schedule:
        if not isinstance(entry, list | tuple) or len(entry) != 3:
            raise ValueError("each entry must be (bs_lo, bs_hi, K)")
        lo, hi, k = int(entry[0]), int(entry[1]), int(entry[2])
        if lo <= 0 or hi <= 0:
            raise ValueError("batch-size range must be positive")
        if lo > hi:
            raise ValueError("batch-size range start must be <= end")
        if k < 0:
            raise ValueError("K must be >= 0")
        parsed.append((lo, hi, k))
    ranges = sorted({(lo, hi) for lo, hi, _ in parsed})
    prev_end = 0
    for lo, hi in ranges:
        if lo <= prev_end:
            raise ValueError("batch-size ranges must be non-overlapping and sorted")
        prev_end = hi
    if ranges[0][0] != 1:
        raise ValueError("the first batch-size range must start at 1")
    dense = [0] * (max_batch_size + 1)
    next_bs, last_k = 1, None
    for lo, hi, k in sorted(parsed):
        if lo > next_bs and last_k is not None:
            for bs in range(next_bs, min(lo, max_batch_size + 1)):
                dense[bs] = min(num_speculative_tokens, last_k)
        for bs in range(max(lo, next_bs), min(hi, max_batch_size) + 1):
            dense[bs] = min(num_speculative_tokens, k)
        next_bs, last_k = max(next_bs, hi + 1), k
    if last_k is not None:
        for bs in range(next_bs, max_batch_size + 1):
            dense[bs] = min(num_speculative_tokens, last_k)
    return dense


def sglang_candidate_steps(config: dict[str, Any]) -> dict[int, list[int]]:
    """Batch-size key -> candidate steps, raising ValueError where SGLang raises."""
    if not isinstance(config, dict):
        raise ValueError("adaptive config must be a JSON object")
    slots: dict[int, list[int]] = {}
    for key, entry in config.items():
        if not key.isdigit():
            continue
        steps = entry.get("candidate_steps")
        if not isinstance(steps, list) or not steps or not all(isinstance(s, int) and s >= 0 for s in steps):
            raise ValueError(f"BS {key}: candidate_steps must be a list of non-negative ints")
        slots[int(key)] = sorted(set(steps))
    if not slots:
        raise ValueError("adaptive config needs at least one integer-string BS key")
    return slots


def sglang_check_num_steps(config: dict[str, Any], num_steps: int) -> None:
    union = sorted({s for steps in sglang_candidate_steps(config).values() for s in steps})
    if num_steps not in union:
        raise ValueError(f"--speculative-num-steps={num_steps} is not in the adaptive candidate_steps {union}")


def sglang_slot_for_batch(config: dict[str, Any], batch_size: int) -> list[int]:
    """The candidates of the slot a batch is routed to (no CUDA-graph padding)."""
    slots = sglang_candidate_steps(config)
    keys = sorted(slots)
    index = bisect.bisect_right(keys, batch_size) - 1
    return slots[keys[max(0, index)]]


def trtllm_lookup(schedule: object, max_draft_len: int, max_batch_size: int) -> list[int]:
    """Draft length per batch size (index 0 unused), raising ValueError where TensorRT-LLM raises.

    TensorRT-LLM `tensorrt_llm/llmapi/llm_args.py` (DecodingBaseConfig.validate_draft_len_schedule, @00043967)
    and `tensorrt_llm/_torch/speculative/utils.py` (get_draft_len_for_batch_size, @011d0933): keys >= 1,
    values 0..max_draft_len, the value at the smallest key equal to max_draft_len; a batch size takes the
    value of the first key not below it (bisect_left), and above the last key no speculation (0)."""
    if not isinstance(schedule, dict) or not schedule:
        raise ValueError("draft_len_schedule must be a non-empty dict")
    items = sorted((int(k), int(v)) for k, v in schedule.items())
    for key, value in items:
        if key < 1:
            raise ValueError(f"draft_len_schedule: batch size keys must be >= 1, got {key}")
        if value < 0 or value > max_draft_len:
            raise ValueError(f"draft_len_schedule: values must be in [0, max_draft_len], got {value}")
    if items[0][1] != max_draft_len:
        raise ValueError("draft_len_schedule: the value at the smallest batch size must equal max_draft_len")
    keys = [k for k, _ in items]
    dense = [0] * (max_batch_size + 1)
    for bs in range(1, max_batch_size + 1):
        index = bisect.bisect_left(keys, bs)
        dense[bs] = items[index][1] if index < len(items) else 0
    return dense
