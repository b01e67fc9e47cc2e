"""The contract every engine fulfils: its settings, its engine options, its adapter, its parameter names.

An engine module (one file: `engines/llamacpp.py`, `engines/sglang.py`, `engines/sim.py`, ...) holds

- an `EngineSetting` subclass: one server-side configuration (what needs a relaunch). It answers for
  itself what the rest of the code would otherwise ask by isinstance or by engine name: whether it
  speculates, which field is its speculation depth (the axis of search ladders), how to make it at
  another depth, how deep a ladder may be extended;
- an `EngineOptions` subclass: how to run the engine for every setting of a sweep (binary, model, ...);
- an `EngineAdapter` subclass: the engine's real interface, how a setting becomes a command line, how to
  tell it is ready, where it reports capacity and speculative counters, and how to recognise a running
  server of this engine (`detect`, for `bench --url`);
- `ParamNames`: how its settings spell depth, drafter family, branching and draft length, so stored
  and imported parameters of any engine map to the performance model and the cost order;

and registers them under one name (`engines.registry.register`). Adapters hold no results: the sweep
asks them for commands and readings and stores what comes back. Adapters are cheap to build;
`prepare()` does the checks that can fail before any server is launched.
"""

from __future__ import annotations

import json
import shlex
import shutil
import tempfile
import weakref
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Generic, Self, TypeVar

import aiohttp

from specfrontier.config.common import LaunchArgs
from specfrontier.errors import EngineResponseError
from specfrontier.records import RequestSpecStats, SpecCounters

SettingT = TypeVar("SettingT")


@dataclass(frozen=True, slots=True)
class Capacity:
    """How many requests the running server admits at once, and where that figure was read."""

    max_running_requests: int
    source: str
    context_tokens: int | None = None


@dataclass(frozen=True, slots=True)
class Deployable:
    """The command a user runs to serve a measured setting (`EngineAdapter.deployable`): the launch command
    without what only the measurement needed (the run's own port and host, counters switched on for the
    run, caching turned off so repeats compare fairly), with every environment variable the server was
    measured under. The store keeps the command as launched; this is drawn from it."""

    argv: tuple[str, ...]
    env: tuple[tuple[str, str], ...] = ()
    """Variables the server ran with on top of the user's environment (`EngineAdapter.environment`)."""
    measuring_only: tuple[str, ...] = ()
    """What the launch command had that is left out here, each with why (e.g. `--metrics (the run read
    its counters)`)."""

    def text(self) -> str:
        """`VAR=value ... command`, quoted for a POSIX shell (a value is quoted after its `=`, so the shell
        still reads the word as an assignment)."""
        words = [f"{name}={shlex.quote(value)}" for name, value in self.env]
        return " ".join([*words, shlex.join(self.argv)])

    def note(self) -> str:
        """One line naming what was only for measuring ('' when nothing was left out)."""
        if not self.measuring_only:
            return ""
        return "left out, only for measuring: " + "; ".join(self.measuring_only)


def without_options(argv: Sequence[str], options: Mapping[str, int]) -> tuple[list[str], list[str]]:
    """`argv` without each option named in `options` (name -> how many values follow it), and the removed
    options as they were written (`--port 36729`). Also drops the `--name=value` spelling."""
    kept: list[str] = []
    removed: list[str] = []
    i = 0
    while i < len(argv):
        word = argv[i]
        name = word.split("=", 1)[0]
        if name in options and i > 0:
            width = 0 if "=" in word else options[name]
            removed.append(shlex.join(argv[i : i + 1 + width]))
            i += 1 + width
            continue
        kept.append(word)
        i += 1
    return kept, removed


def deploy_address(
    argv: Sequence[str], *, host: str | None, port: int | None, host_flag: str = "--host", port_flag: str = "--port"
) -> tuple[list[str], list[str]]:
    """The launch command with the run's own address replaced by the user's: the run's `--host`/`--port`
    left out (the port was a free one picked per launch), the user's configured ones appended (none: the
    engine's defaults). Returns the command and what was left out, with why."""
    kept, removed = without_options(argv, {host_flag: 1, port_flag: 1})
    if host is not None:
        kept += [host_flag, host]
    if port is not None:
        kept += [port_flag, str(port)]
    why = (
        [f"{' '.join(removed)} (the run's own address; set deploy.host / deploy.port to choose one)"] if removed else []
    )
    return kept, why


@dataclass(frozen=True, slots=True)
class RunningNow:
    """Requests the server is running and holding in its queue at one moment (live gauges)."""

    running: int
    waiting: int


@dataclass(frozen=True, slots=True)
class FamilyDepth:
    """Where one drafter family's depth is: the field that sets it (None: no option does) and the depth the
    engine drafts when a setting leaves that field unset (its own default, or a fixed length)."""

    field: str | None
    default: int


@dataclass(frozen=True, slots=True)
class ParamNames:
    """How one engine's settings spell what the performance model, the cost order and imported tables
    need. Every registered engine's names are merged (`registry.vocabulary`), so a stored or imported
    parameter set of any engine reads the same way."""

    depth: tuple[str, ...] = ()
    """Draft depth s (tokens drafted per step along a chain)."""
    family: tuple[str, ...] = ()
    """The drafter family (EAGLE3, ngram-simple, ...): acceptance is fitted per family."""
    topk: tuple[str, ...] = ()
    """Branching per draft step (tree drafting)."""
    verified: tuple[str, ...] = ()
    """Tokens verified per request per step, the root included."""
    draft_length: tuple[str, ...] = ()
    """Fields that bound the draft tokens per step: the cost order of the tie rule takes the smallest."""
    depth_plus_one: tuple[str, ...] = ()
    """Depth fields whose setting drafts depth + 1 tokens per step when no `draft_length` field is set
    (a topk-1 chain verifies its steps plus the bonus token)."""
    default_depth: int | None = None
    """The engine's own depth when a setting names a family but no depth (None: the depth is required)."""
    family_depth: Mapping[str, FamilyDepth] = field(default_factory=dict)
    """Drafter family (its value in the first `family` field) -> where its depth is, for an engine whose
    families read different depth fields (llama.cpp: `draft_n_max` for a draft model, `ngram_size_m` for a
    sized n-gram type, none for `ngram-cache`); a family listed here reads nothing else as its depth."""


class EngineSetting(LaunchArgs):
    """One server-side configuration of an engine. Subclasses declare `name` (first), their fields and
    `extra_args`, and override what differs from these defaults."""

    ladder_family: ClassVar[str] = ""
    """Settings of one family with everything but the depth equal form one ladder (`search.ladder`)."""
    max_depth: ClassVar[int] = 8
    """Deepest depth a ladder extension may reach unless `search.max_depth` says otherwise."""
    depth_followers: ClassVar[tuple[str, ...]] = ()
    """Fields whose value follows the depth (a chain's verified tokens): not part of a ladder's identity."""

    space_labels: ClassVar[Mapping[str, str]] = {}
    """Short labels of numeric knobs in the names a config's `space:` generates (`num_steps` -> `s`, so
    `s3`); a knob without one is spelled by its field name, a text value stands alone (`eagle3`)."""

    if TYPE_CHECKING:  # declared by each subclass, in its own field order (stored parameters keep it)
        name: str
        extra_args: tuple[str, ...]

    @classmethod
    def space_point(cls, values: dict[str, Any]) -> tuple[dict[str, Any], str | None]:
        """One combination of a config's `space:` as the engine would run it, and the engine's rule when it
        rewrote something, so combinations the engine runs identically collapse into one setting
        (`config.space`). Unchanged by default."""
        return values, None

    def _args_where(self) -> str:
        return f"settings[{self.name}]"

    @property
    @abstractmethod
    def speculative(self) -> bool:
        """Whether this setting drafts tokens at all (the baseline does not)."""

    @property
    def depth_field(self) -> str | None:
        """The field holding the speculation depth, when the setting is on a depth ladder (None: not)."""
        return None

    @property
    def depth(self) -> int | None:
        """The setting's speculation depth, or None when it is not on a ladder."""
        name = self.depth_field
        value = getattr(self, name) if name else None
        return int(value) if value is not None else None

    def with_depth(self, depth: int, name: str) -> Self:
        """This setting at another depth, validated like a listed one (`_at_depth` adjusts the rest)."""
        field = self.depth_field
        if field is None:
            raise ValueError(f"setting {self.name!r} is not on a depth ladder")
        data = self.model_dump()
        data.update({"name": name, field: depth})
        return self.model_validate(self._at_depth(data, depth))

    def _at_depth(self, data: dict[str, Any], depth: int) -> dict[str, Any]:
        """Fields that follow the depth (a chain's verified tokens); unchanged by default."""
        return data

    @property
    def drafter(self) -> str | None:
        """The drafter family in this engine's spelling (SGLang's algorithm, llama.cpp's spec type), None
        without speculation; schedule formats map it to their own engine's names."""
        return None

    runs_schedules: ClassVar[bool] = False
    """Whether the engine runs a per-batch-size depth schedule as one setting (`with_schedule`), so `tune`'s
    `verify_schedule` can measure it."""

    def with_schedule(self, depths: Sequence[tuple[int, int]], name: str) -> Self:
        """This chain as one setting running `depths` ((lowest batch size, depth) per range, 0 = no drafting),
        validated like a listed one; only engines with `runs_schedules` implement it."""
        raise NotImplementedError(f"engine setting {type(self).__name__} runs no per-batch-size schedule")

    @property
    def schedule_batch_sizes(self) -> tuple[int, ...]:
        """The batch sizes where a scheduled setting's ranges start (empty for a static one)."""
        return ()

    @property
    def scheduled(self) -> bool:
        """Whether the setting runs a per-batch-size speculation schedule (SGLang's adaptive config): its
        cells are then checked against the best static setting at each level (`analysis.schedule_check`)."""
        return False

    def rejected_drafts_hint(self) -> str:
        """The likely cause, in this engine's terms, when this setting drafts but (almost) nothing is
        accepted, and the fix. The misconfiguration check (`analysis.misconfig`) prints it; an engine
        overrides it where it knows a silent mismatch (SGLang: an EAGLE-3 head under EAGLE)."""
        if "ngram" in (self.drafter or "").lower() or "lookup" in (self.drafter or "").lower():
            return (
                "an n-gram drafter proposes continuations of text already seen, and this workload rarely "
                "repeats it; fix: keep n-gram speculation for copy-heavy workloads (code edits, RAG, "
                "summaries), or use a draft model"
            )
        return (
            "the drafter does not match the target (a draft of another model, tokenizer or checkpoint, or a "
            "head of another kind); fix: use the draft model or head trained for this target"
        )

    def parameters(self) -> dict[str, Any]:
        """The parameters that were set explicitly (what distinguishes this setting), for reports."""
        return self.model_dump(exclude={"name"}, exclude_none=True, exclude_defaults=True)

    def ladder_parameters(self) -> dict[str, Any]:
        """The parameters a ladder's members share: all but the depth and the fields that follow it."""
        params = self.parameters()
        for name in (self.depth_field, *self.depth_followers):
            params.pop(name or "", None)
        return params


class EngineOptions(LaunchArgs):
    """How to run one engine for every setting of a sweep. Subclasses declare `name` as a Literal of
    their registered name (the config's discriminator), `startup_timeout_s` and their own options."""

    if TYPE_CHECKING:
        name: str
        startup_timeout_s: float


class EngineAdapter(ABC, Generic[SettingT]):
    """One engine's real interface. Methods are called in this order: prepare, then per setting
    command -> (server runs) -> capacity -> spec_counters before and after each window."""

    name: ClassVar[str]
    display_name: ClassVar[str] = ""
    """How the engine is named in reports and in `bench` runs (default: `name`)."""
    health_path: ClassVar[str] = "/health"
    health_timeout_s: ClassVar[float] = 10.0
    """Longest one health probe may take to answer (readiness and the check after a window that lost
    connections): a handler that generates before it answers (SGLang) needs more than a plain `/health`."""
    counters_source: ClassVar[str] = ""
    keep_alive: ClassVar[bool] = True
    """Whether the server keeps a connection open after a streamed response, so the client reuses it
    (see `StreamingClient`); False for an engine known to close it, so no request meets a dead socket."""
    cheap_relaunch: ClassVar[bool] = False
    """Whether a server launch costs seconds, not minutes (no GPU weights to load, no graphs to capture):
    `drift_control: auto` then measures the settings repeat by repeat, one launch per setting and repeat."""

    files_dir: Path | None = None
    """Where files a launch reads (an options or schedule file) are written: the sweep sets it to the run's
    log folder, so a stored launch command still finds its file after the run; None: a temporary folder of
    the adapter, removed with it."""

    def __init__(self, engine: Any) -> None:
        """Built from the config's engine options (`EngineSpec.adapter(config.engine)`); cheap, no I/O."""
        self.engine = engine

    def launch_file(self, name: str, text: str) -> Path:
        """Write a file a launch command reads (`files_dir`, else the adapter's temporary folder) and return
        its path."""
        folder = self.files_dir
        if folder is None:
            folder = getattr(self, "_temporary_files", None)
            if folder is None:
                folder = Path(tempfile.mkdtemp(prefix=f"specfrontier-{self.name}-"))
                weakref.finalize(self, shutil.rmtree, folder, True)
                self._temporary_files = folder
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / name
        path.write_text(text, encoding="utf-8")
        return path

    @abstractmethod
    def prepare(self, settings: tuple[SettingT, ...]) -> None:
        """Resolve binaries and model files and check every setting against the installed version.

        Raises ConfigError or DependencyError; never starts a server.
        """

    @abstractmethod
    def command(self, setting: SettingT, *, port: int, max_concurrency: int) -> list[str]:
        """The exact argv that serves `setting` on 127.0.0.1:`port` for up to `max_concurrency` clients."""

    @abstractmethod
    def version(self) -> str:
        """A human-readable version string of the engine binary (for the environment record)."""

    def gpus_per_server(self) -> int:
        """GPUs one server of this engine holds (its parallel size): what the Ray executor places a
        setting with unless the config says otherwise (0: a CPU engine or the simulator)."""
        return 0

    def environment(self) -> dict[str, str]:
        """Environment variables the server needs on top of ours (none by default). Not stored with the
        run (only the command is), so they must hold no secret the user did not put in a config."""
        return {}

    @classmethod
    def performance_warnings(cls, log: str) -> tuple[str, ...]:
        """What the server's own log warns about its speed (none by default): the run records them per
        setting (`store.ENGINE_WARNINGS_KEY` of its environment) and the report prints them beside the figures."""
        return ()

    def deployable(
        self, setting: SettingT | None, launched: Sequence[str], *, host: str | None, port: int | None
    ) -> Deployable:
        """The command a user runs to serve `setting` as it was measured, from the command it was `launched`
        with (stored with the run): the user's `host`/`port` (None: the engine's default), the flags that
        only served the measurement left out, the variables of `environment()` in front. An engine whose
        launch command holds more measurement-only flags overrides this (`setting`: None when its stored
        parameters no longer parse). Needs no `prepare()`: reports draw it from the store."""
        argv, left_out = deploy_address(launched, host=host, port=port)
        return Deployable(tuple(argv), tuple(sorted(self.environment().items())), tuple(left_out))

    @abstractmethod
    async def capacity(self, session: aiohttp.ClientSession, base_url: str, setting: SettingT) -> Capacity:
        """Read back the resolved capacity from the running server (never assumed from flags)."""

    # What follows reads a running server and needs no launch options, so it is asked of the class too
    # (`bench --url` measures a server it did not launch with the adapter that recognised it).

    @classmethod
    @abstractmethod
    async def spec_counters(cls, session: aiohttp.ClientSession, base_url: str) -> SpecCounters | None:
        """Cumulative speculative counters now, or None if the server exposes none."""

    @classmethod
    async def running_now(cls, session: aiohttp.ClientSession, base_url: str) -> RunningNow | None:
        """Requests running and waiting now, for engines whose running limit is not readable (None: the
        engine reports no such gauges). Sampled under load to observe the effective limit."""
        return None

    @classmethod
    @abstractmethod
    def request_spec_stats(cls, chunk: Mapping[str, Any]) -> RequestSpecStats | None:
        """Per-request speculative counts found in one parsed stream chunk, if any."""

    @classmethod
    def request_extras(cls) -> dict[str, Any]:
        """Engine-specific fields for every request body; none by default."""
        return {}

    @classmethod
    async def detect(cls, session: aiohttp.ClientSession, root: str) -> Detected | None:
        """What a running server at `root` says about itself if it is this engine (None: it is not).

        `bench --url` asks every registered adapter in turn; an adapter that cannot tell returns None."""
        return None

    @classmethod
    def label(cls) -> str:
        return cls.display_name or cls.name

    @property
    def simulated(self) -> bool:
        """True when the server is a model (the simulator's HTTP face), not a real engine."""
        return False

    @property
    def time_scale(self) -> float:
        """Simulated seconds per wall second of the server (1.0 for every real engine)."""
        return 1.0

    @property
    def startup_timeout_s(self) -> float:
        """Seconds to wait for readiness (engine configs carry it)."""
        return 120.0


async def get_json(session: aiohttp.ClientSession, url: str) -> Any:
    """GET a JSON document for `detect`: None for any non-200 answer, a non-JSON body or a failed
    connection (a server that does not offer an endpoint is simply not that engine)."""
    try:
        async with session.get(url) as resp:
            if resp.status != 200:
                return None
            try:
                return await resp.json(content_type=None)
            except ValueError:
                return None
    except (aiohttp.ClientError, OSError, TimeoutError):
        return None


async def get_text(session: aiohttp.ClientSession, url: str, what: str, hint: str = "") -> str:
    """GET a text document a running server must offer (its `/metrics`): EngineResponseError naming
    `what` for any answer but 200 (`hint`: what to check, e.g. a flag that enables the endpoint)."""
    async with session.get(url) as resp:
        if resp.status != 200:
            raise EngineResponseError(f"{what}: status {resp.status}; expected 200{f' ({hint})' if hint else ''}")
        return await resp.text()


@dataclass(frozen=True, slots=True)
class LaunchTarget:
    """What a schedule's or a static setting's launch command runs: the target model, the draft model, and
    the deployable command the run measured on the format's own engine (None: another engine's run, so the
    command is written with placeholders)."""

    model: str
    draft_model: str | None
    launch: Deployable | None = None


class ScheduleFormat(ABC):
    """How one engine reads a per-batch-size speculation schedule (`specfrontier schedule --engine NAME`):
    the file, the launch command that uses it, and the command of one static setting. The schedule is a
    `schedules.choose.DepthSchedule` (its `template` the ladder's deepest setting, of the run's engine)."""

    engine: ClassVar[str]

    @abstractmethod
    def config(self, schedule: Any, *, draft_model: str) -> dict[str, Any]:
        """The schedule as the engine's file (JSON); ConfigError when the engine cannot run this ladder."""

    @abstractmethod
    def command(self, schedule: Any, config: dict[str, Any], config_path: str, target: LaunchTarget) -> str:
        """The engine's launch command running the schedule written at `config_path`. `target.launch`: the
        deployable command of the ladder's deepest setting when the run measured it on this engine (its
        interpreter, model, limits and environment are what the schedule runs with), else None (placeholders)."""

    @abstractmethod
    def static_command(self, setting: EngineSetting, target: LaunchTarget) -> str:
        """The engine's launch command for one static setting (`target.launch`: its deployable command when it
        was measured on this engine)."""

    def file_text(self, config: dict[str, Any]) -> str:
        """The file as the engine reads it (JSON unless the engine reads another format)."""
        return json.dumps(config, indent=2) + "\n"

    def above_last(self, config: dict[str, Any]) -> str:
        """What the engine runs above the schedule's last range (SGLang and vLLM: the last depth)."""
        return "above the last range: the last depth"


@dataclass(frozen=True, slots=True)
class Detected:
    """A running server recognised by its adapter (`EngineAdapter.detect`): its capacity (None: it did not
    say) with where that was read, and its version."""

    capacity: Capacity | None
    capacity_source: str
    version: str
    running_limit_read: bool = True
    """False when `capacity` is only an upper bound (vLLM's KV cache without `max_num_seqs`): `bench` then
    watches the live gauges (`running_now`) under a load above its top level to observe the real limit."""


__all__ = [
    "Capacity",
    "Deployable",
    "Detected",
    "EngineAdapter",
    "EngineOptions",
    "EngineSetting",
    "FamilyDepth",
    "LaunchTarget",
    "ParamNames",
    "RunningNow",
    "ScheduleFormat",
    "SettingT",
    "deploy_address",
    "get_json",
    "get_text",
    "without_options",
]
