"""The workload catalog behind `specfrontier workloads`: every source, where it comes from, its license,
whether it is installed, how many prompts it has and how long they are.

Lengths are of the text a request sends in the source's natural mode (HumanEval: the raw code prefix;
others: the chat messages' content, without the template), estimated as characters / 4.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version

from specfrontier.config.workloads import SYNTHETIC
from specfrontier.errors import ConfigError
from specfrontier.workloads.builtin import BUILTIN_MIXES, load_prompts
from specfrontier.workloads.resolve import DEFAULT_SYNTHETIC_INPUT_TOKENS, DEFAULT_SYNTHETIC_PROMPTS
from specfrontier.workloads.sources import PACKAGE_SOURCES, SourcePrompt
from specfrontier.workloads.synthetic import estimate_tokens, synthetic_prompts


@dataclass(frozen=True, slots=True)
class CatalogEntry:
    name: str
    category: str
    natural_mode: str
    package: str | None
    """Pinned `name==version` of the registry package, None when built in."""
    installed_version: str | None
    license: str
    upstream: str
    description: str
    prompts: int | None
    """None when the package is missing."""
    tokens_min: int | None = None
    tokens_p50: int | None = None
    tokens_p90: int | None = None
    tokens_max: int | None = None
    error: str | None = None


def _lengths(prompts: list[SourcePrompt], completion: bool) -> list[int]:
    return sorted(
        estimate_tokens(len(p.completion_text) if completion and p.completion_text else p.chars) for p in prompts
    )


def _entry(base: dict[str, object], prompts: list[SourcePrompt], completion: bool) -> CatalogEntry:
    t = _lengths(prompts, completion)

    def q(f: float) -> int:
        return t[min(len(t) - 1, int(f * len(t)))]

    return CatalogEntry(
        **base,  # type: ignore[arg-type]
        prompts=len(prompts),
        tokens_min=t[0],
        tokens_p50=q(0.5),
        tokens_p90=q(0.9),
        tokens_max=t[-1],
    )


def catalog() -> list[CatalogEntry]:
    """Every workload source with its facts; a missing package is listed (with the fix), not raised."""
    out = []
    for s in PACKAGE_SOURCES.values():
        try:
            installed: str | None = version(s.distribution)
        except PackageNotFoundError:
            installed = None
        base: dict[str, object] = {
            "name": s.name,
            "category": s.category,
            "natural_mode": s.natural_mode,
            "package": s.pip_spec,
            "installed_version": installed,
            "license": s.license,
            "upstream": s.upstream,
            "description": s.description,
        }
        try:
            out.append(_entry(base, s.load(where="source"), s.natural_mode == "completion"))
        except ConfigError as exc:
            out.append(CatalogEntry(**base, prompts=None, error=str(exc)))  # type: ignore[arg-type]
    synthetic = synthetic_prompts(DEFAULT_SYNTHETIC_PROMPTS, DEFAULT_SYNTHETIC_INPUT_TOKENS, seed=0)
    out.append(
        _entry(
            {
                "name": SYNTHETIC,
                "category": "synthetic",
                "natural_mode": "completion",
                "package": None,
                "installed_version": None,
                "license": "-",
                "upstream": "generated (seeded pseudo-text)",
                "description": "the seed's best case: fixed input/output lengths, temperature 0, ignore_eos "
                f"(defaults: {DEFAULT_SYNTHETIC_PROMPTS} prompts of {DEFAULT_SYNTHETIC_INPUT_TOKENS} tokens)",
            },
            synthetic,
            True,
        )
    )
    for mix in BUILTIN_MIXES:
        prompts = load_prompts(f"builtin:{mix}", max_tokens=1)
        as_source = [SourcePrompt(p.prompt_id, p.category, p.messages or (("user", p.text),)) for p in prompts]
        out.append(
            _entry(
                {
                    "name": f"builtin:{mix}",
                    "category": "mix",
                    "natural_mode": "chat",
                    "package": None,
                    "installed_version": None,
                    "license": "Apache-2.0",
                    "upstream": "written for specfrontier",
                    "description": "copy-heavy code edits and open chat, small enough for 2 CPU cores",
                },
                as_source,
                False,
            )
        )
    return out


__all__ = ["CatalogEntry", "catalog"]
