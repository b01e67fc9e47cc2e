"""Simulator profiles: the parameters of a modelled deployment, stored as JSON data files.

A profile is a MODEL of one (target model, draft, hardware, engine version) deployment, not a
measurement of it. Each number is either fitted to published or measured cells (see `calibrate`) or
assumed; a profile's `description` must say which is which. Equations (theory.md sections 1-2, 6.1;
computed by `specfrontier.theory`, which the fitted model shares):

- capacity: `MRR(D) = min(cap, floor(state_slots / (slots_per_request + slots_per_draft_token * D)),
  floor(kv_tokens / (kv_context_tokens + D + s * topk)))` with D = num_draft_tokens (the KV term only
  with `kv_tokens`); `cap` is the user's max_running_requests, or SGLang's 48 under
  speculation when unset; without speculation the capacity is `no_spec_capacity`.
- decode cycle (ms): `T(B) = base + [spec] + s * (draft_step + draft_token * B * topk)
  + expert * Ncov(B * D) + verify_token * B * D + compute_token * max(0, B * D - knee) + request * B`,
  with the MoE expert coverage
  `Ncov(n) = E * (1 - (1 - k/E)^n)` per layer (D = 1 and s = 0 without speculation).
- prefill (ms): `prefill.batch + prefill.token * tokens` per scheduler iteration, at most
  `prefill.chunk_tokens` prompt tokens per iteration; the running batch makes no progress meanwhile.
- acceptance: per-position conditional rates per workload class at temperature 0, lowered linearly with
  temperature, optionally raised after the natural EOS when `ignore_eos` keeps the model going.
"""

from __future__ import annotations

import json
from importlib import resources
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from specfrontier.errors import ConfigError

_PROFILE_PACKAGE = "specfrontier.sim"
_PROFILE_DIR = "profiles"

Rate = Annotated[float, Field(ge=0.0, le=0.9999)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ModelShape(_Strict):
    """The target model's shape, as far as the cost model needs it."""

    name: str = Field(description="Target model name (free text, for reports).")
    experts: int = Field(ge=1, description="Routed experts per MoE layer (E); 1 for a dense model.")
    experts_per_token: int = Field(ge=1, description="Experts each token is routed to (k, top-k).")
    layers: int = Field(ge=1, description="Transformer layers (documentation; costs are per cycle).")
    draft_head: Literal["EAGLE", "EAGLE3"] | None = Field(
        None,
        description=(
            "The kind of draft head the deployment ships. A setting run under another algorithm loads without "
            "error and accepts nothing (a reported SGLang case: EAGLE-3 weights under --speculative-algorithm "
            "EAGLE gave acceptance length 1.0); None: every algorithm drafts with the workload's rates."
        ),
    )


class CapacityModel(_Strict):
    """How many requests the server runs at once (SGLang max_running_requests), theory 2.4."""

    state_slots: float = Field(gt=0, description="M: recurrent-state (mamba) slots shared by all requests.")
    slots_per_request: float = Field(ge=0, description="S0: slots each running request holds without drafts.")
    slots_per_draft_token: float = Field(
        1.0, ge=0, description="Slots added per verified draft token D (intermediate SSM states)."
    )
    no_spec_capacity: int = Field(ge=1, description="Running-request capacity with speculation off.")
    kv_tokens: float | None = Field(
        None,
        gt=0,
        description="KV-cache pool in tokens; with it a running request also needs kv_context_tokens plus "
        "D + num_steps * topk reserved tokens (theory.capacity.kv_capacity). None: the KV pool never limits.",
    )
    kv_context_tokens: float = Field(
        0.0, ge=0, description="Context tokens a running request holds in the KV pool on average (prompt + output)."
    )
    spec_default_cap: int = Field(
        48, ge=1, description="SGLang resets an unset max_running_requests to this under speculation."
    )


class CycleCostModel(_Strict):
    """Decode cycle time T(B, s) in milliseconds (theory 2.1 and 6.1); every term is a model parameter."""

    base_ms: float = Field(ge=0, description="Fixed cost of one scheduler iteration (launch, all-reduce latency).")
    spec_overhead_ms: float = Field(0.0, ge=0, description="Fixed extra per cycle with speculation on.")
    draft_step_ms: float = Field(ge=0, description="Fixed cost of one draft forward (per step s).")
    draft_token_ms: float = Field(ge=0, description="Draft cost per step per drafted token (x B x topk).")
    expert_ms: float = Field(ge=0, description="Verify cost per distinct expert touched per layer, Ncov(B x D).")
    verify_token_ms: float = Field(ge=0, description="Verify cost per verified token (x B x D).")
    request_ms: float = Field(0.0, ge=0, description="Cost per running request (attention/KV, sampling).")
    compute_knee_tokens: float = Field(
        0.0, ge=0, description="Verified tokens per cycle (B x D) beyond which the verify forward is compute-bound."
    )
    compute_token_ms: float = Field(
        0.0, ge=0, description="Extra verify cost per verified token beyond the knee (the roofline's compute side)."
    )


class PrefillModel(_Strict):
    """Prompt processing; SGLang runs it in separate iterations that stall the decode batch."""

    batch_ms: float = Field(ge=0, description="Fixed cost of one prefill iteration.")
    token_ms: float = Field(ge=0, description="Cost per prompt token (target plus draft extend).")
    chunk_tokens: int = Field(8192, ge=1, description="Most prompt tokens per prefill iteration (chunked prefill).")


class WorkloadModel(_Strict):
    """Acceptance and natural output length of one workload class."""

    description: str = Field(description="What kind of prompts this class stands for.")
    acceptance_per_position: tuple[Rate, ...] = Field(
        min_length=1,
        description="Conditional acceptance of draft j given drafts 1..j-1 accepted, at temperature 0 "
        "(chain, top-ranked candidate); the last value repeats for deeper positions.",
    )
    temperature_drop: float = Field(
        ge=0, le=1, description="Fraction each rate loses per unit of temperature: a(T) = a(0) * (1 - drop * T)."
    )
    post_eos_acceptance: Rate | None = Field(
        None,
        description="Rate after the natural EOS when ignore_eos forces more tokens (degenerate text); None = same.",
    )
    request_dispersion: float = Field(
        0.0, ge=0, description="Variance of a per-request multiplier (mean 1) of the miss rate 1 - a; 0 = none."
    )
    rank_share: float = Field(
        0.4, ge=0, le=1, description="Tree (topk > 1): share of the remaining mass each next-ranked sibling takes."
    )
    output_median_tokens: float = Field(gt=0, description="Median natural (EOS) output length, lognormal.")
    output_sigma: float = Field(ge=0, description="Lognormal sigma of the natural output length.")


class SimProfile(_Strict):
    """One modelled deployment: capacity law, cycle and prefill costs, acceptance per workload class."""

    name: str = Field(pattern=r"^[A-Za-z0-9_.+-]+$", description="Profile name (its file name without .json).")
    description: str = Field(description="What is fitted, what is assumed, and from which data.")
    engine: str = Field("sglang", description="The engine whose scheduling rules the model follows.")
    model: ModelShape = Field(description="Target model shape.")
    capacity: CapacityModel = Field(description="Capacity law.")
    cycle: CycleCostModel = Field(description="Decode cycle cost.")
    prefill: PrefillModel = Field(description="Prefill cost.")
    workloads: dict[str, WorkloadModel] = Field(min_length=1, description="Workload classes by name.")

    def workload(self, name: str, *, where: str = "simulate_cell") -> WorkloadModel:
        """The named workload class, or a ConfigError listing the known ones."""
        try:
            return self.workloads[name]
        except KeyError:
            known = ", ".join(sorted(self.workloads))
            raise ConfigError(
                f"{where}: workload = {name!r}: not a class of profile {self.name!r}; fix: use one of {known}"
            ) from None


def available_profiles() -> list[str]:
    """Names of the profiles shipped in the package, sorted."""
    folder = resources.files(_PROFILE_PACKAGE).joinpath(_PROFILE_DIR)
    return sorted(p.name.removesuffix(".json") for p in folder.iterdir() if p.name.endswith(".json"))


def parse_profile(text: str, *, source: str) -> SimProfile:
    """Validate a profile's JSON text; errors name the source, the field and the fix."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{source}: not valid JSON ({exc.msg}, line {exc.lineno}); fix: correct the JSON") from exc
    try:
        return SimProfile.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(p) for p in first["loc"]) or "(top level)"
        value = first.get("input")
        shown = "{...}" if isinstance(value, dict) else repr(value)
        raise ConfigError(
            f"{source}: {field} = {shown}: {first['msg']}; fix: correct this field (see SimProfile's field help)"
        ) from exc


def load_profile(name: str) -> SimProfile:
    """Load a shipped profile by name; an unknown name raises ConfigError listing the available ones."""
    names = available_profiles()
    if name not in names:
        raise ConfigError(
            f"sim profile: name = {name!r}: no such profile; fix: use one of {', '.join(names) or '(none shipped)'}"
        )
    text = resources.files(_PROFILE_PACKAGE).joinpath(_PROFILE_DIR, f"{name}.json").read_text("utf-8")
    profile = parse_profile(text, source=f"sim/profiles/{name}.json")
    if profile.name != name:
        raise ConfigError(
            f"sim/profiles/{name}.json: name = {profile.name!r}: differs from the file name; fix: set name to {name!r}"
        )
    return profile


__all__ = [
    "CapacityModel",
    "CycleCostModel",
    "ModelShape",
    "PrefillModel",
    "SimProfile",
    "WorkloadModel",
    "available_profiles",
    "load_profile",
    "parse_profile",
]
