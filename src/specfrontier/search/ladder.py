"""Depth ladders: settings that differ only in how deep they speculate.

The search strategies move along one axis, the speculation depth, because that is the knob whose best
value moves with load (theory.md 0.6): deeper chains win for one user and lose at high concurrency.
The depth of a setting is

- SGLang / simulator: `num_steps` of a chain (`eagle_topk` 1; a tree is not on a ladder),
- llama.cpp: `draft_n_max` of a draft model, `ngram_size_m` of the sized n-gram types.

Settings with everything else equal form one ladder. A ladder can be extended past its deepest listed
setting (`with_depth`), keeping every other parameter, so a strategy can try "steps = 5" that the user
did not list. Extensions go on with the ladder's last step (1, 2, 3 -> 4; 8, 16 -> 24).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from specfrontier.config import LlamaCppSetting, SettingLike, SGLangSetting

DEFAULT_MAX_DEPTH = {"sglang": 8, "llamacpp": 32}
"""Deepest depth an extension may reach unless `search.max_depth` says otherwise (or a listed setting is deeper)."""


def _depth_field(setting: SettingLike) -> str | None:
    if isinstance(setting, SGLangSetting):
        chain = setting.algorithm is not None and setting.num_steps is not None and (setting.eagle_topk or 1) == 1
        return "num_steps" if chain else None
    if isinstance(setting, LlamaCppSetting):
        if setting.spec_type == "draft-simple" and setting.draft_n_max is not None:
            return "draft_n_max"
        if setting.spec_type in ("ngram-simple", "ngram-map-k", "ngram-map-k4v") and setting.ngram_size_m is not None:
            return "ngram_size_m"
    return None


def depth_of(setting: SettingLike) -> int | None:
    """The setting's speculation depth, or None when it is not on a ladder (baseline, tree, unsized type)."""
    name = _depth_field(setting)
    value = getattr(setting, name) if name else None
    return int(value) if value is not None else None


def engine_family(setting: SettingLike) -> str:
    return "llamacpp" if isinstance(setting, LlamaCppSetting) else "sglang"


def family_key(setting: SettingLike) -> str:
    params: dict[str, Any] = dict(setting.parameters())
    params.pop(_depth_field(setting) or "", None)
    params.pop("num_draft_tokens", None)  # a chain's draft tokens follow its steps
    return f"{engine_family(setting)}:{json.dumps(params, sort_keys=True)}"


def with_depth(template: SettingLike, depth: int, name: str) -> SettingLike:
    """`template` at another depth, validated like a listed setting (a chain's draft tokens follow)."""
    field_name = _depth_field(template)
    if field_name is None:
        raise ValueError(f"setting {template.name!r} is not on a depth ladder")
    data = template.model_dump() if hasattr(template, "model_dump") else {}
    data.update({"name": name, field_name: depth})
    if isinstance(template, SGLangSetting):
        if template.num_draft_tokens is not None:
            data["num_draft_tokens"] = depth + 1
        return SGLangSetting.model_validate(data)
    return LlamaCppSetting.model_validate(data)


def _extension_name(template: SettingLike, depth: int, taken: set[str]) -> str:
    match = re.fullmatch(r"(.*?)(\d+)", template.name)
    base = f"{match.group(1)}{depth}" if match else f"{template.name}-d{depth}"
    name, n = base, 2
    while name in taken:
        name, n = f"{base}-{n}", n + 1
    return name


@dataclass(slots=True)
class Ladder:
    """One family of settings by depth; `members` are the listed ones, extensions are made on demand."""

    key: str
    members: dict[int, SettingLike]
    max_depth: int
    taken: set[str] = field(default_factory=set)
    _extensions: dict[int, SettingLike] = field(default_factory=dict)

    @property
    def listed_depths(self) -> list[int]:
        return sorted(self.members)

    def depths(self) -> Iterator[int]:
        """Listed depths ascending, then extensions by the last step, up to `max_depth`."""
        listed = self.listed_depths
        yield from listed
        step = listed[-1] - listed[-2] if len(listed) > 1 else 1
        depth = listed[-1] + max(step, 1)
        while depth <= self.max_depth:
            yield depth
            depth += max(step, 1)

    def setting_at(self, depth: int) -> SettingLike:
        if depth in self.members:
            return self.members[depth]
        if depth not in self._extensions:
            template = self.members[self.listed_depths[-1]]
            name = _extension_name(template, depth, self.taken)
            self.taken.add(name)
            self._extensions[depth] = with_depth(template, depth, name)
        return self._extensions[depth]

    def neighbours(self, depth: int) -> list[int]:
        """The ladder depths just below and above `depth` (within the ladder's range)."""
        all_depths = list(self.depths())
        i = all_depths.index(depth)
        return [all_depths[j] for j in (i - 1, i + 1) if 0 <= j < len(all_depths)]


def build_ladders(settings: Sequence[SettingLike], max_depth: int | None = None) -> list[Ladder]:
    """Group the speculative settings that have a depth into ladders, in the order they are listed."""
    taken = {s.name for s in settings}
    ladders: dict[str, Ladder] = {}
    for s in settings:
        depth = depth_of(s)
        if depth is None:
            continue
        key = family_key(s)
        if key not in ladders:
            limit = max_depth if max_depth is not None else DEFAULT_MAX_DEPTH[engine_family(s)]
            ladders[key] = Ladder(key, {}, limit, taken)
        ladder = ladders[key]
        ladder.members.setdefault(depth, s)
        ladder.max_depth = max(ladder.max_depth, depth)
    return list(ladders.values())


__all__ = ["DEFAULT_MAX_DEPTH", "Ladder", "build_ladders", "depth_of", "engine_family", "family_key", "with_depth"]
