"""Depth ladders: settings that differ only in how deep they speculate.

The search strategies move along one axis, the speculation depth, because that is the knob whose best
value moves with load (theory.md 0.6): deeper chains win for one user and lose at high concurrency.
Each engine's setting says which of its fields is the depth (`EngineSetting.depth_field`: SGLang's
`num_steps` of a chain, llama.cpp's `draft_n_max` or n-gram `ngram_size_m`), how deep a ladder may be
extended (`max_depth`) and how it is made at another depth (`with_depth`).

Settings of one engine family with everything else equal form one ladder. A ladder can be extended past
its deepest listed setting (`with_depth`), keeping every other parameter, so a strategy can try
"steps = 5" that the user did not list. Extensions go on with the ladder's last step (1, 2, 3 -> 4;
8, 16 -> 24).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from specfrontier.engines.base import EngineSetting


def depth_of(setting: EngineSetting) -> int | None:
    """The setting's speculation depth, or None when it is not on a ladder (baseline, tree, unsized type)."""
    return setting.depth


def family_key(setting: EngineSetting) -> str:
    """What a ladder's members share: the engine family and every parameter but the depth (and a chain's
    verified tokens, which follow it)."""
    return f"{setting.ladder_family}:{json.dumps(setting.ladder_parameters(), sort_keys=True)}"


def with_depth(template: EngineSetting, depth: int, name: str) -> EngineSetting:
    """`template` at another depth, validated like a listed setting (a chain's draft tokens follow)."""
    return template.with_depth(depth, name)


def _extension_name(template: EngineSetting, depth: int, taken: set[str]) -> str:
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
    members: dict[int, EngineSetting]
    max_depth: int
    taken: set[str] = field(default_factory=set)
    _extensions: dict[int, EngineSetting] = field(default_factory=dict)

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

    def setting_at(self, depth: int) -> EngineSetting:
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


def build_ladders(settings: Sequence[EngineSetting], max_depth: int | None = None) -> list[Ladder]:
    """Group the speculative settings that have a depth into ladders, in the order they are listed."""
    taken = {s.name for s in settings}
    ladders: dict[str, Ladder] = {}
    for s in settings:
        depth = depth_of(s)
        if depth is None:
            continue
        key = family_key(s)
        if key not in ladders:
            limit = max_depth if max_depth is not None else s.max_depth
            ladders[key] = Ladder(key, {}, limit, taken)
        ladder = ladders[key]
        ladder.members.setdefault(depth, s)
        ladder.max_depth = max(ladder.max_depth, depth)
    return list(ladders.values())


__all__ = ["Ladder", "build_ladders", "depth_of", "family_key", "with_depth"]
