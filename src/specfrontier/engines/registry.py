"""The engine registry: every engine's config, settings, adapter and parameter names, under one name.

An engine module registers itself when `specfrontier.engines` is imported (`engines/__init__.py` lists
the built-in ones). Everything engine-specific is reached through here: `parse_config` picks the config
class by `engine.name`, the sweep builds the adapter and the runner from the spec, `bench --url` asks
every adapter whether it recognises the server, and stored or imported parameters are read with the
merged parameter names (`vocabulary`). Where the engines' order matters (which adapter `bench --url`
asks first, whose stats form a chunk is read in first, whose parameter names merge first), it is the
order each `EngineSpec` declares (`priority`), never the order the modules happen to be imported in.
Nothing outside an engine's own code (its module here and, for the simulator, the `sim/` package) asks
by engine name or type, except the schedule file formats (`schedules/`, which write SGLang's and vLLM's
formats; docs/architecture.md lists them).

Some engines are known only by their parameter names so far (tables imported from vLLM measurements,
the vLLM schedule format): `register_names` records those without an adapter.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeGuard

from specfrontier.engines.base import EngineAdapter, EngineSetting, FamilyDepth, ParamNames, ScheduleFormat
from specfrontier.errors import ConfigError, shown_value

if TYPE_CHECKING:
    from specfrontier.config.common import TuneBase


@dataclass(frozen=True, slots=True)
class EngineSpec:
    """One registered engine: what `engine.name: <name>` in a config means."""

    name: str
    config: type[TuneBase]
    """The tune config class (its `engine` options and `settings` are this engine's)."""
    setting: type[EngineSetting]
    adapter: type[EngineAdapter[Any]]
    """Built from the config's engine options (`adapter(config.engine)`)."""
    default_settings: Callable[[], tuple[EngineSetting, ...]]
    """What a config without a `settings` key measures."""
    default_config: Callable[[], TuneBase] | None = None
    """What `tune --engine <name>` runs without `--config` (None: a config is required)."""
    runner: str | None = None
    """How a config of this engine is run: `module:function` taking the config and returning a runner, or
    None for the server sweep (`sweep.Sweep`). A name, not a reference, so an engine module does not
    import the layer that runs it (`sweep.make_runner` resolves it)."""
    companion: Callable[[TuneBase], TuneBase | None] | None = None
    """A second run `tune` makes after this config and compares with it (the simulator's seed grid is
    followed by the same grid under production sampling); None or a None result: no second run."""
    detectable: bool = True
    """Whether `bench --url` asks this adapter to recognise a running server."""
    priority: int = 100
    """Where the engine stands in the registry's order, lowest first (equal ones by name): `bench --url`
    asks the adapters to recognise a server in this order and takes the first that does, a streamed
    chunk's speculative stats are read in the first engine's form that finds them, and the engines'
    parameter names merge in it (`vocabulary`). Declared here, so that the order of the imports in
    `engines/__init__.py` decides nothing; an engine that declares none comes after the built-in ones."""
    default: bool = False
    """The engine of a config that names none, and of `tune` without a config (the embedded default)."""


_ENGINES: dict[str, EngineSpec] = {}
_NAMES: dict[str, ParamNames] = {}
_SCHEDULES: dict[str, ScheduleFormat] = {}


def register(spec: EngineSpec, names: ParamNames | None = None) -> EngineSpec:
    """Register an engine (and, if given, how its settings spell the model's parameters); its place in
    the order is its declared `priority`, not when it registers."""
    if spec.name in _ENGINES:
        raise ValueError(f"engine {spec.name!r} is registered twice")
    _ENGINES[spec.name] = spec
    if names is not None:
        register_names(spec.name, names)
    return spec


def register_names(engine: str, names: ParamNames) -> None:
    """Record how an engine's settings spell depth, family, branching and draft length."""
    _NAMES[engine] = names


def register_schedule_format(fmt: ScheduleFormat) -> None:
    """Record an engine's schedule file format (`specfrontier schedule --engine <fmt.engine>`)."""
    _SCHEDULES[fmt.engine] = fmt


def schedule_formats() -> dict[str, ScheduleFormat]:
    """Every registered schedule format by engine name, sorted."""
    return dict(sorted(_SCHEDULES.items()))


def unregister(name: str) -> None:
    """Remove an engine (tests that register a toy engine clean up with this)."""
    _ENGINES.pop(name, None)
    _NAMES.pop(name, None)


def engine_names() -> tuple[str, ...]:
    """Names a config's `engine.name` may take, sorted (messages list them in a stable order)."""
    return tuple(sorted(_ENGINES))


def specs() -> tuple[EngineSpec, ...]:
    """Every registered engine, by declared `priority` then name (`bench --url` asks them in this order)."""
    return tuple(sorted(_ENGINES.values(), key=lambda s: (s.priority, s.name)))


def spec(name: str, *, where: str = "engine.name") -> EngineSpec:
    """The registered engine `name`; ConfigError naming the known ones otherwise."""
    found = _ENGINES.get(name)
    if found is None:
        raise ConfigError(f"{where} = {shown_value(name)}: unknown engine; fix: use one of {', '.join(engine_names())}")
    return found


def engines_with_option(option: str) -> list[str]:
    """Engines whose options have a field called `option` (for the error of a flag such as `--profile`)."""
    found = []
    for s in specs():
        options = s.config.model_fields["engine"].annotation
        if isinstance(options, type) and option in getattr(options, "model_fields", {}):
            found.append(s.name)
    return found


def default_spec() -> EngineSpec:
    """The engine marked `default` (the embedded CPU engine)."""
    return next(s for s in specs() if s.default)


def spec_of(config: TuneBase) -> EngineSpec:
    """The engine a validated config belongs to."""
    return spec(config.engine.name)


def stored_setting(engine: str, name: str, params: Mapping[str, Any]) -> EngineSetting:
    """A setting as it was run, rebuilt from its stored parameters (ConfigError if they no longer fit)."""
    cls = spec(engine, where="run engine").setting
    return cls.model_validate({"name": name, **params})


# -- parameter names of every engine --------------------------------------------------------------

NEUTRAL = ParamNames(depth=("steps",), family=("family",), topk=("topk",))
"""The model's own names, accepted beside every engine's (imported tables, hand-made cells)."""
NO_SPECULATION = ("none", "off", "no-spec", "")
"""Family values that mean "no speculation" in any engine's spelling."""


@dataclass(frozen=True, slots=True)
class Vocabulary:
    """Every registered engine's parameter names merged, in the engines' order (`specs`), then the neutral ones."""

    depth: tuple[str, ...]
    family: tuple[str, ...]
    topk: tuple[str, ...]
    verified: tuple[str, ...]
    draft_length: tuple[str, ...]
    depth_plus_one: tuple[str, ...]
    default_depth: dict[str, int] = field(default_factory=dict)
    """Family field -> the engine's own depth when a setting names that family but no depth."""
    family_depth: dict[tuple[str, str], FamilyDepth] = field(default_factory=dict)
    """(family field, family) -> where that family's depth is (`ParamNames.family_depth`)."""

    def own_depth(self, params: Mapping[str, Any]) -> FamilyDepth | None:
        """Where the depth of the family these parameters name is, when its engine says (else None)."""
        return next((d for (k, family), d in self.family_depth.items() if params.get(k) == family), None)

    @property
    def table_keys(self) -> tuple[str, ...]:
        """The parameter columns an imported table may have: the engines' spellings, plus the neutral
        depth and branching (a drafter family is always given in an engine's spelling)."""
        families = tuple(k for k in self.family if k not in NEUTRAL.family)
        return (*families, *self.depth, *self.topk, *self.verified)

    @property
    def integer_keys(self) -> frozenset[str]:
        return frozenset((*self.depth, *self.topk, *self.verified, *self.draft_length))

    def draft_length_of(self, params: Mapping[str, Any]) -> float:
        """Draft tokens per step a setting's parameters ask for (inf when they do not say: assume the most).

        A family whose engine says where its depth is drafts that field's value or the engine's own
        default (llama.cpp `ngram-cache`: 8); otherwise the smallest of the lengths given counts, and a chain
        with only its depth drafts depth + 1."""
        own = self.own_depth(params)
        if own is not None:
            value = params.get(own.field) if own.field else None
            return float(value) if _is_number(value) else float(own.default)
        given = [float(params[k]) for k in self.draft_length if _is_number(params.get(k))]
        if given:
            return min(given)
        steps = next((v for k in self.depth_plus_one if _is_int(v := params.get(k))), None)
        return float(steps + 1) if steps is not None else math.inf


def vocabulary() -> Vocabulary:
    """The merged parameter names of every registered engine in the engines' order (`specs`; engines known
    by their names only after them, by name), then the neutral ones."""
    ordered = [s.name for s in specs() if s.name in _NAMES]
    parts = [*(_NAMES[n] for n in ordered), *(_NAMES[n] for n in sorted(set(_NAMES) - set(ordered))), NEUTRAL]

    def merged(attr: str) -> tuple[str, ...]:
        seen: dict[str, None] = {}
        for names in parts:
            seen.update(dict.fromkeys(getattr(names, attr)))
        return tuple(seen)

    defaults = {n.family[0]: n.default_depth for n in parts if n.default_depth is not None and n.family}
    family_depth = {(n.family[0], family): d for n in parts if n.family for family, d in n.family_depth.items()}
    return Vocabulary(
        depth=merged("depth"),
        family=merged("family"),
        topk=merged("topk"),
        verified=merged("verified"),
        draft_length=merged("draft_length"),
        depth_plus_one=merged("depth_plus_one"),
        default_depth=defaults,
        family_depth=family_depth,
    )


def _is_number(value: object) -> TypeGuard[int | float]:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


__all__ = [
    "NEUTRAL",
    "EngineSpec",
    "Vocabulary",
    "default_spec",
    "engine_names",
    "engines_with_option",
    "register",
    "register_names",
    "register_schedule_format",
    "schedule_formats",
    "spec",
    "spec_of",
    "specs",
    "stored_setting",
    "unregister",
    "vocabulary",
]
