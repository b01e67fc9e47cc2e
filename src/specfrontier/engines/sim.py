"""The simulator as an engine: a MODEL of an SGLang deployment (a profile), not a measurement.

Its settings are SGLang's (`SGLangSetting`): the simulator follows SGLang's rules. Two faces:
- `virtual` (the default): the in-process discrete-event model answers every cell in virtual time
  (`runs.virtual_sweep.VirtualSweep`, the runner of this engine);
- `http`: a server process that speaks SGLang's interface (`python -m specfrontier.sim.serve`), launched
  and measured by the same server sweep as a real engine; its adapter is SGLang's, overriding only what
  differs: how it is launched, its version, that it is simulated and its time scale.

`tune --engine sim` without a config runs the seed's grid (`seed_sim_config`), then the same grid under
production sampling (`companion`), and compares them.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import ClassVar, Literal

from pydantic import Field

from specfrontier.config.common import TuneBase, WorkloadConfig, startup_timeout
from specfrontier.engines.base import Deployable, EngineOptions
from specfrontier.engines.registry import EngineSpec, register
from specfrontier.engines.sglang import SGLangAdapter, SGLangSetting, default_settings

LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")


class SimEngine(EngineOptions):
    """The simulator of a speculative-decoding server: a model, not a measurement."""

    name: Literal["sim"] = Field("sim", description="Engine adapter.")
    profile: str = Field("seed-qwen3.5-122b-a10b", description="Simulator profile (a data file in sim/profiles).")
    face: Literal["virtual", "http"] = Field(
        "virtual", description="virtual: in-process, virtual time; http: a server process with SGLang's interface."
    )
    time_scale: float = Field(1.0, gt=0.0, le=1000.0, description="http face: simulated seconds per wall second.")
    startup_timeout_s: float = startup_timeout(60.0, "http face: seconds to wait for readiness.")
    seed: int = Field(0, description="Random seed of the simulated acceptance and output lengths.")
    workload_class: str = Field("synthetic", description="Workload class of the profile (acceptance, lengths).")
    input_tokens: int = Field(128, ge=1, le=1_000_000, description="Prompt tokens per simulated request.")
    min_requests: int = Field(32, ge=1, le=100000, description="Measured requests per cell, at least.")


class SimTuneConfig(TuneBase):
    """A sweep of SGLang-style settings on the simulator."""

    baseline_hint: ClassVar[str] = "no setting without `algorithm`; fix: add a baseline (name: baseline)"

    engine: SimEngine = Field(default_factory=SimEngine)
    settings: tuple[SGLangSetting, ...] = Field(min_length=1, description="Settings to compare.")


class SimAdapter(SGLangAdapter):
    """The simulator's HTTP face, launched and read exactly like SGLang."""

    name: ClassVar[str] = "sim"
    display_name: ClassVar[str] = "simulator"
    cheap_relaunch: ClassVar[bool] = True
    """The HTTP face is a Python process with no weights: ready in about a second."""

    def _launcher(self) -> list[str]:
        eng = self.engine
        assert isinstance(eng, SimEngine)
        return [
            sys.executable, "-m", "specfrontier.sim.serve", "--profile", eng.profile,
            "--time-scale", str(eng.time_scale), "--seed", str(eng.seed), "--workload", eng.workload_class,
            "--model-path", f"sim:{eng.profile}",
        ]  # fmt: skip

    def _engine_args(self) -> tuple[str, ...]:
        return ()

    def deployable(
        self, setting: SGLangSetting | None, launched: Sequence[str], *, host: str | None, port: int | None
    ) -> Deployable:
        """SGLang's rule; a host other than loopback also needs `--allow-remote` (the face refuses it else)."""
        found = super().deployable(setting, launched, host=host, port=port)
        if host is None or host in LOOPBACK_HOSTS or "--allow-remote" in found.argv:
            return found
        return Deployable((*found.argv, "--allow-remote"), found.env, found.measuring_only)

    def version(self) -> str:
        eng = self.engine
        assert isinstance(eng, SimEngine)
        return f"simulator HTTP face (SGLang interface), profile {eng.profile}"

    @property
    def simulated(self) -> bool:
        return True

    @property
    def time_scale(self) -> float:
        eng = self.engine
        assert isinstance(eng, SimEngine)
        return eng.time_scale


def seed_sim_config() -> SimTuneConfig:
    """The seed's experiment on the simulator: EAGLE-3 topk 1, steps 1-5 (the seed stopped at 4 and asked
    about 5), C = 1, 4, 16, 32, 64, greedy with ignore_eos and fixed lengths (the seed's best case)."""
    return SimTuneConfig(
        engine=SimEngine(),
        settings=default_settings(),
        concurrency=(1, 4, 16, 32, 64),
        repeats=3,
        rounds_per_cell=7,  # the first round is the ramp; 6 more give the steady span its 4 request lifetimes
        workload=WorkloadConfig(prompts="builtin:cpu-mix", max_tokens=512, temperature=0.0, ignore_eos=True),
    )


def production_sim_config() -> SimTuneConfig:
    """The seed grid under production sampling: a chat workload, temperature 0.7, natural EOS (the
    seed's blind spot; compared against `seed_sim_config` to show how much of the gain survives)."""
    seed = seed_sim_config()
    return seed.model_copy(
        update={
            "engine": seed.engine.model_copy(update={"workload_class": "chat"}),
            "workload": seed.workload.model_copy(update={"temperature": 0.7, "ignore_eos": False}),
        }
    )


def production_companion(config: TuneBase) -> TuneBase | None:
    """After the seed's best case (whatever the profile), the same grid under production sampling."""
    if not isinstance(config, SimTuneConfig) or config != seed_sim_config().model_copy(
        update={"engine": config.engine}
    ):
        return None
    production = production_sim_config()
    return production.model_copy(
        update={"engine": production.engine.model_copy(update={"profile": config.engine.profile})}
    )


register(
    EngineSpec(
        name="sim",
        config=SimTuneConfig,
        setting=SGLangSetting,
        adapter=SimAdapter,
        default_settings=default_settings,
        default_config=seed_sim_config,
        runner="specfrontier.runs.virtual_sweep:runner",
        companion=production_companion,
        detectable=False,  # its face answers like SGLang; `bench --url` calls it that
        priority=20,  # right after SGLang, whose interface and settings it has
    )
)


__all__ = [
    "SimAdapter",
    "SimEngine",
    "SimTuneConfig",
    "production_companion",
    "production_sim_config",
    "seed_sim_config",
]
