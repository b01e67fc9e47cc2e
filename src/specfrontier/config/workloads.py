"""The `workloads:` list of a tune config: which prompt sets, sampled how, at what lengths.

One entry is one workload; each becomes its own cells, keyed `<name>@<sampling>` (name defaults to the
source, or the mix's sources joined by '+'). Validation here is static (names, combinations); whether
a source's package is installed is checked when the sweep prepares, still before any server starts.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator

from specfrontier.config.strict import StrictModel
from specfrontier.errors import shown_value
from specfrontier.records import MAX_PROMPTS
from specfrontier.workloads.sources import PACKAGE_SOURCES

SYNTHETIC = "synthetic-greedy"


def _known_source(name: str) -> bool:
    return name in PACKAGE_SOURCES or name == SYNTHETIC or name.startswith("builtin:") or name.endswith(".jsonl")


def source_choices() -> str:
    return ", ".join([*PACKAGE_SOURCES, SYNTHETIC, "builtin:cpu-mix", "<file>.jsonl"])


class WorkloadSpec(StrictModel):
    """One workload: a source (or weighted mix of sources), a sampling profile, lengths and API mode."""

    source: str | dict[str, Annotated[float, Field(gt=0)]] = Field(
        description="A source name (humaneval, gsm8k, truthfulqa, ifbench, agentic, synthetic-greedy, "
        "builtin:cpu-mix, a JSONL file), or a mix {source: weight}."
    )
    name: str | None = Field(
        None, pattern=r"^[A-Za-z0-9._:+-]+$", description="Label in the cell key (default: the source)."
    )
    sampling: Literal["greedy", "t0.6", "t1.0"] = Field(
        "greedy", description="greedy (temperature 0), t0.6 or t1.0 (top-p 0.95); natural EOS."
    )
    mode: Literal["chat", "completion"] | None = Field(
        None, description="chat template or raw completion (default: the source's own; humaneval: completion)."
    )
    prompts: int | None = Field(
        None, ge=1, le=MAX_PROMPTS, description=f"Prompts drawn (seeded); default: all (at most {MAX_PROMPTS} in all)."
    )
    max_tokens: int = Field(128, ge=1, le=65536, description="Output cap per request (natural EOS stops earlier).")
    max_input_tokens: int | None = Field(
        None, ge=1, description="Drop prompts longer than this (estimated as characters / 4)."
    )
    input_tokens: int | None = Field(
        None, ge=1, le=131072, description="synthetic-greedy only: prompt length (characters / 4; default 128)."
    )
    ignore_eos: bool | None = Field(None, description="Generate past EOS (default: only for synthetic-greedy).")
    seed: int = Field(0, description="Seed of prompt selection and of the per-request sampling seeds.")
    sessions: bool = Field(False, description="agentic only: replay multi-turn sessions turn by turn.")
    max_turns: int | None = Field(None, ge=1, description="Sessions: replay at most this many turns each.")

    @field_validator("source")
    @classmethod
    def _sources_known(cls, source: str | dict[str, float]) -> str | dict[str, float]:
        names = [source] if isinstance(source, str) else list(source)
        if not names:
            raise ValueError("workloads[].source = {}: an empty mix; fix: give at least one source")
        for n in names:
            if not _known_source(n):
                raise ValueError(
                    f"workloads[].source = {shown_value(n)}: unknown source; fix: use one of {source_choices()}"
                )
        return source

    @property
    def sources(self) -> dict[str, float]:
        return {self.source: 1.0} if isinstance(self.source, str) else dict(self.source)

    @property
    def synthetic(self) -> bool:
        return self.sources.keys() == {SYNTHETIC}

    @property
    def key(self) -> str:
        """The cell's workload key: `<name>@<sampling>`."""
        label = self.name or "+".join(self.sources)
        return f"{label}@{self.sampling}"

    @property
    def eos_ignored(self) -> bool:
        return self.synthetic if self.ignore_eos is None else self.ignore_eos

    @model_validator(mode="after")
    def _consistent(self) -> WorkloadSpec:
        mixed = len(self.sources) > 1
        if SYNTHETIC in self.sources and mixed:
            raise ValueError(f"workloads[].source: {SYNTHETIC} cannot be mixed; fix: give it its own workload entry")
        if self.synthetic and self.sampling != "greedy":
            raise ValueError(
                f"workloads[].sampling = {self.sampling!r}: {SYNTHETIC} is the greedy best case; "
                "fix: use sampling: greedy, or a real source for sampled workloads"
            )
        if self.input_tokens is not None and not self.synthetic:
            raise ValueError(
                "workloads[].input_tokens: only synthetic-greedy has a settable prompt length; "
                "fix: use max_input_tokens to drop long prompts of a real source"
            )
        if self.sessions and self.sources.keys() != {"agentic"}:
            raise ValueError("workloads[].sessions = true: only the agentic source has sessions; fix: source: agentic")
        if self.sessions and self.mode == "completion":
            raise ValueError("workloads[].mode = 'completion': sessions are chat; fix: drop mode")
        return self


__all__ = ["SYNTHETIC", "WorkloadSpec", "source_choices"]
