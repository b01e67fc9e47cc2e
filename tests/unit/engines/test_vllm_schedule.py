"""vLLM's num_speculative_tokens_per_batch_size as a setting: vLLM's own rules before launch and the
conversion `verify_schedule` uses, read back with vLLM's lookup (tests/schedule_rules.py). The real vLLM
running such a setting: tests/integration/test_vllm_sweep.py."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from schedule_rules import vllm_lookup
from specfrontier.engines.vllm import VllmSetting

NGRAM = {"name": "s", "method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4, "prompt_lookup_min": 2}


def _setting(table: Any) -> VllmSetting:
    return VllmSetting.model_validate({**NGRAM, "num_speculative_tokens_per_batch_size": table})


@pytest.mark.parametrize(
    ("table", "message", "vllm_refuses"),
    [
        ([[2, 8, 4]], "must start at batch size 1", True),
        ([[1, 4, 4], [4, 8, 1]], "ranges overlap at 4", True),
        ([[1, 0, 4]], "ranges are 1 <= first <= last", True),
        ([], "is empty", True),
        # vLLM clamps a count above num_speculative_tokens without a word; refused here so the table says
        # what runs (as SGLang's silent rewrites are refused).
        ([[1, 4, 5]], r"counts 0..num_speculative_tokens \(4\)", False),
    ],
)
def test_vllms_own_rules_are_checked_before_launch(table: Any, message: str, vllm_refuses: bool) -> None:
    with pytest.raises(ValidationError, match=message):
        _setting(table)
    if vllm_refuses:
        with pytest.raises(ValueError):
            vllm_lookup(table, 64, 4)
    else:
        assert vllm_lookup(table, 64, 4)[1] == 4  # clamped


def test_a_schedule_by_first_batch_size_becomes_vllms_inclusive_ranges() -> None:
    template = VllmSetting.model_validate(NGRAM)
    setting = template.with_schedule([(1, 4), (8, 2), (32, 0)], "x")
    table = setting.num_speculative_tokens_per_batch_size
    assert table == [(1, 7, 4), (8, 31, 2), (32, 65536, 0)] and setting.num_speculative_tokens == 4
    assert setting.scheduled and setting.depth_field is None and setting.schedule_batch_sizes == (1, 8, 32)
    config = setting.speculative_config(None)
    assert config is not None and config["num_speculative_tokens_per_batch_size"] == table
    dense = vllm_lookup([list(t) for t in table], 64, 4)
    assert (dense[1], dense[7], dense[8], dense[31], dense[32], dense[64]) == (4, 4, 2, 2, 0, 0)
