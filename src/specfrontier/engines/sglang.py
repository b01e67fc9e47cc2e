"""SGLang adapter, for a real SGLang server and for the simulator's HTTP face (which speaks SGLang).

Facts it relies on (shared/reference/engines.md section 1, SGLang 0.5.23):
- settings are `--speculative-algorithm/-num-steps/-eagle-topk/-num-draft-tokens` and
  `--max-running-requests`; the arg parser allows unique prefixes, so spellings are probed from `--help`
  and only exact, present options are used;
- under speculation an unset `--max-running-requests` is silently reset to 48: the resolved value is
  read back from `/server_info` and the reset is reported in the capacity source;
- `/health_generate` is the readiness probe (uvicorn listens before warm-up ends);
- exact acceptance comes from per-request `meta_info` (`spec_num_correct_drafts`, `spec_verify_ct`):
  acceptance length = 1 + correct / verify steps. The server's `avg_spec_accept_length` is lifetime-
  cumulative and updated every 40 decode batches, so it is never used for a window.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Mapping
from typing import Any, ClassVar

import aiohttp

from specfrontier.config.sglang import SGLangEngine, SGLangSetting, SimEngine
from specfrontier.engines.base import Capacity, EngineAdapter
from specfrontier.errors import ConfigError, EngineResponseError
from specfrontier.records import RequestSpecStats, SpecCounters

SPEC_DEFAULT_CAP = 48
_FLAG = re.compile(r"(?<![\w-])(--[A-Za-z][\w-]*)")
REQUIRED_FLAGS = ("--host", "--port", "--max-running-requests")
SPEC_FLAGS = (
    "--speculative-algorithm",
    "--speculative-num-steps",
    "--speculative-eagle-topk",
    "--speculative-num-draft-tokens",
)


def setting_args(setting: SGLangSetting) -> list[str]:
    """SGLang flags of a setting, with the draft tokens as SGLang resolves them (steps + 1 for topk 1)."""
    argv: list[str] = []
    if setting.algorithm is not None:
        argv += ["--speculative-algorithm", setting.algorithm]
        if setting.num_steps is not None:
            argv += ["--speculative-num-steps", str(setting.num_steps)]
            argv += ["--speculative-eagle-topk", str(setting.eagle_topk or 1)]
            argv += ["--speculative-num-draft-tokens", str(setting.resolved_draft_tokens)]
    if setting.max_running_requests is not None:
        argv += ["--max-running-requests", str(setting.max_running_requests)]
    return argv


class SGLangAdapter(EngineAdapter[SGLangSetting]):
    """Launches `python -m sglang.launch_server` (or the simulator's face) per setting."""

    name: ClassVar[str] = "sglang"
    health_path: ClassVar[str] = "/health_generate"
    counters_source: ClassVar[str] = ""

    def __init__(self, engine: SGLangEngine | SimEngine, *, help_text: str | None = None) -> None:
        self.engine = engine
        self._help_text = help_text
        self._flags: frozenset[str] = frozenset(_FLAG.findall(help_text)) if help_text is not None else frozenset()

    def _launcher(self) -> list[str]:
        eng = self.engine
        if isinstance(eng, SimEngine):
            return [
                sys.executable, "-m", "specfrontier.sim.serve", "--profile", eng.profile,
                "--time-scale", str(eng.time_scale), "--seed", str(eng.seed), "--workload", eng.workload_class,
                "--model-path", f"sim:{eng.profile}",
            ]  # fmt: skip
        python = str(eng.python) if eng.python is not None else sys.executable
        argv = [python, "-m", "sglang.launch_server", "--model-path", eng.model_path, "--tp-size", str(eng.tp_size)]
        if eng.draft_model_path is not None:
            argv += ["--speculative-draft-model-path", eng.draft_model_path]
        if eng.mem_fraction_static is not None:
            argv += ["--mem-fraction-static", str(eng.mem_fraction_static)]
        return argv

    @property
    def startup_timeout_s(self) -> float:
        return self.engine.startup_timeout_s

    @property
    def simulated(self) -> bool:
        return isinstance(self.engine, SimEngine)

    @property
    def time_scale(self) -> float:
        return self.engine.time_scale if isinstance(self.engine, SimEngine) else 1.0

    def prepare(self, settings: tuple[SGLangSetting, ...]) -> None:
        if self._help_text is None:
            argv = [*self._launcher()[:3], "--help"]
            try:
                done = subprocess.run(argv, capture_output=True, timeout=120, check=False, stdin=subprocess.DEVNULL)
            except (OSError, subprocess.TimeoutExpired) as exc:
                raise ConfigError(
                    f"engine: `{' '.join(argv)}` failed ({exc}); fix: install sglang or set engine.python"
                ) from exc
            self._help_text = (done.stdout + done.stderr).decode("utf-8", errors="replace")
            self._flags = frozenset(_FLAG.findall(self._help_text))
        missing = [f for f in REQUIRED_FLAGS if f not in self._flags]
        if any(s.speculative for s in settings):
            missing += [f for f in SPEC_FLAGS if f not in self._flags]
        if missing:
            raise ConfigError(
                f"engine: the server's --help has no {', '.join(missing)}; fix: install a SGLang that has them "
                "(0.5.x) or point engine.python at its environment"
            )

    def command(self, setting: SGLangSetting, *, port: int, max_concurrency: int) -> list[str]:
        """The capacity is the setting's own `max_running_requests`, never raised behind the user's back:
        the resolved value (SGLang may reset it) is read back after launch."""
        argv = [*self._launcher(), "--host", "127.0.0.1", "--port", str(port), *setting_args(setting)]
        extra = () if isinstance(self.engine, SimEngine) else self.engine.extra_args
        return argv + list(extra) + list(setting.extra_args)

    def version(self) -> str:
        if isinstance(self.engine, SimEngine):
            return f"simulator HTTP face (SGLang interface), profile {self.engine.profile}"
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
        return capacity_from_server_info(info, setting)

    async def spec_counters(self, session: aiohttp.ClientSession, base_url: str) -> SpecCounters | None:
        """None: SGLang has no exact window counters; the sweep sums per-request meta_info instead."""
        return None

    def request_extras(self) -> dict[str, Any]:
        """Ask for per-request speculative stats on both endpoints (chat: meta_info; completions: sglext)."""
        return {"return_meta_info": True, "return_spec_tokens_details": True}

    def request_spec_stats(self, chunk: Mapping[str, Any]) -> RequestSpecStats | None:
        return spec_stats_from_chunk(chunk)


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


__all__ = ["SGLangAdapter", "capacity_from_server_info", "setting_args", "spec_stats_from_chunk"]
