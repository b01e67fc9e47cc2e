"""TensorRT-LLM (`trtllm-serve`): settings, engine options and the adapter.

Built from the TensorRT-LLM source and tested ONLY against the simulator's face that speaks this interface
(`python -m specfrontier.sim.trtllm_serve`), never against a real TensorRT-LLM (which needs an NVIDIA GPU).

Source read: NVIDIA/TensorRT-LLM as stored in the public GitHub index, files of the 1.2/1.3 development line
(`tensorrt_llm/version.py` is stored at 1.2.0rc2, commit b35ac1b; the other files at the commits named).
PyPI carries only stub packages for it, so no installed copy was read. Facts the adapter relies on:

- CLI (`tensorrt_llm/commands/serve.py` @00209af): `trtllm-serve MODEL` (a click `DefaultGroup` routes a
  first argument that is not a subcommand to `serve`, so `trtllm-serve --help` prints the group's help and
  the options are probed with `trtllm-serve serve --help`); click options with underscores, no prefix
  abbreviations: `--host` (default localhost), `--port` (8000), `--backend {pytorch,tensorrt,_autodeploy}`
  (default pytorch), `--max_batch_size` (2048), `--max_num_tokens` (8192), `--max_seq_len`,
  `--tensor_parallel_size`/`--tp_size`, `--free_gpu_memory_fraction`/`--kv_cache_free_gpu_memory_fraction`
  (0.9), and the options file `--config` with its older name `--extra_llm_api_options` (spellings are probed
  from `--help`; `--config` is preferred where present). The YAML is applied ON TOP of the flags
  (`update_llm_args_with_extra_dict` after `get_llm_args`; a YAML `kv_cache_config` replaces the flag's), so
  the keys the adapter sets by flag are refused in `extra_options`.
- Speculation (`tensorrt_llm/llmapi/llm_args.py` @0004396, `docs/source/features/speculative-decoding.md`
  @04c8822): YAML `speculative_config:` discriminated by `decoding_type` (YAML values `Eagle3`, `MTP`,
  `NGram`, `DraftTarget`, and in the newest releases `PARD`, `DFlash`, `SA`; `Eagle` is an alias of Eagle3).
  `DecodingBaseConfig`: `max_draft_len` (draft tokens per step, a linear chain: `max_total_draft_tokens`
  = `max_draft_len`), `speculative_model` (alias `speculative_model_dir`). Eagle3: a draft model is required
  ("Draft model must be provided for EAGLE"), `eagle3_one_model` (default True; False is ignored in the
  newest). NGram (PyTorch only): `max_matching_ngram_size` (default 2 in the newest, 3 in older releases,
  so written only when set), `is_keep_all`, `is_use_oldest`, `is_public_pool` (default True each).
  DraftTarget: `speculative_model` required. MTP: older releases (1.0) take the depth from
  `num_nextn_predict_layers`; 1.2+ map it onto `max_draft_len` (dropping it when both are set) and the docs
  say the two must match, so the adapter writes both with the same value.
- EAGLE-3 draft trees (`EagleDecodingConfig` @0004396): a static tree `eagle_choices` or EAGLE-2's dynamic
  tree `use_dynamic_tree` + `dynamic_tree_max_topK`, with `max_total_draft_tokens` (the tree's nodes, root
  excluded) in `[max_draft_len, dynamic_tree_max_topK * max_draft_len]`; checked in `engines/trtllm_tree.py`.
- A per-batch-size draft length: `DecodingBaseConfig.draft_len_schedule` (`{batch size: draft len}`,
  "developer interface", mutually exclusive with `max_concurrency`). Its reading changed across releases;
  the schedule format below writes the newest (`llm_args.py` @00043967, `_torch/speculative/utils.py`
  @011d0933, from PR #10860): a key is the UPPER bound of its batch sizes (`bisect_left`), batch sizes above
  the last key do not speculate, values are 0..max_draft_len, and the value at the smallest key must equal
  `max_draft_len`. The older reading (PR #8194: keys are lower bounds, 1 must be a key) is not written.
  Vanilla MTP opts out of a dynamic draft length, so the format schedules Eagle3 and DraftTarget only.
- Readiness (`tensorrt_llm/serve/openai_server.py` @0005772, `serve.py`): the port is bound before the model
  loads but not listened on (connections are refused until uvicorn serves), so `GET /health` (200, or 503
  after a fatal executor error) is the readiness probe; `GET /health_generate` (a 1-token CHAT generation,
  so it needs a chat template; 200 "Generation health check OK") is not used. Also `GET /version` ->
  `{"version": ...}`, `GET /v1/models` (`owned_by: "tensorrt_llm"`), `GET /metrics`, `GET /perf_metrics`,
  and `/prometheus/metrics` mounted only with `return_perf_metrics: true`.
- Iteration statistics: `GET /metrics` returns a JSON list of per-iteration stats (camelCase, the C++
  `IterationStats` of `cpp/include/tensorrt_llm/executor/types.h` @a98a906): `iter`, `iterLatencyMS`,
  `numActiveRequests`, `numQueuedRequests`, `numCompletedRequests`, `maxNumActiveRequests` (the PyTorch
  executor's `get_max_num_sequences()`, i.e. its max batch size), `maxBatchSizeStatic/Runtime` (not set by
  the PyTorch executor), `kvCacheStats {maxNumBlocks, freeNumBlocks, usedNumBlocks, tokensPerBlock, ...}`,
  `inflightBatchingStats {...}`, and `specDecodingStats {numDraftTokens, numAcceptedTokens,
  numRequestsWithDraftTokens, acceptanceLength, iterLatencyMS, draftOverhead}` summed over the iteration's
  generation requests (null without speculation). Only with `enable_iter_perf_stats: true` (PyTorch
  backend; the adapter always writes it). The stats are DRAINED on read: `PyExecutor.
  get_latest_iteration_stats` (`tensorrt_llm/_torch/pyexecutor/py_executor.py`, several stored versions
  agree; default @9521caf) returns "the per-iterations statistics computed since last call" and empties its
  list, which newer releases cap at `max_stats_len` (TorchLlmArgs, default 1000, -1 keeps all; the oldest
  entries are dropped). A server reports nothing before its first request ran. TensorRT-LLM's own
  acceptance length is (sum numAcceptedTokens + sum numRequestsWithDraftTokens) / sum
  numRequestsWithDraftTokens (`compute_acceptance_length` in its tests).
- With `return_perf_metrics: true` a background task of the server drains the same queue into Prometheus
  (`_iteration_stats_collector_loop`), so `/metrics` would miss iterations: the adapter refuses that key.
- Per request: only a non-streamed completion choice carries `avg_decoded_tokens_per_iter` (an average,
  not counts); streamed chunks carry no draft counts, so `request_spec_stats` returns None and acceptance
  comes from the iteration stats.

Counters over a window: because `/metrics` drains, the adapter keeps, per server URL, a running total of
every iteration any of its reads returned (`_Tally`, class-level so `bench --url` and the sweep share it):
the counters "before" and "after" a window are then cumulative and their difference is exactly the
iterations in between. Iterations the server dropped before they were read (its `max_stats_len` cap drops
the oldest) show as a full read whose first `iter` does not follow the previous read's last; such a read
returns None rather than an undercount (set `max_stats_len: -1` in `extra_options` for long windows on
releases that have the key; older ones keep every iteration and refuse the key). A capacity read starts a
fresh total (a new server may reuse the port). Not verified on a real server: whether an iteration's stats
are recorded before its responses reach the client; if after, a window's "after" read can miss its last
iteration, which is then counted between windows (a small undercount, never counted twice).
"""

from __future__ import annotations

import asyncio
import json
import shlex
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Literal

import aiohttp
import yaml
from pydantic import Field, model_validator

from specfrontier.config.common import TuneBase, startup_timeout
from specfrontier.engines.base import (
    Capacity,
    Deployable,
    Detected,
    EngineAdapter,
    EngineOptions,
    EngineSetting,
    LaunchTarget,
    ParamNames,
    ScheduleFormat,
    get_json,
)
from specfrontier.engines.probe import help_options, probe_help
from specfrontier.engines.registry import EngineSpec, register, register_schedule_format
from specfrontier.engines.trtllm_tree import TREE_KEYS, check_tree
from specfrontier.errors import ConfigError, DependencyError, EngineResponseError
from specfrontier.records import RequestSpecStats, SpecCounters
from specfrontier.textfiles import file_name_for

DecodingType = Literal["Eagle3", "MTP", "NGram", "DraftTarget"]
NEEDS_DRAFT_MODEL = ("Eagle3", "DraftTarget")
NGRAM_KEYS = ("max_matching_ngram_size", "is_keep_all", "is_use_oldest", "is_public_pool")
FLAG_KEYS = {
    "max_batch_size": "the setting's max_batch_size",
    "max_num_tokens": "engine.max_num_tokens",
    "max_seq_len": "engine.max_seq_len",
    "tensor_parallel_size": "engine.tp_size",
    "backend": "engine.backend",
    "model": "engine.model",
}
"""Options-file keys that would override a flag the adapter sets (the YAML is applied on top of the flags)."""


def _forbidden_options(options: Mapping[str, Any], where: str) -> None:
    """Refuse `extra_options` keys the adapter owns, or that would make the window counters wrong."""
    for key in options:
        if key == "speculative_config":
            raise ValueError(
                f"{where}.extra_options.speculative_config: the adapter writes it from the setting; "
                "fix: set decoding_type, max_draft_len and the type's keys on the setting instead"
            )
        if key == "enable_iter_perf_stats":
            raise ValueError(
                f"{where}.extra_options.enable_iter_perf_stats: the adapter always writes true (the window "
                "counters come from /metrics); fix: remove it"
            )
        if key == "return_perf_metrics" and options[key]:
            raise ValueError(
                f"{where}.extra_options.return_perf_metrics = true: trtllm-serve then drains the iteration "
                "stats into Prometheus in the background, so /metrics misses iterations; fix: remove it"
            )
        if key in FLAG_KEYS:
            raise ValueError(
                f"{where}.extra_options.{key}: the options file would override the adapter's flag; "
                f"fix: set {FLAG_KEYS[key]} instead"
            )


def _json_hash(model: Any) -> int:
    """Hash of a frozen model whose fields include a dict (pydantic's default hash would fail on it)."""
    return hash(json.dumps(model.model_dump(mode="json"), sort_keys=True, default=str))


class TrtllmSetting(EngineSetting):
    """One trtllm-serve speculative configuration: the options file's `speculative_config` and the batch size."""

    ladder_family: ClassVar[str] = "trtllm"
    max_depth: ClassVar[int] = 8
    space_labels: ClassVar[Mapping[str, str]] = {
        "max_draft_len": "k",
        "max_matching_ngram_size": "n",
        "max_batch_size": "bs",
        "dynamic_tree_max_topK": "topk",
        "max_total_draft_tokens": "t",
        "use_dynamic_tree": "tree",
    }

    name: str = Field(min_length=1, pattern=r"^[A-Za-z0-9_.:+-]+$", description="Unique label of the setting.")
    decoding_type: DecodingType | None = Field(
        None, description="speculative_config.decoding_type (unset = no speculation)."
    )
    max_draft_len: int | None = Field(
        None, ge=1, le=32, description="speculative_config.max_draft_len: draft tokens per step (the depth)."
    )
    max_matching_ngram_size: int | None = Field(
        None, ge=1, le=64, description="NGram: longest prompt suffix matched against the pool."
    )
    is_keep_all: bool | None = Field(None, description="NGram: keep every candidate per pattern.")
    is_use_oldest: bool | None = Field(None, description="NGram: propose the oldest candidate of a match.")
    is_public_pool: bool | None = Field(None, description="NGram: one pool shared by all requests.")
    eagle3_one_model: bool | None = Field(None, description="Eagle3: draft as a submodule (TensorRT-LLM's default).")
    use_dynamic_tree: bool | None = Field(
        None, description="Eagle3: draft EAGLE-2's dynamic tree (needs dynamic_tree_max_topK); unset = a chain."
    )
    dynamic_tree_max_topK: int | None = Field(
        None, ge=1, le=64, description="Eagle3 dynamic tree: nodes expanded per draft layer."
    )
    max_total_draft_tokens: int | None = Field(
        None,
        ge=1,
        le=1024,
        description="Eagle3 tree: its nodes, root excluded (dynamic tree: in [max_draft_len, dynamic_tree_max_topK "
        "* max_draft_len], default the top; static tree: the number of eagle_choices).",
    )
    eagle_choices: list[list[int]] | None = Field(
        None,
        description="Eagle3 static tree: its paths from the root, e.g. [[0], [1], [0, 0]] (deprecated in "
        "TensorRT-LLM 1.4); max_draft_len is its depth.",
    )
    draft_len_schedule: dict[int, int] | None = Field(
        None,
        description="speculative_config.draft_len_schedule: draft length per batch size, each key the UPPER bound "
        "of its range (newest TensorRT-LLM), no speculation above the last key; the smallest key's value must "
        "equal max_draft_len. Eagle3 and DraftTarget only. Unset = a static draft length.",
    )
    max_batch_size: int | None = Field(
        None, ge=1, le=100000, description="--max_batch_size (unset: the sweep's highest concurrency)."
    )
    extra_options: dict[str, Any] = Field(
        default_factory=dict, description="More options-file keys for this setting (over engine.extra_options)."
    )
    extra_args: tuple[str, ...] = Field((), description="More launch arguments, passed verbatim (not --host/--port).")

    def __hash__(self) -> int:
        return _json_hash(self)

    @model_validator(mode="after")
    def _trtllm_constraints(self) -> TrtllmSetting:
        where = f"settings[{self.name}]"
        kind = self.decoding_type
        type_keys = {"max_draft_len": self.max_draft_len, "eagle3_one_model": self.eagle3_one_model}
        type_keys.update({k: getattr(self, k) for k in NGRAM_KEYS})
        if kind is None:
            for key, value in type_keys.items():
                if value is not None:
                    raise ValueError(
                        f"{where}: {key} needs a speculative decoding_type; fix: set decoding_type "
                        "(Eagle3, MTP, NGram or DraftTarget) or remove it"
                    )
        else:
            if self.max_draft_len is None:
                raise ValueError(
                    f"{where}: decoding_type = {kind} needs max_draft_len (draft tokens per step); "
                    "fix: set max_draft_len, e.g. 3"
                )
            for key in NGRAM_KEYS:
                if kind != "NGram" and getattr(self, key) is not None:
                    raise ValueError(f"{where}: {key} is an NGram option but decoding_type = {kind}; fix: remove {key}")
            if kind != "Eagle3" and self.eagle3_one_model is not None:
                raise ValueError(
                    f"{where}: eagle3_one_model is an Eagle3 option but decoding_type = {kind}; "
                    "fix: remove eagle3_one_model"
                )
        if self.draft_len_schedule is not None:
            _check_draft_len_schedule(self, where)
        check_tree(self, where)
        _forbidden_options(self.extra_options, where)
        return self

    @property
    def tree(self) -> bool:
        """Whether this Eagle3 setting drafts a tree (static or dynamic) rather than a chain."""
        return bool(self.use_dynamic_tree) or self.eagle_choices is not None

    @property
    def speculative(self) -> bool:
        return self.decoding_type is not None

    runs_schedules: ClassVar[bool] = True

    @property
    def scheduled(self) -> bool:
        return self.draft_len_schedule is not None

    @property
    def schedule_batch_sizes(self) -> tuple[int, ...]:
        """Where each range starts: 1, then one past each key but the last."""
        keys = sorted(self.draft_len_schedule or {})
        return tuple([1, *(k + 1 for k in keys[:-1])]) if keys else ()

    def with_schedule(self, depths: Sequence[tuple[int, int]], name: str) -> TrtllmSetting:
        """`draft_len_schedule` from ranges given by their first batch size: each key is the next range's
        first batch size - 1; the last range runs to `max_batch_size` (TensorRT-LLM's default 2048 when
        unset), unless no speculation won it, where the schedule simply ends (no speculation above)."""
        ranges = sorted(depths)
        off_from: int | None = None
        while ranges and ranges[-1][1] == 0:
            off_from = ranges.pop()[0]
        if not ranges:
            raise ValueError("no speculative depth won at any batch size: nothing to schedule")
        keys = [nxt - 1 for nxt, _ in ranges[1:]]
        keys.append(off_from - 1 if off_from is not None else (self.max_batch_size or DEFAULT_MAX_BATCH_SIZE))
        data = self.model_dump()
        data.update(
            name=name,
            max_draft_len=max(d for _, d in ranges),
            draft_len_schedule=dict(zip(keys, (d for _, d in ranges), strict=True)),
        )
        return self.model_validate(data)

    @property
    def drafter(self) -> str | None:
        return self.decoding_type

    def rejected_drafts_hint(self) -> str:
        """TensorRT-LLM's decoding type must match what the draft checkpoint is."""
        if self.decoding_type in ("Eagle3", "Eagle"):
            return (
                "speculative_model is not an EAGLE-3 head trained for this target; fix: set engine.draft_model "
                "to the Eagle3 head published for this target (an MTP model drafts with decoding_type MTP)"
            )
        if self.decoding_type == "MTP":
            return (
                "MTP drafts with the checkpoint's own MTP layers; a checkpoint without them drafts noise; fix: "
                "use a checkpoint that ships its MTP layers, or Eagle3 with a head"
            )
        if self.decoding_type == "DraftTarget":
            return (
                "the draft model is not a smaller model of the target's family (another tokenizer or training "
                "data); fix: use a draft of the same family and tokenizer"
            )
        return super().rejected_drafts_hint()

    @property
    def depth_field(self) -> str | None:
        """`max_draft_len` of a chain (an Eagle3 tree, whose node count is bounded by its depth, and a setting
        with a draft_len_schedule are not on the ladder)."""
        chain = self.decoding_type is not None and not self.tree
        return "max_draft_len" if chain and self.draft_len_schedule is None else None


class TrtllmEngine(EngineOptions):
    """A real trtllm-serve (TensorRT-LLM's OpenAI-compatible server), PyTorch backend."""

    name: Literal["trtllm"] = Field("trtllm", description="Engine adapter.")
    model: str = Field(min_length=1, description="MODEL: HF checkpoint path or hub name of the target.")
    speculative_model: str | None = Field(
        None, description="speculative_config.speculative_model: the EAGLE3 head or draft model (Eagle3, DraftTarget)."
    )
    binary: str = Field("trtllm-serve", min_length=1, description="The trtllm-serve console script (name or path).")
    launcher: tuple[str, ...] = Field(
        (),
        description="The command up to MODEL, replacing `binary` (e.g. [python, -m, tensorrt_llm.commands.serve]).",
    )
    backend: Literal["pytorch", "_autodeploy"] = Field(
        "pytorch", description="--backend (the TensorRT-engine backend configures speculation at build time)."
    )
    tp_size: int = Field(1, ge=1, le=64, description="--tp_size (tensor parallelism).")
    max_num_tokens: int | None = Field(None, ge=1, description="--max_num_tokens (unset: TensorRT-LLM's 8192).")
    max_seq_len: int | None = Field(None, ge=2, description="--max_seq_len (unset: from the model config).")
    kv_cache_free_gpu_memory_fraction: float | None = Field(
        None, gt=0.0, le=1.0, description="--kv_cache_free_gpu_memory_fraction (unset: TensorRT-LLM's 0.9)."
    )
    startup_timeout_s: float = startup_timeout(1800.0, "Seconds to wait for /health_generate.")
    extra_options: dict[str, Any] = Field(
        default_factory=dict, description="More options-file keys for every setting (e.g. cuda_graph_config)."
    )
    extra_args: tuple[str, ...] = Field((), description="More launch arguments for every setting (not --host/--port).")

    def __hash__(self) -> int:
        return _json_hash(self)

    @model_validator(mode="after")
    def _options_are_ours(self) -> TrtllmEngine:
        _forbidden_options(self.extra_options, "engine")
        _kv_fraction_conflict(self, self.extra_options, "engine")
        return self


def _kv_fraction_conflict(engine: TrtllmEngine, options: Mapping[str, Any], where: str) -> None:
    if "kv_cache_config" in options and engine.kv_cache_free_gpu_memory_fraction is not None:
        raise ValueError(
            f"{where}.extra_options.kv_cache_config replaces the config that "
            "engine.kv_cache_free_gpu_memory_fraction sets by flag; fix: put free_gpu_memory_fraction inside "
            "kv_cache_config and remove engine.kv_cache_free_gpu_memory_fraction"
        )


def _check_setting_against_engine(setting: TrtllmSetting, engine: TrtllmEngine) -> None:
    where = f"settings[{setting.name}]"
    if setting.decoding_type in NEEDS_DRAFT_MODEL and engine.speculative_model is None:
        raise ValueError(
            f"{where}: decoding_type = {setting.decoding_type} needs a draft model and engine.speculative_model "
            "is unset; fix: set engine.speculative_model (the EAGLE3 head or draft model directory)"
        )
    _kv_fraction_conflict(engine, setting.extra_options, where)


class TrtllmTuneConfig(TuneBase):
    """A sweep of trtllm-serve settings on a real TensorRT-LLM server."""

    baseline_hint: ClassVar[str] = "no setting without `decoding_type`; fix: add a baseline (name: baseline)"

    engine: TrtllmEngine
    settings: tuple[TrtllmSetting, ...] = Field(min_length=1, description="Settings to compare.")

    @model_validator(mode="after")
    def _settings_fit_engine(self) -> TrtllmTuneConfig:
        for setting in self.settings:
            _check_setting_against_engine(setting, self.engine)
        return self


# -- the options file ---------------------------------------------------------------------------------


def _merged(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    """`over` on top of `base`, mappings merged key by key."""
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = _merged(out[key], value)
        else:
            out[key] = value
    return out


def speculative_config(setting: TrtllmSetting, engine: TrtllmEngine) -> dict[str, Any] | None:
    """The YAML `speculative_config` of a setting, keys spelled as llm_args.py spells them (None: no speculation)."""
    kind = setting.decoding_type
    if kind is None:
        return None
    spec: dict[str, Any] = {"decoding_type": kind, "max_draft_len": setting.max_draft_len}
    if kind == "MTP":  # 1.0 reads the depth from it; 1.2+ maps it onto max_draft_len (they must match)
        spec["num_nextn_predict_layers"] = setting.max_draft_len
    if kind in NEEDS_DRAFT_MODEL and engine.speculative_model is not None:
        spec["speculative_model"] = engine.speculative_model
    for key in (*NGRAM_KEYS, "eagle3_one_model", "draft_len_schedule", *TREE_KEYS):
        value = getattr(setting, key)
        if value is not None:
            spec[key] = value
    return spec


DEFAULT_MAX_BATCH_SIZE = 2048
"""trtllm-serve's default --max_batch_size: the top of a schedule's last range when the setting sets none."""


def _check_draft_len_schedule(setting: TrtllmSetting, where: str) -> None:
    """TensorRT-LLM's DecodingBaseConfig checks (llm_args.py @00043967), before anything launches."""
    schedule = setting.draft_len_schedule or {}
    if setting.decoding_type not in ("Eagle3", "DraftTarget"):
        raise ValueError(
            f"{where}: draft_len_schedule with decoding_type = {setting.decoding_type}: a dynamic draft length "
            "runs with Eagle3 and DraftTarget (vanilla MTP opts out); fix: use Eagle3 or remove draft_len_schedule"
        )
    if not schedule:
        raise ValueError(f"{where}: draft_len_schedule is empty; fix: give {{batch size: draft length}}, e.g. {{8: 3}}")
    top = setting.max_draft_len or 0
    for key, value in schedule.items():
        if key < 1 or value < 0 or value > top:
            raise ValueError(
                f"{where}: draft_len_schedule[{key}] = {value}: keys are batch sizes >= 1 and values 0..max_draft_len "
                f"({top}); fix: e.g. {{4: {top}, 32: 1}}"
            )
    first = schedule[min(schedule)]
    if first != top:
        raise ValueError(
            f"{where}: draft_len_schedule at its smallest batch size is {first}, TensorRT-LLM requires "
            f"max_draft_len = {top} there; fix: set max_draft_len to {first} or start the schedule at {top}"
        )


def llm_api_options(setting: TrtllmSetting, engine: TrtllmEngine) -> dict[str, Any]:
    """The whole options file of a setting: engine and setting extras, iteration stats on, the speculation."""
    options = _merged(engine.extra_options, setting.extra_options)
    options["enable_iter_perf_stats"] = True
    spec = speculative_config(setting, engine)
    if spec is not None:
        options["speculative_config"] = spec
    return options


# -- reading /metrics ---------------------------------------------------------------------------------


DEFAULT_STATS_CAP = 1000
"""TorchLlmArgs.max_stats_len's default: the most iterations the server keeps between two reads (newer releases)."""


@dataclass(slots=True)
class _Tally:
    """Everything the iteration stats of one server said so far (they are drained on read)."""

    drafted: int = 0
    accepted: int = 0
    steps: int = 0
    iterations: int = 0
    last_iter: int | None = None
    lost: int = 0
    latest: Mapping[str, Any] | None = None
    cap: int | None = DEFAULT_STATS_CAP
    """The server's max_stats_len (None: it keeps every iteration, max_stats_len -1)."""


@dataclass(frozen=True, slots=True)
class _Batch:
    entries: tuple[Mapping[str, Any], ...]
    lost: int
    """Iterations the server dropped before this read could return them."""


def _entries(body: object) -> list[Mapping[str, Any]]:
    """The iteration-stat objects of a /metrics body (older releases may send them as JSON strings)."""
    if not isinstance(body, list):
        raise EngineResponseError(
            f"trtllm-serve /metrics: expected a JSON list of iteration stats, got {type(body).__name__}"
        )
    out = []
    for item in body:
        if isinstance(item, str):
            try:
                item = json.loads(item)
            except ValueError as exc:
                raise EngineResponseError(f"trtllm-serve /metrics: an entry is not JSON: {item[:80]!r}") from exc
        if not isinstance(item, Mapping):
            raise EngineResponseError("trtllm-serve /metrics: an entry is not a JSON object")
        out.append(item)
    return sorted(out, key=lambda e: -1 if (it := _iter_of(e)) is None else it)


def _iter_of(entry: Mapping[str, Any]) -> int | None:
    it = entry.get("iter")
    return it if isinstance(it, int) and not isinstance(it, bool) else None


def _count(stats: Mapping[str, Any], key: str) -> int:
    value = stats.get(key, 0)
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise EngineResponseError(f"trtllm-serve /metrics: specDecodingStats.{key} = {value!r}: not a count")
    return int(value)


def fold_iterations(tally: _Tally, entries: list[Mapping[str, Any]]) -> _Batch:
    """Add one read's iterations to the running total.

    The server drops the OLDEST entries once its list is full (`max_stats_len`), so a loss shows as a full
    read whose first `iter` does not follow the previous read's last one. Both conditions are required:
    releases without the cap return longer lists, and `iter` need not be contiguous in every release."""
    lost = 0
    first = _iter_of(entries[0]) if entries else None
    if first is not None and tally.last_iter is not None:
        if first < tally.last_iter:  # `iter` went back: a new server on this URL, counted from zero
            tally.drafted = tally.accepted = tally.steps = tally.iterations = tally.lost = 0
            tally.last_iter = None
        elif tally.cap is not None and len(entries) >= tally.cap and first > tally.last_iter + 1:
            lost = first - tally.last_iter - 1
    for entry in entries:
        it = _iter_of(entry)
        if it is not None:
            tally.last_iter = it
        spec = entry.get("specDecodingStats")
        if isinstance(spec, Mapping):
            tally.drafted += _count(spec, "numDraftTokens")
            tally.accepted += _count(spec, "numAcceptedTokens")
            tally.steps += _count(spec, "numRequestsWithDraftTokens")
        tally.iterations += 1
        tally.latest = entry
    tally.lost += lost
    return _Batch(tuple(entries), lost)


def stats_cap(options: Mapping[str, Any]) -> int | None:
    """The server's `max_stats_len` as an options file sets it (None: -1, every iteration kept)."""
    value = options.get("max_stats_len", DEFAULT_STATS_CAP)
    if isinstance(value, int) and not isinstance(value, bool):
        return None if value == -1 else max(value, 1)
    return DEFAULT_STATS_CAP


def capacity_from_iteration(entry: Mapping[str, Any]) -> Capacity:
    """The admitted batch from one iteration's stats, with the field it came from and the KV pool beside it."""
    for key in ("maxNumActiveRequests", "maxBatchSizeRuntime", "maxBatchSizeStatic"):
        value = entry.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
            source = f"trtllm-serve /metrics {key}"
            break
    else:
        raise EngineResponseError(
            "trtllm-serve /metrics: no maxNumActiveRequests/maxBatchSizeRuntime/maxBatchSizeStatic in the "
            "iteration stats; the server did not say its capacity"
        )
    kv = entry.get("kvCacheStats")
    if (
        isinstance(kv, Mapping)
        and isinstance(kv.get("maxNumBlocks"), int)
        and isinstance(kv.get("tokensPerBlock"), int)
    ):
        source += (
            f"; KV pool {kv['maxNumBlocks']} blocks x {kv['tokensPerBlock']} tokens (under GUARANTEED_NO_EVICT "
            "long requests may be admitted fewer at a time)"
        )
    return Capacity(value, source)


REQUIRED_FLAGS = ("--host", "--port", "--backend", "--max_batch_size")
OPTIONS_FLAGS = ("--config", "--extra_llm_api_options")
TP_FLAGS = ("--tp_size", "--tensor_parallel_size")
KV_FLAGS = ("--kv_cache_free_gpu_memory_fraction", "--free_gpu_memory_fraction")
CAPACITY_POLLS = 10
CAPACITY_POLL_S = 0.5
NO_STATS = (
    "unknown (trtllm-serve /metrics had no iteration stats: it has them only after requests ran, and only "
    "with enable_iter_perf_stats: true)"
)


class TrtllmAdapter(EngineAdapter[TrtllmSetting]):
    """Launches `trtllm-serve MODEL ... --config <options file>` per setting and reads its iteration stats."""

    name: ClassVar[str] = "trtllm"
    display_name: ClassVar[str] = "TensorRT-LLM"
    health_path: ClassVar[str] = "/health"
    """trtllm-serve listens only once the model is loaded and warmed up, so /health answering is readiness
    (/health_generate would also need a chat template in the model)."""
    counters_source: ClassVar[str] = (
        "trtllm-serve /metrics specDecodingStats summed over iterations (drained on read; running total kept "
        "by the adapter)"
    )
    _tallies: ClassVar[dict[str, _Tally]] = {}
    """Per server URL: the running total of its drained iteration stats (see the module docstring)."""

    def __init__(self, engine: EngineOptions, *, help_text: str | None = None) -> None:
        self.engine = engine
        self._help_text = help_text
        self._flags = help_options(help_text or "")

    def gpus_per_server(self) -> int:
        return self.options.tp_size

    @property
    def options(self) -> TrtllmEngine:
        eng = self.engine
        assert isinstance(eng, TrtllmEngine)
        return eng

    def _launcher(self) -> list[str]:
        eng = self.options
        return list(eng.launcher) if eng.launcher else [eng.binary]

    @property
    def startup_timeout_s(self) -> float:
        return float(self.options.startup_timeout_s)

    def _spelling(self, candidates: tuple[str, ...]) -> str:
        """The first candidate the probed --help lists (the first candidate when nothing was probed)."""
        return next((f for f in candidates if f in self._flags), candidates[0])

    def prepare(self, settings: tuple[TrtllmSetting, ...]) -> None:
        launcher = self._launcher()
        if self._help_text is None:
            if not self.options.launcher and shutil.which(launcher[0]) is None:
                raise DependencyError(
                    f"engine.binary = {launcher[0]!r}: not found; fix: install TensorRT-LLM (pip install "
                    "tensorrt_llm) in this environment, or point engine.binary/engine.launcher at its trtllm-serve"
                )
            self._help_text = probe_help(
                [*launcher, "serve", "--help"],
                timeout_s=600,
                where="engine",
                fix="install TensorRT-LLM or set engine.launcher",
                error=DependencyError,
            )
            self._flags = help_options(self._help_text)
        missing = [f for f in REQUIRED_FLAGS if f not in self._flags]
        if not any(f in self._flags for f in OPTIONS_FLAGS):
            missing.append("/".join(OPTIONS_FLAGS))
        if self.options.tp_size != 1 and not any(f in self._flags for f in TP_FLAGS):
            missing.append("/".join(TP_FLAGS))
        if missing:
            raise ConfigError(
                f"engine: `{shlex.join([*launcher, 'serve', '--help'])}` lists no {', '.join(missing)}; fix: "
                "install a TensorRT-LLM whose trtllm-serve has them (1.0 or later) or point engine.launcher at it"
            )
        for setting in settings:
            try:
                _check_setting_against_engine(setting, self.options)
            except ValueError as exc:
                raise ConfigError(str(exc)) from exc
            self.options_file(setting)

    def options_file(self, setting: TrtllmSetting) -> Path:
        """Write the setting's options file (beside the run's logs in a sweep, `launch_file`); return its path."""
        text = "# written by specfrontier for trtllm-serve (--config / --extra_llm_api_options)\n"
        text += yaml.safe_dump(llm_api_options(setting, self.options), sort_keys=False)
        return self.launch_file(file_name_for(setting.name, ".yaml"), text)

    def command(self, setting: TrtllmSetting, *, port: int, max_concurrency: int) -> list[str]:
        """`--max_batch_size` is the setting's, else the sweep's highest concurrency (TensorRT-LLM's default,
        2048, would size its buffers for far more than is measured); the capacity is read back after launch."""
        eng = self.options
        argv = [*self._launcher(), eng.model, "--host", "127.0.0.1", "--port", str(port)]
        argv += ["--backend", eng.backend, "--max_batch_size", str(setting.max_batch_size or max_concurrency)]
        if eng.tp_size != 1:
            argv += [self._spelling(TP_FLAGS), str(eng.tp_size)]
        if eng.max_num_tokens is not None:
            argv += ["--max_num_tokens", str(eng.max_num_tokens)]
        if eng.max_seq_len is not None:
            argv += ["--max_seq_len", str(eng.max_seq_len)]
        if eng.kv_cache_free_gpu_memory_fraction is not None:
            argv += [self._spelling(KV_FLAGS), str(eng.kv_cache_free_gpu_memory_fraction)]
        argv += [self._spelling(OPTIONS_FLAGS), str(self.options_file(setting))]
        return argv + list(eng.extra_args) + list(setting.extra_args)

    def version(self) -> str:
        return f"TensorRT-LLM ({shlex.join(self._launcher())}; version from /version)"

    # -- reading the running server ---------------------------------------------------------------------

    @classmethod
    def _tally(cls, base_url: str) -> _Tally:
        return cls._tallies.setdefault(base_url.rstrip("/"), _Tally())

    @classmethod
    async def _drain(cls, session: aiohttp.ClientSession, base_url: str) -> _Batch:
        """GET /metrics (which empties the server's list) and fold what came into this URL's running total."""
        async with session.get(f"{base_url.rstrip('/')}/metrics") as resp:
            if resp.status != 200:
                raise EngineResponseError(f"trtllm-serve /metrics: status {resp.status}; expected 200")
            try:
                body = await resp.json(content_type=None)
            except ValueError as exc:
                raise EngineResponseError("trtllm-serve /metrics: the body is not JSON") from exc
        return fold_iterations(cls._tally(base_url), _entries(body))

    async def capacity(self, session: aiohttp.ClientSession, base_url: str, setting: TrtllmSetting) -> Capacity:
        """From the latest iteration stats. A fresh server has run no iteration, so one 1-token completion
        makes one (the server records its stats at the end of the iteration, so they are polled a while)."""
        self._tallies[base_url.rstrip("/")] = _Tally(cap=stats_cap(llm_api_options(setting, self.options)))
        tally = self._tally(base_url)
        await self._drain(session, base_url)
        if tally.latest is None:
            await _one_token(session, base_url)
            for _ in range(CAPACITY_POLLS):
                await self._drain(session, base_url)
                if tally.latest is not None:
                    break
                await asyncio.sleep(CAPACITY_POLL_S)
        if tally.latest is None:
            raise EngineResponseError(
                "trtllm-serve /metrics returned no iteration stats after a generation, so the server did not say "
                "its capacity; fix: keep enable_iter_perf_stats: true in the options file (the adapter writes it)"
            )
        return capacity_from_iteration(tally.latest)

    @classmethod
    async def spec_counters(cls, session: aiohttp.ClientSession, base_url: str) -> SpecCounters | None:
        """The running total (see the module docstring); None when the server has reported no iteration at
        all (stats off) or when this read found iterations dropped before they could be read."""
        batch = await cls._drain(session, base_url)
        tally = cls._tally(base_url)
        if tally.iterations == 0 or batch.lost:
            return None
        return SpecCounters(tally.drafted, tally.accepted, tally.steps)

    @classmethod
    def request_spec_stats(cls, chunk: Mapping[str, Any]) -> RequestSpecStats | None:
        """None: trtllm-serve streams no per-request draft counts (see the module docstring)."""
        return None

    @classmethod
    async def detect(cls, session: aiohttp.ClientSession, root: str) -> Detected | None:
        """trtllm-serve lists its models as `owned_by: "tensorrt_llm"` and answers `/version`; the capacity
        comes from `/metrics` when it has iteration stats (reading them drains them into this URL's total)."""
        models = await get_json(session, f"{root}/v1/models")
        data = models.get("data") if isinstance(models, Mapping) else None
        if not isinstance(data, list) or not any(
            isinstance(m, Mapping) and m.get("owned_by") == "tensorrt_llm" for m in data
        ):
            return None
        info = await get_json(session, f"{root}/version")
        if not isinstance(info, Mapping) or not isinstance(info.get("version"), str):
            return None
        version = f"TensorRT-LLM {info['version']}"
        try:
            await cls._drain(session, root)
            latest = cls._tally(root).latest
            capacity = capacity_from_iteration(latest) if latest is not None else None
        except (EngineResponseError, aiohttp.ClientError, OSError, TimeoutError):
            capacity = None
        if capacity is None:
            return Detected(None, NO_STATS, version)
        return Detected(capacity, capacity.source, version)


async def _one_token(session: aiohttp.ClientSession, base_url: str) -> None:
    """One non-streamed 1-token completion, so the server has run an iteration to report."""
    root = base_url.rstrip("/")
    models = await get_json(session, f"{root}/v1/models")
    data = models.get("data") if isinstance(models, Mapping) else None
    model = data[0].get("id") if isinstance(data, list) and data and isinstance(data[0], Mapping) else None
    body = {"prompt": "Hello", "max_tokens": 1, "temperature": 0.0, "stream": False}
    if isinstance(model, str):
        body["model"] = model
    async with session.post(f"{root}/v1/completions", json=body) as resp:
        if resp.status != 200:
            raise EngineResponseError(f"trtllm-serve /v1/completions: status {resp.status} on a 1-token probe")
        await resp.read()


# -- the schedule format: draft_len_schedule ------------------------------------------------------------

SCHEDULE_TYPES = {"Eagle3": "Eagle3", "EAGLE3": "Eagle3", "eagle3": "Eagle3", "DraftTarget": "DraftTarget",
                  "STANDALONE": "DraftTarget", "draft_model": "DraftTarget", "draft-simple": "DraftTarget"}  # fmt: skip
"""Drafters of any engine's run that TensorRT-LLM runs with a dynamic draft length, as its decoding type."""


def trtllm_schedule_options(schedule: Any, *, draft_model: str = "<draft-model-path>") -> dict[str, Any]:
    """The options file (`--config`) running the schedule: `speculative_config` with `draft_len_schedule`.

    Keys are the upper batch size of each range; ranges at the top where no speculation won are dropped,
    because above its last key TensorRT-LLM does not speculate (the off-above threshold)."""
    kind = SCHEDULE_TYPES.get(schedule.template.drafter or "")
    if kind is None:
        raise ConfigError(
            f"setting {schedule.template.name!r}: drafter = {schedule.template.drafter!r} has no TensorRT-LLM "
            "dynamic draft length (Eagle3 and DraftTarget have; vanilla MTP opts out); fix: export --engine "
            "sglang or vllm, or schedule an Eagle3 ladder"
        )
    entries = list(schedule.entries)
    while entries and entries[-1].depth == 0:
        entries.pop()
    if not entries:
        raise ConfigError(
            "schedule: no speculative setting beat the baseline at any measured level, so there is nothing to "
            "schedule; fix: run without speculation (see the static choices)"
        )
    top = max(e.depth for e in entries)
    if entries[0].depth != top:
        raise ConfigError(
            f"schedule: the best depth at batch size 1 is {entries[0].depth} but {top} wins at a larger batch; "
            "TensorRT-LLM requires draft_len_schedule at its smallest batch size to equal max_draft_len; fix: "
            "export --engine sglang or vllm, or measure deeper chains at low concurrency"
        )
    spec: dict[str, Any] = {"decoding_type": kind, "max_draft_len": top, "speculative_model": draft_model}
    spec["draft_len_schedule"] = {e.batch_hi: e.depth for e in entries}
    return {"speculative_config": spec}


def trtllm_schedule_command(options_path: str, *, model: str = "<model-path>", launch: Deployable | None = None) -> str:
    """`trtllm-serve` reading the options file (on its default host, localhost), with the environment of
    `launch` (the deployable command of a setting the run measured on TensorRT-LLM)."""
    argv = ("trtllm-serve", model, "--config", options_path)
    return Deployable(argv, launch.env if launch is not None else ()).text()


class TrtllmDraftLenSchedule(ScheduleFormat):
    """TensorRT-LLM's `speculative_config.draft_len_schedule` in a `--config` options file."""

    engine: ClassVar[str] = "trtllm"

    def config(self, schedule: Any, *, draft_model: str) -> dict[str, Any]:
        return trtllm_schedule_options(schedule, draft_model=draft_model)

    def command(self, schedule: Any, config: dict[str, Any], config_path: str, target: LaunchTarget) -> str:
        return trtllm_schedule_command(config_path, model=target.model, launch=target.launch)

    def file_text(self, config: dict[str, Any]) -> str:
        """YAML, as `--config` reads it: integer batch-size keys stay integers (JSON would make them strings)."""
        return "# written by specfrontier schedule for trtllm-serve --config\n" + yaml.safe_dump(
            config, sort_keys=False
        )

    def above_last(self, config: dict[str, Any]) -> str:
        last = max(config["speculative_config"]["draft_len_schedule"])
        return f"above batch size {last}: no speculation (TensorRT-LLM's rule above the last key)"

    def static_command(self, setting: EngineSetting, target: LaunchTarget) -> str:
        """A setting measured on TensorRT-LLM: its deployable command; another engine's: its Eagle3/draft chain
        as an options file to write (shown inline)."""
        if isinstance(setting, TrtllmSetting) and target.launch is not None:
            return target.launch.text()
        if not setting.speculative:
            return shlex.join(["trtllm-serve", target.model])
        kind = SCHEDULE_TYPES.get(setting.drafter or "")
        if kind is None or setting.depth is None:
            return f"(no TensorRT-LLM equivalent of {setting.name}: {setting.drafter} without a chain depth)"
        spec = {
            "decoding_type": kind,
            "max_draft_len": setting.depth,
            "speculative_model": target.draft_model or "<draft>",
        }
        return f"trtllm-serve {shlex.quote(target.model)} --config OPTIONS.yaml  # OPTIONS.yaml: " + json.dumps(
            {"speculative_config": spec}
        )


register_schedule_format(TrtllmDraftLenSchedule())

TRTLLM_NAMES = ParamNames(
    depth=("max_draft_len",),
    family=("decoding_type",),
    topk=("dynamic_tree_max_topK",),
    draft_length=("max_draft_len",),
)


def default_settings() -> tuple[TrtllmSetting, ...]:
    """Without `settings`: no speculation, then Eagle3 chains of 1-4 draft tokens (needs engine.speculative_model)."""
    ladder = [TrtllmSetting(name=f"eagle3-{d}", decoding_type="Eagle3", max_draft_len=d) for d in range(1, 5)]
    return (TrtllmSetting(name="baseline"), *ladder)


register(
    EngineSpec(
        name="trtllm",
        config=TrtllmTuneConfig,
        setting=TrtllmSetting,
        adapter=TrtllmAdapter,
        default_settings=default_settings,
        # after the engines whose detection only reads: asking drains the server's iteration stats, and
        # only a server listing `owned_by: "tensorrt_llm"` models is asked that far
        priority=40,
    ),
    TRTLLM_NAMES,
)


__all__ = [
    "NEEDS_DRAFT_MODEL",
    "TRTLLM_NAMES",
    "DecodingType",
    "TrtllmAdapter",
    "TrtllmDraftLenSchedule",
    "TrtllmEngine",
    "TrtllmSetting",
    "TrtllmTuneConfig",
    "capacity_from_iteration",
    "default_settings",
    "fold_iterations",
    "llm_api_options",
    "speculative_config",
    "stats_cap",
    "trtllm_schedule_options",
]
