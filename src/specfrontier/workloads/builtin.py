"""Prompt sets: the built-in mixes shipped with the package, and user JSONL files.

The built-in `cpu-mix` is small on purpose (it must run in minutes on 2 CPU cores) and mixes
copy-heavy code edits, where n-gram speculation finds its drafts in the prompt, with open chat,
where it mostly does not. The prompts were written for this project.

JSONL format, one object per line: `{"id": str, "category": str, "messages": [{"role", "content"}]}`
for chat, or `{"id": str, "category": str, "prompt": str}` for raw completions.
"""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path
from typing import Any

from specfrontier.errors import ConfigError
from specfrontier.records import MAX_PROMPTS, Prompt
from specfrontier.textfiles import MAX_DATA_BYTES, load_json, read_text_utf8

BUILTIN_MIXES = ("cpu-mix",)

SAMPLE = 1000
"""The sample size the fixes suggest."""


def _prompt_from_json(obj: Any, *, where: str, max_tokens: int, api: str | None) -> Prompt:
    if not isinstance(obj, dict):
        raise ConfigError(f"{where}: expected a JSON object; fix: write one prompt object per line")
    pid = obj.get("id")
    if not isinstance(pid, str) or not pid:
        raise ConfigError(f'{where}: id = {pid!r}: missing or not a string; fix: give every prompt an "id"')
    category = str(obj.get("category", "uncategorised"))
    messages = obj.get("messages")
    text = obj.get("prompt")
    if messages is not None:
        if not isinstance(messages, list) or not all(
            isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)
            for m in messages
        ):
            raise ConfigError(
                f'{where}: messages: expected a list of {{"role", "content"}} strings; fix: correct the prompt'
            )
        pairs = tuple((m["role"], m["content"]) for m in messages)
        if api == "completion":
            return Prompt(pid, category, "completion", max_tokens, text="\n".join(c for _, c in pairs))
        return Prompt(pid, category, "chat", max_tokens, messages=pairs)
    if isinstance(text, str):
        if api == "chat":
            return Prompt(pid, category, "chat", max_tokens, messages=(("user", text),))
        return Prompt(pid, category, "completion", max_tokens, text=text)
    raise ConfigError(f'{where}: neither "messages" nor "prompt" is given; fix: add one of them')


def parse_prompts(
    lines: list[str], *, source: str, max_tokens: int, api: str | None = None, where: str = "workload.prompts"
) -> list[Prompt]:
    """Prompts from JSONL lines; blank lines are skipped; errors name the line (`where`: the option or
    config field that named `source`)."""
    prompts: list[Prompt] = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        at = f"{source}:{number}"
        try:
            obj = load_json(line)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{at}: not valid JSON ({exc.msg}); fix: one JSON object per line") from exc
        prompts.append(_prompt_from_json(obj, where=at, max_tokens=max_tokens, api=api))
    if not prompts:
        raise ConfigError(f"{where} = {source!r}: no prompts; fix: add at least one JSON line")
    return prompts


def check_pass(count: int, *, where: str, source: str, fix: str) -> None:
    """Refuse a pass of more than MAX_PROMPTS prompts (`fix`: how this caller's user draws a sample)."""
    if count > MAX_PROMPTS:
        raise ConfigError(
            f"{where} = {source!r}: {count} prompts, more than the {MAX_PROMPTS} one pass may hold (every cell sends "
            f"whole passes: at least {count} requests per cell); fix: {fix}"
        )


def sample_fix(source: str, where: str | None = None) -> str:
    """How to use a sample of a big prompts file: a file of its own, or (for a config's field `where`,
    not an option) a seeded draw of `workloads:`, which reads the file whole but sends only the draw."""
    keep = f"keep a sample (e.g. `shuf -n {SAMPLE} {source} > sample.jsonl`)"
    if where is None or where.startswith("--"):
        return keep
    return f"{keep}, or draw a seeded one with workloads: [{{source: {source}, prompts: {SAMPLE}}}]"


def load_prompts(
    spec: str,
    *,
    max_tokens: int,
    api: str | None = None,
    where: str = "workload.prompts",
    whole_pass: bool = True,
) -> list[Prompt]:
    """`builtin:<name>` or a JSONL path -> prompts, each capped at `max_tokens` output tokens; errors
    name `where` (the config field or option that gave `spec`: `workload.prompts`, `--prompts`, ...).

    `whole_pass`: the prompts are one pass as they are, so more than MAX_PROMPTS is refused; a caller that
    draws a sample from them first (`workloads[].prompts`) checks what it draws instead. A file is read up
    to MAX_DATA_BYTES."""
    if spec.startswith("builtin:"):
        name = spec.removeprefix("builtin:")
        if name not in BUILTIN_MIXES:
            raise ConfigError(
                f"{where} = {spec!r}: unknown built-in mix; fix: use one of "
                + ", ".join(f"builtin:{m}" for m in BUILTIN_MIXES)
            )
        text = resources.files("specfrontier.workloads").joinpath(f"data/{name}.jsonl").read_text("utf-8")
        return parse_prompts(text.splitlines(), source=spec, max_tokens=max_tokens, api=api, where=where)
    text = read_text_utf8(
        Path(spec),
        where,
        fix="give an existing JSONL file or builtin:cpu-mix",
        max_bytes=MAX_DATA_BYTES,
        too_big_fix=sample_fix(spec),
    )
    prompts = parse_prompts(text.splitlines(), source=spec, max_tokens=max_tokens, api=api, where=where)
    if whole_pass:
        check_pass(len(prompts), where=where, source=spec, fix=sample_fix(spec, where))
    return prompts


__all__ = ["BUILTIN_MIXES", "MAX_PROMPTS", "check_pass", "load_prompts", "parse_prompts", "sample_fix"]
