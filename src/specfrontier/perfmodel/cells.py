"""Model cells from a stored run: a setting's parameters -> `SettingParams`, summaries -> figures.

One mapping for every engine, because stored and imported parameters use the engines' own names: each
engine declares how its settings spell depth, branching, verified tokens and drafter family
(`engines.base.ParamNames`), and the registry merges them (`engines.registry.vocabulary`). A setting with
none of them, or with a family that means "none", is the no-speculation baseline.

A family whose engine says where its depth is (`ParamNames.family_depth`) reads that field, else the engine's
own default, and nothing else: llama.cpp's n-gram types draft `ngram_size_m` (default 48), `ngram_mod_n_max`
(64) or a fixed 8 (`ngram-cache`), never `draft_n_max`, which only its draft-model types read. Otherwise a
sized n-gram drafter's depth is its draft length (llama.cpp `ngram_size_m`) when no depth is set. A scalar
knob the model has no term for (llama.cpp's lookup key `ngram_size_n`, a vLLM draft model's path) makes a
drafter family of its own (`ngram-map-k[ngram_size_n=2]`): settings that differ in it accept differently, so
the model neither merges them nor predicts one from another.

A setting run by an adaptive policy of its engine (`adaptive`: an imported table's mode name such as vLLM's
`enable_adaptive_verification`, or the simulator's per-batch-size candidates) is a drafter family of its own
(`dspark+enable_adaptive_verification`): it verifies a varying draft, so neither its acceptance nor its cost
is the static setting's of the same maximum depth, and nothing measured statically predicts it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from specfrontier.analysis.summary import RunData
from specfrontier.engines.registry import NO_SPECULATION, vocabulary
from specfrontier.errors import ConfigError
from specfrontier.perfmodel.types import ModelCell, SettingParams
from specfrontier.store import CellRow
from specfrontier.store.cell_requests import request_heads

ADAPTIVE = "adaptive"
"""The parameter that marks a setting run by an adaptive policy (the importer's column of that name)."""


def setting_params(params: Mapping[str, Any], *, where: str = "setting") -> SettingParams:
    """The performance model's view of a setting's parameters, in any registered engine's spelling."""
    names = vocabulary()
    family_raw = next((params[k] for k in names.family if params.get(k) is not None), None)
    family = str(family_raw) if family_raw is not None else None
    depth = next((d for k in names.depth if (d := _whole(params, k, where)) is not None), None)
    cap = _whole(params, "max_running_requests", where)
    if family is not None and family.lower() in NO_SPECULATION:
        return SettingParams(max_running_requests=cap)
    own = names.own_depth(params)
    if own is not None:  # the family's own depth field, else the engine's default (llama.cpp ngram-cache: 8)
        value = _whole(params, own.field, where) if own.field else None
        depth = value if value is not None else own.default
    if depth is None and family is not None:  # a draft length the engine drafts up to (llama.cpp's size-m)
        lengths = (k for k in names.draft_length if k not in names.verified)
        depth = next((d for k in lengths if (d := _whole(params, k, where)) is not None), None)
    if depth is None and family is not None:
        depth = next((d for k, d in names.default_depth.items() if params.get(k) is not None), None)
    if depth is None or depth == 0:
        if family is not None:
            raise ConfigError(
                f"{where}: {'/'.join(names.family)} = {family!r} but no draft depth; "
                f"fix: add one of {', '.join(names.depth)}"
            )
        return SettingParams(max_running_requests=cap)
    topk = next((t for k in names.topk if (t := _whole(params, k, where))), None) or 1
    verified = next((v for k in names.verified if (v := _whole(params, k, where)) is not None), None)
    if topk == 1:
        verified = None  # a chain always verifies steps + 1 (SGLang rewrites any other value)
    family = family or "speculative"
    policy = params.get(ADAPTIVE)
    if policy:
        family = f"{family}+{policy if isinstance(policy, str) else ADAPTIVE}"
    modelled = {*names.family, *names.depth, *names.topk, *names.verified, *names.draft_length, ADAPTIVE}
    others = sorted(
        f"{k}={v}"
        for k, v in params.items()
        if k not in modelled and k != "max_running_requests" and isinstance(v, str | int | float) and v is not None
    )
    if others:  # a knob the model has no term for (llama.cpp's lookup key size-n): a drafter of its own
        family = f"{family}[{','.join(others)}]"
    return SettingParams(steps=depth, topk=topk, draft_tokens=verified, family=family, max_running_requests=cap)


def _whole(params: Mapping[str, Any], key: str, where: str) -> int | None:
    value = params.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or int(value) != value or value < 0:
        raise ConfigError(f"{where}: {key} = {value!r}: not a whole number >= 0; fix: write a whole number")
    return int(value)


def cells_from_run(data: RunData, output_tokens: Mapping[tuple[str, int], float] | None = None) -> list[ModelCell]:
    """One ModelCell per closed-loop cell of a stored run (medians over repeats; open-loop cells are skipped,
    the model is closed-loop). Noisy, client-limited and steady-less cells are kept and flagged. `output_tokens`:
    mean output tokens per request by (setting, C), see `output_tokens_by_cell`."""
    out = []
    for cell in data.cells:
        if cell.request_rate is not None:
            continue
        row = data.setting(cell.setting)
        params = setting_params(row.params, where=f"run {data.run.run_id}: settings[{row.name}]")
        counters = cell.counters
        doubts = (
            (cell.noisy, "noisy repeats"),
            (cell.client_limited, "client-limited"),
            (cell.steady_too_short, "no steady state"),
        )
        flags = tuple(text for on, text in doubts if on)
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
        heads = request_heads(row.requests)  # a stored cell's per-request columns only, no chunk times
        for error, tokens in zip(heads.errors, heads.completion_tokens, strict=True):
            if error is None and tokens:
                acc[0] += tokens
                acc[1] += 1
    return {key: total / n for key, (total, n) in sums.items() if n}


__all__ = ["ADAPTIVE", "cells_from_run", "output_tokens_by_cell", "setting_params"]
