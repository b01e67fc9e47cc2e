"""Config pieces shared by every engine: strict models, the workload, the sweep shape, and errors.

Every model forbids unknown keys, so a typo is an error, and every validation problem is turned into
one line that names the field, the value seen and the fix. Nothing here launches a server.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Literal, TypeVar

from pydantic import (
    Field,
    PrivateAttr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from specfrontier.config.limits import (
    DEFAULT_MAX_CLIENT_LAG_SHARE,
    DEFAULT_MAX_FAILED_SHARE,
    DEFAULT_MAX_SETTINGS,
    MAX_CLIENT_WORKERS,
    MAX_CONCURRENCY,
    MAX_RATE,
    MAX_REQUEST_TIMEOUT_S,
    MAX_SETTING_NAME,
    MAX_SETTINGS,
    MAX_STARTUP_TIMEOUT_S,
)
from specfrontier.config.search import SearchConfig
from specfrontier.config.strict import StrictModel
from specfrontier.config.workloads import WorkloadSpec
from specfrontier.errors import clip, shown_value

if TYPE_CHECKING:
    from specfrontier.engines.base import EngineOptions, EngineSetting


_Level = TypeVar("_Level", int, float)

STORED = "stored"
"""Validation context key (`model_validate(..., context={STORED: True})`): the config is a stored run's,
validated again to resume it; limits added since it was stored (`MAX_SETTING_NAME`) do not apply."""


LISTEN_FLAGS = {"--host": True, "--port": True, "--allow-remote": False}
"""Launch flags that decide where a server listens or who may reach it (-> whether it takes a value).
specfrontier sets them itself: 127.0.0.1 and a free port, so no server it starts is reachable from the
network (llama-server, for one, has no API key and allows every CORS origin by default)."""


def listen_flag(arg: str) -> str | None:
    """The listening flag that `arg` sets, or None: `--host`, `--host=0.0.0.0`, and abbreviations such as
    `--ho`, because the argparse-based servers (SGLang, the simulator) accept any unique prefix."""
    name = arg.split("=", 1)[0]
    if not name.startswith("--") or len(name) < 3:
        return None
    return next((flag for flag in LISTEN_FLAGS if flag.startswith(name)), None)


def check_extra_args(args: tuple[str, ...], where: str) -> None:
    """Refuse extra launch arguments that would move a server off 127.0.0.1 or off its assigned port."""
    for arg in args:
        flag = listen_flag(arg)
        if flag is None:
            continue
        value = " (and its value)" if LISTEN_FLAGS[flag] and "=" not in arg else ""
        raise ValueError(
            f"{where}.extra_args: {arg}: specfrontier launches every server on 127.0.0.1 and a free port of "
            f"its own; fix: remove {arg}{value}"
        )


def sorted_levels(levels: tuple[_Level, ...], where: str) -> tuple[_Level, ...]:
    """Levels in ascending order; one listed twice is refused (it used to be dropped without a word, and a
    `[4, 4]` meant for two repeats measured C = 4 once per repeat)."""
    seen: set[_Level] = set()
    for level in levels:
        if level in seen:
            raise ValueError(
                f"{where} = {shown_value(list(levels))}: {level:g} is listed twice; fix: list each level once "
                "(more measurements of a level: raise repeats)"
            )
        seen.add(level)
    return tuple(sorted(levels))


class SettingRefused(ValueError):
    """A setting its engine would refuse (or silently rewrite), raised by the engine's setting validator.

    `rule` is the rule broken in general terms, the same text for every setting that breaks it (the
    message itself names this setting's values and the fix), so a `space:` can report its pruned
    combinations grouped by rule, once each."""

    def __init__(self, message: str, rule: str) -> None:
        super().__init__(message)
        self.rule = rule


def startup_timeout(default: float, description: str) -> Any:
    """The `startup_timeout_s` field every engine's options declare: finite, above 0 and at most
    `MAX_STARTUP_TIMEOUT_S`, so a server that never becomes ready cannot hold the run for good."""
    return Field(default, gt=0, le=MAX_STARTUP_TIMEOUT_S, allow_inf_nan=False, description=description)


class LaunchArgs(StrictModel):
    """Base of every model with `extra_args` (engine-wide or per setting) passed verbatim to a server's
    command line: the one place where those arguments are checked (`check_extra_args`).

    The field itself stays declared in each subclass (with its own description, in its own position)."""

    def _args_where(self) -> str:
        """Where the arguments sit in the config, for the error line."""
        return "engine"

    @model_validator(mode="after")
    def _listening_is_ours(self) -> LaunchArgs:
        args: tuple[str, ...] = getattr(self, "extra_args", ())
        check_extra_args(args, self._args_where())
        return self


class WorkloadConfig(StrictModel):
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


class LoadConfig(StrictModel):
    """How load is applied in every cell: closed loop over `concurrency` (the default) or open loop at `rates`.

    Open loop sends requests at gamma-distributed intervals (mean 1/rate; shape = burstiness, 1.0 =
    Poisson), whatever the server's progress; requests scheduled in the first `warmup_s` or the last
    `cooldown_s` are sent but not measured (see `specfrontier.load.open_loop`).
    """

    mode: Literal["closed", "open"] = Field("closed", description="closed: `concurrency` users; open: `rates`.")
    rates: tuple[Annotated[float, Field(gt=0, le=MAX_RATE)], ...] = Field(
        (), description="Open loop: request rates in req/s, one cell each."
    )
    burstiness: float = Field(1.0, gt=0, le=100, description="Gamma shape of the gaps: 1 = Poisson, < 1 burstier.")
    duration_s: float | None = Field(None, gt=0, description="Open loop: schedule length per cell (seconds).")
    requests: int | None = Field(None, ge=2, description="Open loop: requests per cell (instead of duration_s).")
    warmup_s: float = Field(0.0, ge=0, description="Open loop: leading seconds of the schedule not measured.")
    cooldown_s: float = Field(0.0, ge=0, description="Open loop: trailing seconds of the schedule not measured.")
    max_in_flight: int | None = Field(
        None, ge=1, le=MAX_CONCURRENCY, description="Open loop: cap on requests in flight (unset: none)."
    )
    seed: int = Field(0, description="Seed of the arrival schedule (same seed, same send offsets).")

    @field_validator("rates")
    @classmethod
    def _rates_sorted(cls, rates: tuple[float, ...]) -> tuple[float, ...]:
        return sorted_levels(rates, "load.rates")

    @model_validator(mode="after")
    def _consistent(self) -> LoadConfig:
        if self.mode == "closed":
            if self.rates:
                raise ValueError("load.rates = ...: set with load.mode = 'closed'; fix: set load.mode: open")
            return self
        if not self.rates:
            raise ValueError("load.rates: missing for load.mode = 'open'; fix: add e.g. rates: [1.0, 4.0]")
        if (self.duration_s is None) == (self.requests is None):
            raise ValueError("load: open loop needs exactly one of duration_s or requests; fix: set one of them")
        if self.duration_s is not None and self.warmup_s + self.cooldown_s >= self.duration_s:
            raise ValueError(
                f"load.warmup_s + load.cooldown_s = {self.warmup_s + self.cooldown_s}: leaves nothing of "
                f"duration_s = {self.duration_s} to measure; fix: lower them or raise duration_s"
            )
        return self


class ExecutorConfig(StrictModel):
    """Where the settings run: here, one at a time (local), or as tasks on a Ray cluster (docs/scale.md)."""

    kind: Literal["local", "ray"] = Field(
        "local", description="local: one setting at a time on this machine; ray: settings in parallel on a cluster."
    )
    address: str | None = Field(
        None, description="Ray: the cluster to join (e.g. ray://head:10001 or 10.0.0.1:6379); unset: a local Ray."
    )
    resources: dict[str, float] | None = Field(
        None,
        description="Ray: what one setting holds while it runs, e.g. {GPU: 8} or a custom resource; its server "
        "and load generator run together on the node that has them (unset: 1 CPU and the engine's GPUs per "
        "server, its tensor-parallel size).",
    )
    max_attempts: int = Field(
        2, ge=1, le=10, description="Ray: launches of a setting whose node or worker died before it finished."
    )

    @field_validator("resources")
    @classmethod
    def _positive(cls, resources: dict[str, float] | None) -> dict[str, float] | None:
        for name, amount in (resources or {}).items():
            if amount <= 0:
                raise ValueError(f"executor.resources.{name} = {amount}: must be positive; fix: drop it or raise it")
        return resources


_HOST = re.compile(r"[A-Za-z0-9:][A-Za-z0-9_.:-]*|\[[0-9A-Fa-f:.]+\]")
"""A host name, an IPv4 or IPv6 address (bracketed or not): what a server's --host takes, nothing a shell reads."""


class DeployConfig(StrictModel):
    """Where the printed commands serve a recommended setting (the run itself always binds 127.0.0.1 on a
    free port per launch): None keeps the engine's own default."""

    host: str | None = Field(
        None, description="--host of the printed commands (unset: the engine's default, so no --host)."
    )
    port: int | None = Field(
        None, ge=1, le=65535, description="--port of the printed commands (unset: the engine's default port)."
    )

    @field_validator("host")
    @classmethod
    def _host(cls, value: str | None) -> str | None:
        if value is not None and not _HOST.fullmatch(value):
            raise ValueError(
                f"deploy.host = {value!r}: not a host name or IP address; fix: use one such as 0.0.0.0, "
                "127.0.0.1 or my-server (unset: the engine's default)"
            )
        return value


class TuneBase(StrictModel):
    """The sweep shape shared by all engines: concurrency levels x repeats over one workload.

    Subclasses add `engine` and `settings` (each engine module declares its own, see
    `specfrontier.engines.base`); `baseline_hint` says how that engine spells "no speculation".
    """

    if TYPE_CHECKING:  # declared by each engine's subclass, with its own types
        engine: EngineOptions
        settings: tuple[EngineSetting, ...]

    baseline_hint: ClassVar[str] = "add a setting without speculation"
    _settings_summary: str | None = PrivateAttr(None)
    """Where the settings came from when the config did not list them all (`config.load.parse_config`)."""

    @property
    def settings_summary(self) -> str | None:
        """One line: what a `space:` expanded to (the combinations pruned and collapsed, and why), or that
        the config gave no settings and the engine's built-in ones run; None when it listed them."""
        return self._settings_summary

    concurrency: tuple[Annotated[int, Field(ge=1, le=MAX_CONCURRENCY)], ...] = Field(
        (1, 2, 4), min_length=1, description="Closed-loop client concurrency levels."
    )
    repeats: int = Field(3, ge=1, le=50, description="Measurements of every cell (spread is reported).")
    rounds_per_cell: int = Field(
        2,
        ge=1,
        le=1000,
        description="Requests per cell: at least rounds x concurrency, rounded up to whole passes over the prompts.",
    )
    cell_duration_s: float | None = Field(
        None,
        gt=0,
        le=86400,
        description="Closed loop: keep each cell sending whole passes over the prompts until this many seconds "
        "(server time) have passed, so high concurrencies get a steady state of that length (unset: the "
        "request count alone bounds a cell).",
    )
    warmup_rounds: int = Field(
        1, ge=0, le=100, description="Unmeasured rounds at the highest concurrency after each server launch."
    )
    request_timeout_s: float = Field(
        300.0,
        gt=0,
        le=MAX_REQUEST_TIMEOUT_S,
        allow_inf_nan=False,
        description=f"Per-request timeout in seconds (finite, at most {MAX_REQUEST_TIMEOUT_S:g}).",
    )
    max_consecutive_timeouts: int = Field(
        3,
        ge=1,
        le=10000,
        description="Abandon a setting (recorded as failed) once this many requests in a row time out: its "
        "server stopped answering.",
    )
    client_workers: int | Literal["auto"] = Field(
        "auto",
        description="Client processes per cell: a number, or 'auto' (one per 64 streams or 5k events/s, at "
        "most one per CPU; see specfrontier.load.workers).",
    )
    workload: WorkloadConfig = Field(default_factory=WorkloadConfig)
    workloads: tuple[WorkloadSpec, ...] = Field(
        (),
        description="Several workloads, each measured in its own cells (replaces `workload`; see docs/workloads.md).",
    )
    divergence_tolerance: float = Field(
        0.1,
        ge=0.0,
        le=1.0,
        description="Correctness gate: share of greedy requests whose output may differ from the baseline's.",
    )
    allow_unsafe: bool = Field(False, description="Recommend settings the correctness gate marked unsafe.")
    max_failed_share: float = Field(
        DEFAULT_MAX_FAILED_SHARE,
        ge=0.0,
        lt=1.0,
        allow_inf_nan=False,
        description="Evidence rule: a cell whose failed requests exceed this share of its requests (over its "
        "repeats) is shown and flagged but left out of the best setting per level, the crossovers and the "
        "recommendations (0: no failed request at all; docs/reliability.md).",
    )
    max_client_lag_share: float = Field(
        DEFAULT_MAX_CLIENT_LAG_SHARE,
        gt=0.0,
        le=10.0,
        allow_inf_nan=False,
        description="Evidence rule: a cell whose client's event-loop lag p99 exceeded this share of the request "
        "lifetime (or 5 ms where that is more), or whose client CPU exceeded 90 % of a core, could not keep up "
        "(the server saw fewer than C) and is shown and flagged but left out of the decisions (docs/reliability.md).",
    )
    load: LoadConfig = Field(default_factory=LoadConfig, description="Closed loop (default) or open loop.")
    store: Path = Field(Path("specfrontier.db"), description="SQLite result store.")
    search: SearchConfig = Field(default_factory=SearchConfig, description="Which settings to measure (grid: all).")
    executor: ExecutorConfig = Field(
        default_factory=ExecutorConfig, description="Where the settings run (local, or a Ray cluster)."
    )
    deploy: DeployConfig = Field(
        default_factory=DeployConfig,
        description="The address the printed (deployable) commands serve on; the run's own is not printed.",
    )
    drift_control: Literal["auto", "interleave", "reference", "off"] = Field(
        "auto",
        description="Guard against a machine whose speed changes during the run: 'interleave' measures the "
        "settings repeat by repeat (repeat 1 of every setting, then repeat 2, ...: one server launch per setting "
        "and repeat) and reports the drift per level (first vs last repeat); a difference smaller than it is no "
        "win. 'reference': one launch per setting, then the first setting once more on one more launch at the "
        "end, at every level: the drift per level is that end-of-run reference against the setting's own start, "
        "under the same rule. 'auto': interleave where a relaunch is cheap (the engine says so, e.g. llama.cpp) "
        "and the grid search runs locally without verify_schedule, else reference (vLLM, SGLang, TensorRT-LLM: "
        "a relaunch costs minutes) where the run is local; 'off': every repeat of a setting on one launch, no "
        "drift measured (docs/metrics.md, 'Drift').",
    )
    min_repeats: int | None = Field(
        None,
        ge=2,
        le=50,
        description="Sequential rule: after this many repeats, stop a level's repeats once its ranking is settled "
        "(a tie more repeats cannot undo, or wins by more than the spread and the drift); needs interleaved "
        "repeats (drift_control). Unset: every level gets `repeats` (docs/metrics.md, 'Stopping early').",
    )
    cell_lifetimes: float | None = Field(
        None,
        ge=4,
        le=1000,
        description="Closed loop: size each cell from the measured request lifetime: send for this many "
        "lifetimes (C = 1: half as many; the median E2E of the last cell of that level, else the launch's own "
        "first request and warmup), at most cell_duration_s when that is set (unset: cell_duration_s alone).",
    )
    max_settings: int = Field(
        DEFAULT_MAX_SETTINGS,
        ge=1,
        le=MAX_SETTINGS,
        description="Most settings the config may list or its `space:` expand to: a grid search launches a "
        f"server per setting (raise it to run more, at most {MAX_SETTINGS}).",
    )
    verify_schedule: bool = Field(
        False,
        description="After the settings, run the measured best depth per batch size as one more setting (the "
        "engine's own schedule, e.g. SGLang's adaptive config) at every level, and report it against the best "
        "static setting per level (docs/schedules.md).",
    )

    @field_validator("client_workers", mode="before")
    @classmethod
    def _workers(cls, value: object) -> int | str:
        if value == "auto" or (
            isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= MAX_CLIENT_WORKERS
        ):
            return value
        raise ValueError(
            f"client_workers = {shown_value(value)}: not a worker count; "
            f"fix: use a whole number from 1 to {MAX_CLIENT_WORKERS}, or 'auto'"
        )

    @field_validator("concurrency")
    @classmethod
    def _sorted_unique(cls, levels: tuple[int, ...]) -> tuple[int, ...]:
        return sorted_levels(levels, "concurrency")

    def all_settings(self) -> tuple[EngineSetting, ...]:
        settings: tuple[EngineSetting, ...] = getattr(self, "settings", ())
        return settings

    @model_validator(mode="after")
    def _workloads_consistent(self) -> TuneBase:
        # A workload equal to the default says nothing: stored configs (dumped whole) carry it beside their
        # `workloads`, and a resume or a command-line option re-reads them.
        if self.workloads and "workload" in self.model_fields_set and self.workload != WorkloadConfig():
            raise ValueError("workload and workloads: both given; fix: move the workload into the workloads list")
        if self.load.mode == "open" and any(w.sessions for w in self.workloads):
            raise ValueError(
                "workloads[].sessions = true: sessions are replayed closed loop (C sessions in flight); "
                "fix: use load.mode: closed, or drop sessions"
            )
        keys = [w.key for w in self.workloads]
        dupes = sorted({k for k in keys if keys.count(k) > 1})
        if dupes:
            raise ValueError(
                f"workloads: key = {shown_value(dupes[0])} appears twice; "
                "fix: give one of them a distinct name or sampling"
            )
        return self

    @model_validator(mode="after")
    def _executor_supported(self) -> TuneBase:
        if self.executor.kind == "ray" and self.verify_schedule:
            raise ValueError(
                "executor.kind = 'ray' with verify_schedule = true: the schedule is built from the finished run; "
                "fix: run it locally (executor.kind: local), or verify in a second run"
            )
        return self

    @model_validator(mode="after")
    def _names_unique_and_baseline_present(self, info: ValidationInfo) -> TuneBase:
        names = [s.name for s in self.all_settings()]
        stored = bool(info.context and info.context.get(STORED))  # a run's config, stored before the limit
        for i, name in enumerate(names):
            if len(name) > MAX_SETTING_NAME and not stored:
                raise ValueError(
                    f"settings[{i}].name = {shown_value(name)}: longer than {MAX_SETTING_NAME} characters (it labels "
                    f"report rows and names the server's log file); fix: shorten it to {MAX_SETTING_NAME} at most"
                )
        dupes = sorted(n for n, count in Counter(names).items() if count > 1)  # linear: a space may give thousands
        if dupes:
            raise ValueError(
                f"settings: name = {shown_value(dupes[0])} appears twice; fix: give every setting a unique name"
            )
        if not any(not s.speculative for s in self.all_settings()):
            raise ValueError(f"settings: {self.baseline_hint}; speedups are measured against it")
        return self

    @model_validator(mode="after")
    def _schedule_verifiable(self) -> TuneBase:
        if not self.verify_schedule:
            return self
        settings = self.all_settings()
        if settings and not type(settings[0]).runs_schedules:
            engine = getattr(getattr(self, "engine", None), "name", "?")
            raise ValueError(
                f"verify_schedule: engine {engine} has no per-batch-size schedule to run as one setting (SGLang, "
                "vLLM, TensorRT-LLM and the simulator have); fix: remove verify_schedule"
            )
        if self.load.mode == "open":
            raise ValueError(
                "verify_schedule: a schedule is keyed by batch size, measured closed loop; fix: use load.mode: closed"
            )
        if len(self.workloads) > 1:
            raise ValueError("verify_schedule: one schedule is verified per workload; fix: run one workload per tune")
        return self

    @model_validator(mode="after")
    def _repeats_controllable(self) -> TuneBase:
        if self.min_repeats is not None and self.min_repeats > self.repeats:
            raise ValueError(
                f"min_repeats = {self.min_repeats}: above repeats = {self.repeats}; fix: lower min_repeats or "
                "raise repeats"
            )
        if self.min_repeats is not None and self.drift_control in ("off", "reference"):
            raise ValueError(
                "min_repeats: the sequential rule compares settings repeat by repeat, but drift_control is "
                f"{self.drift_control!r}; fix: set drift_control: interleave (or auto), or remove min_repeats"
            )
        if self.drift_control in ("interleave", "reference"):
            why = (interleave_refused if self.drift_control == "interleave" else reference_refused)(self)
            if why is not None:
                raise ValueError(f"drift_control = {self.drift_control!r}: {why}; fix: use drift_control: auto or off")
        return self

    @model_validator(mode="after")
    def _search_fits_sweep(self) -> TuneBase:
        search = self.search
        extra = sorted(set(search.target_concurrency) - set(self.concurrency))
        if extra:
            raise ValueError(
                f"search.target_concurrency = {extra[0]}: not a measured level; "
                f"fix: use levels from concurrency {list(self.concurrency)} or add {extra[0]} to concurrency"
            )
        if search.strategy != "grid" and self.load.mode == "open":
            raise ValueError(
                f"search.strategy = {search.strategy!r}: compares settings per concurrency, but load.mode is open; "
                "fix: use search.strategy: grid, or load.mode: closed"
            )
        return self


DEFAULT_CELL_LIFETIMES = 8.0
"""The default run's cells (`cell_lifetimes`; `bench --url` sizes its cells the same way) send for 8 request
lifetimes (4 at C = 1, which has no ramp): measured with llama.cpp on 2 cores, the C = 4 ramp of the
n-gram settings took 3.2-3.6 lifetimes, leaving 4.2-6 for the steady span where 4 are needed
(`metrics.steady`); at C = 2 the ramp took ~2. Where a request lives shorter, the cell is shorter too
instead of a fixed length."""


def interleave_refused(config: TuneBase) -> str | None:
    """Why a config cannot measure its settings repeat by repeat (None: it can): the interleaved order
    needs every setting known up front (the grid search), one machine, and no setting built from the
    finished run (verify_schedule)."""
    if config.search.strategy != "grid":
        return f"search.strategy = {config.search.strategy!r} chooses settings from results (grid lists them)"
    if config.executor.kind != "local":
        return "executor.kind = 'ray' runs settings side by side on several machines"
    if config.verify_schedule:
        return "verify_schedule builds its setting from the finished run"
    return None


def reference_refused(config: TuneBase) -> str | None:
    """Why a config cannot measure an end-of-run drift reference (None: it can): the reference must run
    on the machine its setting's start ran on."""
    if config.executor.kind != "local":
        return "executor.kind = 'ray' runs settings on several machines; a reference on another is no reference"
    return None


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
    "finite_number": "use a finite number (.inf and .nan are refused: a limit must end)",
    "bool_parsing": "use true or false",
    "int_type": "use a whole number, without quotes (true and false are not numbers)",
    "float_type": "use a number, without quotes (true and false are not numbers)",
    "bool_type": "use true or false, without quotes",
    "string_type": "use text (in quotes when it looks like a number)",
    "tuple_type": "use a list, e.g. [1, 2]",
    "list_type": "use a list, e.g. [1, 2]",
    "dict_type": "use a mapping of key: value",
    "is_instance_of": "use a path (text)",
    "string_pattern_mismatch": "use letters, digits and . _ : + - only",
}


def describe_validation_error(exc: ValidationError, source: str) -> str:
    """One line for the first problem: `<source>: <field> = <value>: <what>; fix: <action>`."""
    first = exc.errors()[0]
    where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in first["loc"]).lstrip(".") or "(top level)"
    where = clip(where)  # a mistyped key may itself be megabytes long
    message = str(first["msg"]).removeprefix("Value error, ")
    more = f" (and {exc.error_count() - 1} more problem(s))" if exc.error_count() > 1 else ""
    if "fix:" in message:
        return f"{source}: {message}{more}"
    if first["type"] == "missing":
        return f"{source}: {where}: missing; fix: add this key{more}"
    value = first.get("input")
    shown = shown_value(value) if not isinstance(value, dict) else "{...}"  # cut: a value may be megabytes
    fix = _FIX_BY_ERROR_TYPE.get(first["type"], "correct this value")
    return f"{source}: {where} = {shown}: {message}; fix: {fix}{more}"


__all__ = [
    "DEFAULT_CELL_LIFETIMES",
    "LISTEN_FLAGS",
    "STORED",
    "DeployConfig",
    "ExecutorConfig",
    "LaunchArgs",
    "LoadConfig",
    "SettingRefused",
    "TuneBase",
    "WorkloadConfig",
    "WorkloadSpec",
    "check_extra_args",
    "describe_validation_error",
    "interleave_refused",
    "listen_flag",
    "reference_refused",
    "startup_timeout",
]
