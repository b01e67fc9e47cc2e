"""SGLang: settings, engine options and the adapter (the simulator's HTTP face reuses the adapter,
see `engines/sim.py`).

The setting constraints are SGLang's own (`engines/sglang_rules.py`, read at the source of sglang
0.5.23), checked before anything launches: the tree bound `num_draft_tokens <= eagle_topk + (num_steps -
1) * eagle_topk^2 + 1`, the topk-1 rewrite (refused rather than letting the server change a setting behind
the user's back), the algorithm list (probed from the installed server's `--help`), NGRAM's and DFLASH's
own knobs.

Facts the adapter relies on (SGLang 0.5.23):
- settings are `--speculative-algorithm/-num-steps/-eagle-topk/-num-draft-tokens` and
  `--max-running-requests`; the arg parser allows unique prefixes, so spellings are probed from `--help`
  and only exact, present options are used;
- under speculation an unset `--max-running-requests` is silently reset to 48: the resolved value is
  read back from `/server_info` and the reset is reported in the capacity source;
- `/health_generate` is the readiness probe (uvicorn listens before warm-up ends);
- exact acceptance comes from each streamed request's `sglext.spec_tokens_details` chunk
  (`spec_num_correct_drafts`, `spec_num_proposed_drafts`, `spec_verify_ct`, computed by SGLang's
  TokenizerManager), asked for with `return_spec_tokens_details`; `meta_info` carries the same figures where
  SGLang gives it (non-streaming chat, `/generate`) and is read there too, but never asked for: streaming
  chat refuses `return_meta_info` with HTTP 400. The server's `avg_spec_accept_length` is lifetime-
  cumulative and updated every 40 decode batches, so it is never used for a window.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar, Literal

import aiohttp
from pydantic import Field, field_validator, model_validator

from specfrontier.config.common import TuneBase, startup_timeout
from specfrontier.engines.base import (
    Capacity,
    Deployable,
    Detected,
    EngineAdapter,
    EngineOptions,
    EngineSetting,
    LaunchTarget,
    ParamNames,
    ScheduleFormat,
    get_json,
    without_options,
)
from specfrontier.engines.probe import help_options, probe_help
from specfrontier.engines.registry import EngineSpec, register, register_schedule_format
from specfrontier.engines.sglang_rules import (
    DOCUMENTED_ALGORITHMS,
    KNOB_FLAGS,
    NGRAM_DEFAULT_DRAFT_TOKENS,
    SOURCE,
    TREE_ALGORITHMS,
    algorithms_from_help,
    check_algorithm,
    check_setting,
)
from specfrontier.errors import ConfigError, EngineResponseError
from specfrontier.records import RequestSpecStats, SpecCounters
from specfrontier.textfiles import file_name_for

SpecAlgorithm = str
"""An SGLang speculative algorithm name (`sglang_rules.DOCUMENTED_ALGORITHMS`, narrowed by the installed `--help`)."""


class SGLangSetting(EngineSetting):
    """One SGLang speculative configuration (`--speculative-*`, `--max-running-requests`)."""

    ladder_family: ClassVar[str] = "sglang"
    max_depth: ClassVar[int] = 8
    depth_followers: ClassVar[tuple[str, ...]] = ("num_draft_tokens",)
    space_labels: ClassVar[Mapping[str, str]] = {
        "num_steps": "s",
        "eagle_topk": "k",
        "num_draft_tokens": "d",
        "max_running_requests": "mrr",
        "ngram_min_bfs_breadth": "bmin",
        "ngram_max_bfs_breadth": "b",
        "ngram_max_trie_depth": "trie",
        "ngram_capacity": "cap",
        "dflash_block_size": "block",
        "draft_window_size": "win",
    }

    name: str = Field(min_length=1, pattern=r"^[A-Za-z0-9_.:+-]+$", description="Unique label of the setting.")
    algorithm: SpecAlgorithm | None = Field(
        None,
        description="--speculative-algorithm (unset = no speculation): "
        + ", ".join(DOCUMENTED_ALGORITHMS)
        + f" ({SOURCE}; the installed server's --help decides); upper-cased as SGLang does.",
    )
    num_steps: int | None = Field(None, ge=1, le=32, description="--speculative-num-steps: draft depth.")
    eagle_topk: int | None = Field(None, ge=1, le=32, description="--speculative-eagle-topk: branching per step.")
    num_draft_tokens: int | None = Field(
        None, ge=2, le=1024, description="--speculative-num-draft-tokens: verified tokens incl. the root."
    )
    max_running_requests: int | None = Field(
        None, ge=1, le=100000, description="--max-running-requests (SGLang resets an unset one to 48 with spec)."
    )
    ngram_min_bfs_breadth: int | None = Field(
        None, ge=1, le=1024, description="NGRAM: --speculative-ngram-min-bfs-breadth (SGLang default 1)."
    )
    ngram_max_bfs_breadth: int | None = Field(
        None,
        ge=1,
        le=1024,
        description="NGRAM: --speculative-ngram-max-bfs-breadth, the tree's branching (SGLang default 10; it "
        "replaces eagle_topk).",
    )
    ngram_match_type: Literal["BFS", "PROB"] | None = Field(
        None, description="NGRAM: --speculative-ngram-match-type (SGLang default BFS)."
    )
    ngram_max_trie_depth: int | None = Field(
        None, ge=1, le=1024, description="NGRAM: --speculative-ngram-max-trie-depth (SGLang default 18)."
    )
    ngram_capacity: int | None = Field(
        None, ge=1, description="NGRAM: --speculative-ngram-capacity, cache entries (SGLang default 10M)."
    )
    dflash_block_size: int | None = Field(
        None,
        ge=1,
        le=1024,
        description="DFLASH: --speculative-dflash-block-size, the verify window (an alias of num_draft_tokens; "
        "unset: read from the draft model's config).",
    )
    draft_window_size: int | None = Field(
        None,
        ge=1,
        description="--speculative-draft-window-size: the draft's sliding window (DFLASH: at least its block).",
    )
    adaptive_config: dict[int, list[int]] | None = Field(
        None,
        description=(
            "--speculative-adaptive with --speculative-adaptive-config: candidate steps per batch size (a "
            "running batch uses the entry with the largest batch size not above it; one step pins it, several "
            "let SGLang's controller choose by acceptance; 0 = no drafting). EAGLE/EAGLE3 chains only; "
            "num_steps must be one of the steps. Unset = a static depth."
        ),
    )
    extra_args: tuple[str, ...] = Field(
        (), description="More launch arguments, passed verbatim (not --host/--port/--allow-remote)."
    )

    @field_validator("algorithm", mode="before")
    @classmethod
    def _upper(cls, value: object) -> object:
        """SGLang upper-cases the algorithm before it looks it up (speculative_hook.py:142)."""
        return value.upper() if isinstance(value, str) else value

    @model_validator(mode="after")
    def _sglang_constraints(self) -> SGLangSetting:
        where = f"settings[{self.name}]"
        if self.adaptive_config is not None:
            _check_adaptive(self, where)
        check_setting(self, where)
        return self

    @classmethod
    def space_point(cls, values: dict[str, Any]) -> tuple[dict[str, Any], str | None]:
        """A topk-1 chain of the EAGLE family verifies num_steps + 1 whatever num_draft_tokens says (SGLang
        rewrites it, speculative_hook.py _handle_eagle_family): the space's chains differing only there
        are one setting."""
        algorithm = str(values.get("algorithm") or "").upper()
        steps, draft = values.get("num_steps"), values.get("num_draft_tokens")
        chain = algorithm in TREE_ALGORITHMS and (values.get("eagle_topk") or 1) == 1
        if chain and isinstance(steps, int) and draft is not None and draft != steps + 1:
            return {**values, "num_draft_tokens": steps + 1}, "eagle_topk 1 runs num_draft_tokens = num_steps + 1"
        return values, None

    @property
    def speculative(self) -> bool:
        return self.algorithm is not None

    @property
    def drafter(self) -> str | None:
        return self.algorithm

    runs_schedules: ClassVar[bool] = True

    @property
    def scheduled(self) -> bool:
        return self.adaptive_config is not None

    @property
    def schedule_batch_sizes(self) -> tuple[int, ...]:
        return tuple(sorted(self.adaptive_config or {}))

    def with_schedule(self, depths: Sequence[tuple[int, int]], name: str) -> SGLangSetting:
        """SGLang's adaptive mode with one pinned candidate per range, started at the deepest step."""
        deepest = max(d for _, d in depths)
        data = self.model_dump()
        data.update(
            name=name,
            num_steps=deepest,
            eagle_topk=1,
            num_draft_tokens=None,
            adaptive_config={lo: [d] for lo, d in depths},
        )
        return self.model_validate(data)

    def rejected_drafts_hint(self) -> str:
        """SGLang loads an EAGLE-3 head under EAGLE (and the reverse) without an error and accepts nothing."""
        if self.algorithm in ("EAGLE", "EAGLE3"):
            other = "EAGLE" if self.algorithm == "EAGLE3" else "EAGLE3"
            return (
                f"the draft head is not an {self.algorithm} head for this target: SGLang runs an EAGLE-3 head "
                "under --speculative-algorithm EAGLE (and the reverse) without an error and accepts nothing (a "
                "reported case: acceptance length 1.0), as it does a head trained for another model; fix: set "
                f"algorithm to the head's kind (here likely {other}) and engine.draft_model "
                "(--speculative-draft-model-path) to the head published for this target"
            )
        if self.algorithm == "NEXTN":
            return (
                "NEXTN drafts with the checkpoint's own MTP layers; a checkpoint without them (or quantised "
                "without them) drafts noise; fix: use a checkpoint that ships its MTP layers, or EAGLE3 with a head"
            )
        return super().rejected_drafts_hint()

    @property
    def depth_field(self) -> str | None:
        """`num_steps` of a static chain (eagle_topk 1); a tree or an adaptive schedule is not on a depth ladder."""
        chain = self.algorithm in TREE_ALGORITHMS and self.num_steps is not None and (self.eagle_topk or 1) == 1
        return "num_steps" if chain and self.adaptive_config is None else None

    def _at_depth(self, data: dict[str, Any], depth: int) -> dict[str, Any]:
        """A chain's verified tokens follow its steps (SGLang requires steps + 1 with eagle_topk 1)."""
        if self.num_draft_tokens is not None:
            data["num_draft_tokens"] = depth + 1
        return data

    @property
    def resolved_draft_tokens(self) -> int | None:
        """num_draft_tokens as the server will run it: steps + 1 for a topk-1 chain, 12 for NGRAM without
        one, DFLASH's block size; None where SGLang chooses (auto parameters, a block read from the draft)."""
        if self.algorithm == "NGRAM":
            return self.num_draft_tokens or NGRAM_DEFAULT_DRAFT_TOKENS
        if self.algorithm not in TREE_ALGORITHMS:
            return self.num_draft_tokens or self.dflash_block_size
        if self.num_steps is None:
            return None
        if (self.eagle_topk or 1) == 1:
            return self.num_steps + 1
        return self.num_draft_tokens

    @property
    def knob_args(self) -> list[str]:
        """The algorithm's own flags (NGRAM, DFLASH, the draft window) that are set, in SGLang's spelling."""
        argv: list[str] = []
        for knob, flag in KNOB_FLAGS.items():
            value = getattr(self, knob)
            if value is not None:
                argv += [flag, str(value)]
        return argv


class SGLangEngine(EngineOptions):
    """A real SGLang server (`python -m sglang.launch_server`)."""

    name: Literal["sglang"] = Field("sglang", description="Engine adapter.")
    model_path: str = Field(description="--model-path of the target model.")
    draft_model_path: str | None = Field(None, description="--speculative-draft-model-path (EAGLE head, draft).")
    python: Path | None = Field(None, description="Python that has sglang installed (default: this one).")
    launch_module: str = Field(
        "sglang.launch_server",
        pattern=r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$",
        description="Module `python -m` serves with: SGLang's launcher, or a wrapper that takes its arguments "
        "(specfrontier.sim.sglang_frontend: SGLang's own server with the simulator as its GPU, .venv-sglang).",
    )
    tp_size: int = Field(1, ge=1, le=64, description="--tp-size.")
    mem_fraction_static: float | None = Field(None, gt=0.0, lt=1.0, description="--mem-fraction-static.")
    startup_timeout_s: float = startup_timeout(900.0, "Seconds to wait for /health_generate.")
    extra_args: tuple[str, ...] = Field((), description="More launch arguments for every setting (not --host/--port).")


class SGLangTuneConfig(TuneBase):
    """A sweep of SGLang settings on a real SGLang server."""

    baseline_hint: ClassVar[str] = "no setting without `algorithm`; fix: add a baseline (name: baseline)"

    engine: SGLangEngine
    settings: tuple[SGLangSetting, ...] = Field(min_length=1, description="Settings to compare.")

    @model_validator(mode="after")
    def _draft_model_where_needed(self) -> SGLangTuneConfig:
        """DFLASH refuses to start without a draft model (speculative_hook.py _handle_dflash)."""
        needs = next((s for s in self.settings if s.algorithm == "DFLASH"), None)
        if needs is not None and self.engine.draft_model_path is None:
            raise ValueError(
                f"settings[{needs.name}]: algorithm DFLASH needs a draft model and engine.draft_model_path is "
                "unset (SGLang refuses to start); fix: set engine.draft_model_path to the DFlash draft"
            )
        return self

    @model_validator(mode="after")
    def _schedules_not_turned_off(self) -> SGLangTuneConfig:
        """Engine arguments under which SGLang would run every schedule as its static setting (see
        ADAPTIVE_OFF_FLAGS), refused where a schedule is listed or `verify_schedule` will add one."""
        flag = adaptive_off_flag(self.engine.extra_args)
        scheduled = next((s.name for s in self.settings if s.adaptive_config is not None), None)
        if flag is not None and (scheduled is not None or self.verify_schedule):
            who = f"settings[{scheduled}] has adaptive_config" if scheduled else "verify_schedule measures a schedule"
            raise ValueError(
                f"engine.extra_args has {flag} and {who}: SGLang turns adaptive mode off under "
                f"{ADAPTIVE_OFF_FLAGS[flag]} (a warning, then the static setting under the schedule's name); fix: "
                f"remove {flag}, or measure no schedule"
            )
        return self


SPEC_DEFAULT_CAP = 48
REQUIRED_FLAGS = ("--host", "--port", "--max-running-requests")
ADAPTIVE_FLAGS = ("--speculative-adaptive", "--speculative-adaptive-config")
SPEC_FLAGS = (
    "--speculative-algorithm",
    "--speculative-num-steps",
    "--speculative-eagle-topk",
    "--speculative-num-draft-tokens",
)


def setting_args(setting: SGLangSetting, adaptive_path: str = "<adaptive-config.json>") -> list[str]:
    """SGLang flags of a setting, with the draft tokens as SGLang resolves them (steps + 1 for topk 1); an
    adaptive setting reads its config from `adaptive_path` (the adapter writes the file there)."""
    argv: list[str] = []
    if setting.algorithm is not None:
        argv += ["--speculative-algorithm", setting.algorithm]
        if setting.algorithm in TREE_ALGORITHMS and setting.num_steps is not None:
            argv += ["--speculative-num-steps", str(setting.num_steps)]
            argv += ["--speculative-eagle-topk", str(setting.eagle_topk or 1)]
            argv += ["--speculative-num-draft-tokens", str(setting.resolved_draft_tokens)]
        elif setting.algorithm not in TREE_ALGORITHMS:  # each flag as set: SGLang fills in the rest itself
            for knob in ("num_steps", "eagle_topk", "num_draft_tokens"):
                value = getattr(setting, knob)
                if value is not None:
                    argv += [f"--speculative-{knob.replace('_', '-')}", str(value)]
        argv += setting.knob_args
        if setting.adaptive_config is not None:
            argv += ["--speculative-adaptive", "--speculative-adaptive-config", adaptive_path]
    if setting.max_running_requests is not None:
        argv += ["--max-running-requests", str(setting.max_running_requests)]
    return argv


class SGLangAdapter(EngineAdapter[SGLangSetting]):
    """Launches `python -m sglang.launch_server` (or the simulator's face) per setting."""

    name: ClassVar[str] = "sglang"
    health_path: ClassVar[str] = "/health_generate"
    health_timeout_s: ClassVar[float] = 30.0
    """`/health_generate` runs a one-token generation and sleeps in 1 s steps until the scheduler answered,
    up to HEALTH_CHECK_TIMEOUT = 20 s (0.5.23 `srt/entrypoints/http_server.py:218`, `:779`): a probe cut
    at 1 s never saw a real SGLang ready (issue 37)."""
    counters_source: ClassVar[str] = ""

    def __init__(self, engine: EngineOptions, *, help_text: str | None = None) -> None:
        self.engine = engine
        self._help_text = help_text
        self._flags = help_options(help_text or "")

    def gpus_per_server(self) -> int:
        return self.engine.tp_size if isinstance(self.engine, SGLangEngine) else 0  # the simulator's face: none

    def _launcher(self) -> list[str]:
        """The command up to the setting's flags: `python -m sglang.launch_server` with the engine options."""
        eng = self.engine
        assert isinstance(eng, SGLangEngine)
        python = str(eng.python) if eng.python is not None else sys.executable
        argv = [python, "-m", eng.launch_module, "--model-path", eng.model_path, "--tp-size", str(eng.tp_size)]
        if eng.draft_model_path is not None:
            argv += ["--speculative-draft-model-path", eng.draft_model_path]
        if eng.mem_fraction_static is not None:
            argv += ["--mem-fraction-static", str(eng.mem_fraction_static)]
        return argv

    def _engine_args(self) -> tuple[str, ...]:
        """The engine options' own `extra_args`, after the setting's flags."""
        return tuple(getattr(self.engine, "extra_args", ()))

    @property
    def startup_timeout_s(self) -> float:
        return float(self.engine.startup_timeout_s)

    def prepare(self, settings: tuple[SGLangSetting, ...]) -> None:
        if self._help_text is None:
            self._help_text = probe_help(
                [*self._launcher()[:3], "--help"],
                timeout_s=120,
                where="engine",
                fix="install sglang or set engine.python",
            )
            self._flags = help_options(self._help_text)
        missing = [f for f in REQUIRED_FLAGS if f not in self._flags]
        if any(s.speculative for s in settings):
            missing += [f for f in SPEC_FLAGS if f not in self._flags]
        knobs = {flag for s in settings for flag in s.knob_args if flag.startswith("--")}
        missing += sorted(f for f in knobs if f not in self._flags)
        if any(s.adaptive_config is not None for s in settings):
            missing += [f for f in ADAPTIVE_FLAGS if f not in self._flags]
        if missing:
            raise ConfigError(
                f"engine: the server's --help has no {', '.join(missing)}; fix: install a SGLang that has them "
                "(0.5.x) or point engine.python at its environment"
            )
        installed = self.algorithms
        for s in settings:
            if s.algorithm is not None:
                try:
                    check_algorithm(s.algorithm, f"settings[{s.name}]", installed)
                except ValueError as exc:
                    raise ConfigError(f"{exc} (the installed server's --help)") from exc

    @property
    def algorithms(self) -> tuple[str, ...]:
        """The speculative algorithms the installed server starts with: from its `--help` (argparse choices
        or its list of builtins), else the documented list (`sglang_rules.DOCUMENTED_ALGORITHMS`)."""
        probed = algorithms_from_help(self._help_text or "")
        return probed if probed is not None else DOCUMENTED_ALGORITHMS

    def command(self, setting: SGLangSetting, *, port: int, max_concurrency: int) -> list[str]:
        """The capacity is the setting's own `max_running_requests`, never raised behind the user's back:
        the resolved value (SGLang may reset it) is read back after launch. An adaptive setting's config is
        written to the adapter's own temporary folder first."""
        path = str(self._adaptive_file(setting)) if setting.adaptive_config is not None else ""
        argv = [*self._launcher(), "--host", "127.0.0.1", "--port", str(port), *setting_args(setting, path)]
        return argv + list(self._engine_args()) + list(setting.extra_args)

    def _adaptive_file(self, setting: SGLangSetting) -> Path:
        text = json.dumps(adaptive_config_json(setting.adaptive_config or {}), indent=2)
        return self.launch_file(file_name_for(setting.name, ".adaptive.json"), text)

    def version(self) -> str:
        return "sglang (version from /server_info)"

    async def _server_info(self, session: aiohttp.ClientSession, base_url: str) -> dict[str, Any]:
        for path in ("/server_info", "/get_server_info"):  # older releases have only the second
            async with session.get(base_url + path) as resp:
                if resp.status == 404:
                    continue
                if resp.status != 200:
                    raise EngineResponseError(f"sglang {path}: status {resp.status}; expected 200")
                info = await resp.json(content_type=None)
                if not isinstance(info, dict):
                    raise EngineResponseError(f"sglang {path}: expected a JSON object")
                return info
        raise EngineResponseError("sglang: neither /server_info nor /get_server_info exists")

    async def capacity(self, session: aiohttp.ClientSession, base_url: str, setting: SGLangSetting) -> Capacity:
        info = await self._server_info(session, base_url)
        check_schedule_taken(info, setting)
        return capacity_from_server_info(info, setting)

    @classmethod
    async def spec_counters(cls, session: aiohttp.ClientSession, base_url: str) -> SpecCounters | None:
        """None: SGLang has no exact window counters; the sweep sums per-request meta_info instead."""
        return None

    @classmethod
    def request_extras(cls) -> dict[str, Any]:
        """Ask for per-request speculative stats as SGLang reports them in a stream: the
        `sglext.spec_tokens_details` chunk after the finish chunk, on both endpoints
        (`return_spec_tokens_details`: 0.5.23 `srt/entrypoints/openai/protocol.py:393` completions, `:961`
        chat). Never `return_meta_info`: streaming chat refuses it with HTTP 400
        (`serving_chat.py:1321-1325`, issue 37), and completions have no such field."""
        return {"return_spec_tokens_details": True}

    @classmethod
    def request_spec_stats(cls, chunk: Mapping[str, Any]) -> RequestSpecStats | None:
        return spec_stats_from_chunk(chunk)

    @classmethod
    async def detect(cls, session: aiohttp.ClientSession, root: str) -> Detected | None:
        """SGLang answers `/server_info` (older releases `/get_server_info`) with its resolved server args."""
        for path in ("/server_info", "/get_server_info"):
            info = await get_json(session, root + path)
            if isinstance(info, Mapping) and any(key in info for key in SERVER_INFO_KEYS):
                version = f"sglang {info.get('version', '(version unknown)')}"
                try:
                    capacity = capacity_from_server_info(info, SGLangSetting(name="running"))
                except EngineResponseError:
                    return Detected(None, f"unknown (sglang {path} without a capacity)", version)
                return Detected(capacity, capacity.source, version)
        return None


SERVER_INFO_KEYS = ("max_running_requests", "internal_states", "max_total_num_tokens", "speculative_algorithm")
"""Keys of SGLang's resolved server args: another engine's `/server_info` (newer trtllm-serve has one,
vLLM's in dev mode) holds none of them, so it is not taken for SGLang."""


def check_schedule_taken(info: Mapping[str, Any], setting: SGLangSetting) -> None:
    """A scheduled setting whose server resolved adaptive mode off is not measured: SGLang turns it off with a
    warning, not an error, under flags this adapter does not check (attention DP, multi-layer EAGLE, two-batch
    overlap, PD multiplexing: 0.5.23 `srt/speculative/adaptive_spec_params.py:56-100`,
    `srt/arg_groups/speculative_hook.py:1374-1389`), and then serves the static setting under the schedule's
    name. `/server_info` reports the resolved `speculative_adaptive`."""
    if setting.adaptive_config is not None and info.get("speculative_adaptive") is False:
        raise EngineResponseError(
            f"sglang /server_info: speculative_adaptive = false for settings[{setting.name}], which runs an adaptive "
            "config: SGLang turned the schedule off at start-up and serves the static setting (its log says why: "
            "'speculative_adaptive disabled: ...'); fix: remove the flag it names from extra_args (attention DP, "
            "multi-layer EAGLE, two-batch overlap and PD multiplexing disable it)"
        )


def capacity_from_server_info(info: Mapping[str, Any], setting: SGLangSetting) -> Capacity:
    """The resolved max running requests, labelled with SGLang's silent 48 reset when it happened."""
    states = info.get("internal_states")
    effective = None
    if isinstance(states, list) and states and isinstance(states[0], Mapping):
        value = states[0].get("effective_max_running_requests_per_dp")
        effective = value if isinstance(value, int) else None
    resolved = info.get("max_running_requests")
    mrr = effective if effective is not None else resolved
    if not isinstance(mrr, int) or mrr < 1:
        raise EngineResponseError(f"sglang /server_info: max_running_requests = {mrr!r}: expected a positive integer")
    source = "sglang /server_info " + (
        "internal_states[0].effective_max_running_requests_per_dp" if effective is not None else "max_running_requests"
    )
    if setting.speculative and setting.max_running_requests is None and resolved == SPEC_DEFAULT_CAP:
        source += (
            f"; WARNING: SGLang reset the unset --max-running-requests to {SPEC_DEFAULT_CAP} under speculation "
            "(set max_running_requests to choose the capacity)"
        )
    if isinstance(states, list) and states and isinstance(states[0], Mapping) and states[0].get("simulated") is True:
        source += "; the server's scheduler is the simulator (specfrontier.sim.sglang_frontend): a MODEL"
    tokens = info.get("max_total_num_tokens")
    return Capacity(mrr, source, tokens if isinstance(tokens, int) else None)


def _details(chunk: Mapping[str, Any]) -> Mapping[str, Any] | None:
    ext = chunk.get("sglext")
    if isinstance(ext, Mapping) and isinstance(ext.get("spec_tokens_details"), Mapping):
        details: Mapping[str, Any] = ext["spec_tokens_details"]
        return details
    choices = chunk.get("choices")
    if isinstance(choices, list):
        for choice in choices:
            meta = choice.get("meta_info") if isinstance(choice, Mapping) else None
            if isinstance(meta, Mapping):
                return meta
    meta = chunk.get("meta_info")
    return meta if isinstance(meta, Mapping) else None


def spec_stats_from_chunk(chunk: Mapping[str, Any]) -> RequestSpecStats | None:
    """Per-request counts from SGLang's meta_info / sglext.spec_tokens_details, if this chunk has them."""
    details = _details(chunk)
    if details is None:
        return None
    verify, correct, proposed = (
        details.get(k) for k in ("spec_verify_ct", "spec_num_correct_drafts", "spec_num_proposed_drafts")
    )
    if not isinstance(verify, int) or not isinstance(correct, int):
        return None
    drafted = proposed if isinstance(proposed, int) else 0
    return RequestSpecStats(draft_tokens=drafted, accepted_tokens=correct, verify_steps=verify)


# -- the schedule format: SGLang's adaptive speculative config ---------------------------------------
# A depth schedule as SGLang's adaptive speculative config (`--speculative-adaptive-config FILE`).
#
# Format (SGLang `python/sglang/srt/speculative/adaptive_spec_params.py` and `adaptive_step_router.py`,
# read at the source): a JSON object whose integer-string keys are batch sizes, each with a non-empty
# `candidate_steps` list of non-negative ints; a running batch is routed to the largest key not above
# it (the smallest key below that). Within a slot the EMA controller moves among its candidates by
# acceptance; one candidate per slot pins the depth chosen from the measurements. The union of the
# candidates sizes the buffers, and `--speculative-num-steps` must be one of them (checked at startup),
# so it is set to the deepest. Adaptive mode runs EAGLE/EAGLE3 with eagle_topk 1 only.

ADAPTIVE_ALGORITHMS = ("EAGLE", "EAGLE3")
ADAPTIVE_OFF_FLAGS = {
    "--enable-two-batch-overlap": "two-batch overlap",
    "--enable-pdmux": "PD multiplexing",
    "--enable-multi-layer-eagle": "multi-layer EAGLE",
}
"""Launch flags under which SGLang 0.5.23 turns adaptive mode off with a warning and runs the static setting
(`srt/speculative/adaptive_spec_params.py:85-99`, `srt/arg_groups/speculative_hook.py:1374-1389`); attention DP
does too, but follows from the parallel sizes, so it is caught after launch (`check_schedule_taken`)."""


def adaptive_off_flag(args: Sequence[str]) -> str | None:
    """The first of ADAPTIVE_OFF_FLAGS in `args` (either spelling, `--flag` or `--flag=value`), else None."""
    return next((name for arg in args if (name := arg.split("=", 1)[0]) in ADAPTIVE_OFF_FLAGS), None)


def sglang_adaptive_config(schedule: Any) -> dict[str, Any]:
    """`{"<batch size>": {"candidate_steps": [steps]}, ...}`, one pinned slot per schedule range."""
    algorithm = schedule.template.drafter or ""
    if algorithm not in ADAPTIVE_ALGORITHMS:
        raise ConfigError(
            f"setting {schedule.template.name!r}: algorithm = {algorithm!r}: SGLang's adaptive mode runs "
            f"{'/'.join(ADAPTIVE_ALGORITHMS)} only; fix: export --engine vllm, or schedule an EAGLE3 ladder"
        )
    if schedule.max_depth == 0:
        raise ConfigError(
            "schedule: no speculative setting beat the baseline at any measured level, so there is nothing to "
            "schedule; fix: run without speculation (see the static choices)"
        )
    return adaptive_config_json({e.batch_lo: [e.depth] for e in schedule.entries})


def adaptive_config_json(config: Mapping[int, Sequence[int]]) -> dict[str, Any]:
    """`{"<batch size>": {"candidate_steps": [steps]}, ...}`, sorted by batch size (SGLang's file format)."""
    return {str(lo): {"candidate_steps": sorted(set(config[lo]))} for lo in sorted(config)}


def _check_adaptive(setting: SGLangSetting, where: str) -> None:
    """SGLang's start-up checks of adaptive mode, before anything launches."""
    config = setting.adaptive_config or {}
    if setting.algorithm not in ADAPTIVE_ALGORITHMS:
        raise ValueError(
            f"{where}: adaptive_config with algorithm = {setting.algorithm!r}: SGLang's adaptive mode runs "
            f"{'/'.join(ADAPTIVE_ALGORITHMS)} only; fix: set algorithm to EAGLE3 (or EAGLE) or remove adaptive_config"
        )
    if (setting.eagle_topk or 1) != 1:  # SGLang would log a warning and silently run the static setting
        raise ValueError(
            f"{where}: adaptive_config needs eagle_topk = 1 (SGLang falls back to static speculation without an "
            "error otherwise); fix: set eagle_topk to 1"
        )
    flag = adaptive_off_flag(setting.extra_args)
    if flag is not None:
        raise ValueError(
            f"{where}: extra_args has {flag} with adaptive_config: SGLang turns adaptive mode off under "
            f"{ADAPTIVE_OFF_FLAGS[flag]} (a warning, then the static setting); fix: remove {flag} or adaptive_config"
        )
    if not config:
        raise ValueError(f"{where}: adaptive_config is empty; fix: list candidate steps per batch size: {{1: [3]}}")
    for lo, steps in config.items():
        if lo < 1 or not steps or any(d < 0 for d in steps):
            raise ValueError(
                f"{where}: adaptive_config[{lo}] = {steps}: keys are batch sizes >= 1, values non-empty lists of "
                "steps >= 0 (0: no drafting at those batch sizes); fix: e.g. {1: [4], 16: [2], 64: [0]}"
            )
    union = sorted({d for steps in config.values() for d in steps})
    if union[-1] == 0:
        raise ValueError(f"{where}: adaptive_config drafts at no batch size (every step is 0); fix: remove algorithm")
    if setting.num_steps not in union:
        raise ValueError(
            f"{where}: num_steps = {setting.num_steps} is not among the adaptive candidate steps {union} (SGLang "
            f"checks this at start-up); fix: set num_steps to {union[-1]}"
        )


SCHEDULE_SWAPPED_FLAGS = {
    "--speculative-algorithm": 1,
    "--speculative-num-steps": 1,
    "--speculative-eagle-topk": 1,
    "--speculative-num-draft-tokens": 1,
    "--speculative-adaptive": 0,
    "--speculative-adaptive-config": 1,
}
"""The flags a schedule's command sets itself (with how many values follow each): taken out of the measured
setting's command before the schedule's are appended (argparse would take the last, but one of each reads true)."""


def sglang_adaptive_command(
    schedule: Any,
    config_path: str,
    *,
    model: str = "<model-path>",
    draft_model: str | None = "<draft-model-path>",
    launch: Deployable | None = None,
) -> str:
    """The server in adaptive mode at the schedule's deepest step, reading `config_path`. From `launch`, the
    deployable command of the ladder's deepest setting measured on SGLang (its interpreter and launcher,
    model, draft, `--tp-size`, memory, capacity, extra arguments and environment: what the schedule's ranges
    were measured with), with the speculative flags swapped; without it, `python -m sglang.launch_server`
    with placeholders."""
    steps = schedule.max_depth
    t = schedule.template
    spec = ["--speculative-algorithm", t.drafter or ""]
    spec += ["--speculative-num-steps", str(steps), "--speculative-eagle-topk", "1"]
    spec += ["--speculative-num-draft-tokens", str(steps + 1)]
    spec += ["--speculative-adaptive", "--speculative-adaptive-config", config_path]
    if launch is not None:
        argv, _ = without_options(launch.argv, SCHEDULE_SWAPPED_FLAGS)
        return Deployable((*argv, *spec), launch.env).text()
    argv = ["python", "-m", "sglang.launch_server", "--model-path", model]
    if draft_model is not None:
        argv += ["--speculative-draft-model-path", draft_model]
    argv += spec
    if getattr(t, "max_running_requests", None) is not None:
        argv += ["--max-running-requests", str(t.max_running_requests)]
    return Deployable(tuple(argv)).text()


class SGLangAdaptiveSchedule(ScheduleFormat):
    """SGLang's `--speculative-adaptive-config` file and the `sglang.launch_server` that reads it."""

    engine: ClassVar[str] = "sglang"

    def config(self, schedule: Any, *, draft_model: str) -> dict[str, Any]:
        return sglang_adaptive_config(schedule)

    def command(self, schedule: Any, config: dict[str, Any], config_path: str, target: LaunchTarget) -> str:
        return sglang_adaptive_command(
            schedule, config_path, model=target.model, draft_model=target.draft_model, launch=target.launch
        )

    def static_command(self, setting: EngineSetting, target: LaunchTarget) -> str:
        """The setting's deployable command (a simulator run stores SGLang's equivalent)."""
        return target.launch.text() if target.launch is not None else "(not stored)"


register_schedule_format(SGLangAdaptiveSchedule())


SGLANG_NAMES = ParamNames(
    depth=("num_steps",),
    family=("algorithm",),
    topk=("eagle_topk",),
    verified=("num_draft_tokens",),
    draft_length=("num_draft_tokens",),
    depth_plus_one=("num_steps",),  # a topk-1 chain drafts num_steps and verifies num_steps + 1
)


def default_settings() -> tuple[SGLangSetting, ...]:
    """Without `settings`, an SGLang config measures the seed's ladder: no speculation, EAGLE3 steps 1-5."""
    steps = [SGLangSetting(name=f"steps{s}", algorithm="EAGLE3", num_steps=s, eagle_topk=1) for s in range(1, 6)]
    return (SGLangSetting(name="no-spec"), *steps)


register(
    EngineSpec(
        name="sglang",
        config=SGLangTuneConfig,
        setting=SGLangSetting,
        adapter=SGLangAdapter,
        default_settings=default_settings,
        # first: its `/server_info` keys are SGLang's own (`SERVER_INFO_KEYS`), so asking takes no other
        # server for it and changes nothing on the server; its parameter names merge first
        priority=10,
    ),
    SGLANG_NAMES,
)


__all__ = [
    "ADAPTIVE_ALGORITHMS",
    "SGLANG_NAMES",
    "SGLangAdapter",
    "SGLangAdaptiveSchedule",
    "SGLangEngine",
    "SGLangSetting",
    "SGLangTuneConfig",
    "SpecAlgorithm",
    "capacity_from_server_info",
    "check_schedule_taken",
    "setting_args",
    "sglang_adaptive_command",
    "sglang_adaptive_config",
    "spec_stats_from_chunk",
]
