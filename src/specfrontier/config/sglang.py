"""SGLang settings and engine options, shared by the real SGLang server and the simulator.

The constraints are SGLang's own (shared/reference/engines.md 1.3), checked before anything launches:
with `eagle_topk == 1` SGLang silently rewrites `num_draft_tokens` to `num_steps + 1`, and
`num_draft_tokens` can never exceed `num_steps * eagle_topk + 1` (the draft tree has no more nodes);
we refuse such settings instead of letting the server change them behind the user's back.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import Field, model_validator

from specfrontier.config.common import TuneBase, WorkloadConfig, _LaunchArgs, _Strict

SpecAlgorithm = Literal["EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM"]


class SGLangSetting(_LaunchArgs):
    """One SGLang speculative configuration (`--speculative-*`, `--max-running-requests`)."""

    name: str = Field(min_length=1, pattern=r"^[A-Za-z0-9_.:+-]+$", description="Unique label of the setting.")
    algorithm: SpecAlgorithm | None = Field(None, description="--speculative-algorithm (unset = no speculation).")
    num_steps: int | None = Field(None, ge=1, le=32, description="--speculative-num-steps: draft depth.")
    eagle_topk: int | None = Field(None, ge=1, le=32, description="--speculative-eagle-topk: branching per step.")
    num_draft_tokens: int | None = Field(
        None, ge=2, le=1024, description="--speculative-num-draft-tokens: verified tokens incl. the root."
    )
    max_running_requests: int | None = Field(
        None, ge=1, le=100000, description="--max-running-requests (SGLang resets an unset one to 48 with spec)."
    )
    extra_args: tuple[str, ...] = Field(
        (), description="More launch arguments, passed verbatim (not --host/--port/--allow-remote)."
    )

    @model_validator(mode="after")
    def _sglang_constraints(self) -> SGLangSetting:
        where = f"settings[{self.name}]"
        shape = (self.num_steps, self.eagle_topk, self.num_draft_tokens)
        if self.algorithm is None:
            if any(v is not None for v in shape):
                raise ValueError(
                    f"{where}: num_steps/eagle_topk/num_draft_tokens need a speculative algorithm; "
                    "fix: set algorithm (e.g. EAGLE3) or remove them"
                )
            return self
        if self.num_steps is None and any(v is not None for v in shape):
            raise ValueError(
                f"{where}: num_steps is unset but eagle_topk/num_draft_tokens are set (SGLang asserts); "
                "fix: set num_steps"
            )
        if self.num_steps is None:
            return self
        topk = self.eagle_topk or 1
        draft = self.num_draft_tokens
        if topk == 1 and draft is not None and draft != self.num_steps + 1:
            raise ValueError(
                f"{where}: num_draft_tokens = {draft} with eagle_topk = 1 (SGLang would silently use "
                f"num_steps + 1 = {self.num_steps + 1}); fix: set num_draft_tokens to {self.num_steps + 1} or remove it"
            )
        if draft is not None and draft > self.num_steps * topk + 1:
            raise ValueError(
                f"{where}: num_draft_tokens = {draft} > num_steps * eagle_topk + 1 = {self.num_steps * topk + 1}; "
                f"fix: set num_draft_tokens <= {self.num_steps * topk + 1} or raise num_steps/eagle_topk"
            )
        if topk > 1 and draft is None:
            raise ValueError(
                f"{where}: eagle_topk = {topk} needs num_draft_tokens; "
                f"fix: set num_draft_tokens between 2 and {self.num_steps * topk + 1}"
            )
        return self

    def _args_where(self) -> str:
        return f"settings[{self.name}]"

    @property
    def speculative(self) -> bool:
        return self.algorithm is not None

    @property
    def resolved_draft_tokens(self) -> int | None:
        """num_draft_tokens as the server will run it (steps + 1 for a topk-1 chain)."""
        if self.num_steps is None:
            return None
        if (self.eagle_topk or 1) == 1:
            return self.num_steps + 1
        return self.num_draft_tokens

    def parameters(self) -> dict[str, Any]:
        return self.model_dump(exclude={"name"}, exclude_none=True, exclude_defaults=True)


class SGLangEngine(_LaunchArgs):
    """A real SGLang server (`python -m sglang.launch_server`)."""

    name: Literal["sglang"] = Field("sglang", description="Engine adapter.")
    model_path: str = Field(description="--model-path of the target model.")
    draft_model_path: str | None = Field(None, description="--speculative-draft-model-path (EAGLE head, draft).")
    python: Path | None = Field(None, description="Python that has sglang installed (default: this one).")
    tp_size: int = Field(1, ge=1, le=64, description="--tp-size.")
    mem_fraction_static: float | None = Field(None, gt=0.0, lt=1.0, description="--mem-fraction-static.")
    startup_timeout_s: float = Field(900.0, gt=0, description="Seconds to wait for /health_generate.")
    extra_args: tuple[str, ...] = Field((), description="More launch arguments for every setting (not --host/--port).")


class SimEngine(_Strict):
    """The simulator of a speculative-decoding server: a model, not a measurement."""

    name: Literal["sim"] = Field("sim", description="Engine adapter.")
    profile: str = Field("seed-qwen3.5-122b-a10b", description="Simulator profile (a data file in sim/profiles).")
    face: Literal["virtual", "http"] = Field(
        "virtual", description="virtual: in-process, virtual time; http: a server process with SGLang's interface."
    )
    time_scale: float = Field(1.0, gt=0.0, le=1000.0, description="http face: simulated seconds per wall second.")
    startup_timeout_s: float = Field(60.0, gt=0, description="http face: seconds to wait for readiness.")
    seed: int = Field(0, description="Random seed of the simulated acceptance and output lengths.")
    workload_class: str = Field("synthetic", description="Workload class of the profile (acceptance, lengths).")
    input_tokens: int = Field(128, ge=1, le=1_000_000, description="Prompt tokens per simulated request.")
    min_requests: int = Field(32, ge=1, le=100000, description="Measured requests per cell, at least.")


def seed_sim_config() -> SGLangTuneConfig:
    """The seed's experiment on the simulator: EAGLE-3 topk 1, steps 1-5 (the seed stopped at 4 and asked
    about 5), C = 1, 4, 16, 32, 64, greedy with ignore_eos and fixed lengths (the seed's best case)."""
    settings = [SGLangSetting(name="no-spec")] + [
        SGLangSetting(name=f"steps{s}", algorithm="EAGLE3", num_steps=s, eagle_topk=1) for s in range(1, 6)
    ]
    return SGLangTuneConfig(
        engine=SimEngine(),
        settings=tuple(settings),
        concurrency=(1, 4, 16, 32, 64),
        repeats=3,
        rounds_per_cell=4,
        workload=WorkloadConfig(prompts="builtin:cpu-mix", max_tokens=512, temperature=0.0, ignore_eos=True),
    )


def production_sim_config() -> SGLangTuneConfig:
    """The seed grid under production sampling: a chat workload, temperature 0.7, natural EOS (the
    seed's blind spot; compared against `seed_sim_config` to show how much of the gain survives)."""
    seed = seed_sim_config()
    return seed.model_copy(
        update={
            "engine": seed.engine.model_copy(update={"workload_class": "chat"}),
            "workload": seed.workload.model_copy(update={"temperature": 0.7, "ignore_eos": False}),
        }
    )


class SGLangTuneConfig(TuneBase):
    """A sweep of SGLang-style settings, on a real SGLang server or on the simulator."""

    baseline_hint: ClassVar[str] = "no setting without `algorithm`; fix: add a baseline (name: baseline)"

    engine: SGLangEngine | SimEngine = Field(discriminator="name")
    settings: tuple[SGLangSetting, ...] = Field(min_length=1, description="Settings to compare.")


__all__ = [
    "SGLangEngine",
    "SGLangSetting",
    "SGLangTuneConfig",
    "SimEngine",
    "SpecAlgorithm",
    "production_sim_config",
    "seed_sim_config",
]
