"""Model cells from a stored run: engine spellings of a setting -> `SettingParams`, summaries -> figures.

One mapping for every engine, because imported tables use the same names as the engines' flags:
depth from `num_steps` (SGLang), `num_speculative_tokens` (vLLM), `draft_n_max` (llama.cpp) or `steps`;
branching from `eagle_topk`/`topk`; verified tokens from `num_draft_tokens`; the drafter family from
`algorithm` (SGLang), `method` (vLLM) or `spec_type` (llama.cpp). A setting with none of them, or with
`spec_type: none`, is the no-speculation baseline.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from specfrontier.analysis.summary import RunData
from specfrontier.errors import ConfigError
from specfrontier.model.types import ModelCell, SettingParams
from specfrontier.store import CellRow

DEPTH_KEYS = ("num_steps", "num_speculative_tokens", "draft_n_max", "steps")
FAMILY_KEYS = ("algorithm", "method", "spec_type", "family")
LLAMACPP_DEFAULT_DRAFT_MAX = 16
"""llama-server's default --spec-draft-n-max, used when a llama.cpp setting leaves it unset."""


def _int_param(params: Mapping[str, Any], key: str, where: str) -> int | None:
    value = params.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or int(value) != value or value < 0:
        raise ConfigError(f"{where}: {key} = {value!r}: not a whole number >= 0; fix: write a whole number")
    return int(value)


def setting_params(params: Mapping[str, Any], *, where: str = "setting") -> SettingParams:
    """The model's view of an engine setting's parameters (see the module docstring for the names)."""
    family_raw = next((params[k] for k in FAMILY_KEYS if params.get(k) is not None), None)
    family = str(family_raw) if family_raw is not None else None
    depth = next((d for k in DEPTH_KEYS if (d := _int_param(params, k, where)) is not None), None)
    cap = _int_param(params, "max_running_requests", where)
    if family is not None and family.lower() in ("none", "off", "no-spec", ""):
        return SettingParams(max_running_requests=cap)
    if depth is None and family is not None and params.get("spec_type") is not None:
        depth = LLAMACPP_DEFAULT_DRAFT_MAX
    if depth is None or depth == 0:
        if family is not None:
            raise ConfigError(
                f"{where}: {FAMILY_KEYS[0]}/spec_type = {family!r} but no draft depth; "
                f"fix: add one of {', '.join(DEPTH_KEYS)}"
            )
        return SettingParams(max_running_requests=cap)
    topk = _int_param(params, "eagle_topk", where) or _int_param(params, "topk", where) or 1
    draft = _int_param(params, "num_draft_tokens", where)
    if topk == 1:
        draft = None  # a chain always verifies steps + 1 (SGLang rewrites any other value)
    return SettingParams(
        steps=depth, topk=topk, draft_tokens=draft, family=family or "speculative", max_running_requests=cap
    )


def cells_from_run(data: RunData, output_tokens: Mapping[tuple[str, int], float] | None = None) -> list[ModelCell]:
    """One ModelCell per closed-loop cell of a stored run (medians over repeats; open-loop cells are skipped,
    the model is closed-loop). Noisy and client-limited cells are kept and flagged. `output_tokens`:
    mean output tokens per request by (setting, C), see `output_tokens_by_cell`."""
    out = []
    for cell in data.cells:
        if cell.request_rate is not None:
            continue
        row = data.setting(cell.setting)
        params = setting_params(row.params, where=f"run {data.run.run_id}: settings[{row.name}]")
        counters = cell.counters
        flags = tuple(
            text for on, text in ((cell.noisy, "noisy repeats"), (cell.client_limited, "client-limited")) if on
        )
        out.append(
            ModelCell(
                setting=cell.setting,
                params=params,
                concurrency=cell.concurrency,
                per_request_tok_s=cell.per_request_tok_s_p50.median,
                aggregate_tok_s=cell.aggregate_tok_s.median,
                capacity=row.capacity,
                acceptance_length=counters.acceptance_length if counters and params.speculative else None,
                acceptance_per_position=counters.per_position_rate if counters and params.speculative else (),
                flags=flags,
                output_tokens=(output_tokens or {}).get((cell.setting, cell.concurrency)),
            )
        )
    return out


def output_tokens_by_cell(rows: Sequence[CellRow]) -> dict[tuple[str, int], float]:
    """Mean server-reported output tokens per ok request, by (setting, C), over a cell's closed-loop repeats."""
    sums: dict[tuple[str, int], list[int]] = {}
    for row in rows:
        if row.request_rate is not None:
            continue
        acc = sums.setdefault((row.setting_id, row.concurrency), [0, 0])
        for r in row.requests:
            if r.ok and r.completion_tokens:
                acc[0] += r.completion_tokens
                acc[1] += 1
    return {key: total / n for key, (total, n) in sums.items() if n}


__all__ = ["DEPTH_KEYS", "FAMILY_KEYS", "cells_from_run", "output_tokens_by_cell", "setting_params"]
