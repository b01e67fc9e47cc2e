"""Depth ladders: settings that differ only in how deep they speculate.

Depth is the knob whose best value moves most with load (theory.md 0.6): deeper drafts win for one user
and lose at high concurrency. Each engine's setting says which of its fields is a chain's depth
(`EngineSetting.depth_field`: SGLang's `num_steps` of a chain; llama.cpp's per spec type, `draft_n_max` of
a draft model, `ngram_size_m` of a sized n-gram type, `ngram_mod_n_max` of ngram-mod, none for ngram-cache,
whose 8 tokens no option changes), how deep a ladder may be extended (`max_depth`) and how it is made at
another depth (`with_depth`). A tree (SGLang `eagle_topk` > 1) has no chain depth, but its depth field is
the engine's depth parameter (`ParamNames.depth`, the registry's vocabulary): trees with the same
branching and draft-token budget form a ladder of their own, so adaptive search extends depth within each
(topk, draft tokens) family; `depth_of` stays the chain depth (schedules run chains only).

That fallback walks a field only because the setting sets it, so it rests on each engine refusing a depth
parameter its drafter does not read: llama.cpp refuses `draft_n_max` on an n-gram type (which drafts its
own length), so an n-gram setting is never deepened through a flag the server ignores, and one without its
own length field set (or ngram-cache) is on no ladder.

Settings of one engine family with everything else equal form one ladder. A ladder can be extended past
its deepest listed setting (`with_depth`), keeping every other parameter, so a strategy can try
"steps = 5" that the user did not list. Extensions go on with the ladder's last step (1, 2, 3 -> 4;
8, 16 -> 24). Which ladders grow is the config's `search.extend_depth`: chains by default, trees only when
asked (`all`), none with `none`; a ladder that may not grow has its deepest listed depth as its maximum.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from pydantic import ValidationError

from specfrontier.config.search import ExtendDepth
from specfrontier.engines.base import EngineSetting
from specfrontier.engines.registry import vocabulary


def depth_of(setting: EngineSetting) -> int | None:
    """The setting's chain depth, or None when it is not on a chain ladder (baseline, tree, unsized type)."""
    return setting.depth


def ladder_field(setting: EngineSetting) -> str | None:
    """The field a search ladder of this setting walks: the chain depth, else (a tree) the engine's
    depth parameter when the setting sets it (which its engine allows only where the drafter reads it);
    None for a baseline, a schedule or a type whose draft length is not set (llama.cpp ngram-cache)."""
    if setting.depth_field is not None:
        return setting.depth_field
    if not setting.speculative or setting.scheduled:
        return None
    names = vocabulary().depth
    return next((f for f in type(setting).model_fields if f in names and isinstance(getattr(setting, f), int)), None)


def ladder_depth(setting: EngineSetting) -> int | None:
    """The depth along the setting's search ladder (`ladder_field`), None when it is on none."""
    name = ladder_field(setting)
    value = getattr(setting, name) if name else None
    return value if isinstance(value, int) else None


def ladder_key(setting: EngineSetting) -> str:
    """What a search ladder's members share: `family_key` for a chain; for a tree every parameter but the
    depth (its branching and draft-token budget included)."""
    if setting.depth_field is not None:
        return family_key(setting)
    params = setting.parameters()
    params.pop(ladder_field(setting) or "", None)
    return f"{setting.ladder_family}:tree:{json.dumps(params, sort_keys=True)}"


def family_key(setting: EngineSetting) -> str:
    """What a ladder's members share: the engine family and every parameter but the depth (and a chain's
    verified tokens, which follow it)."""
    return f"{setting.ladder_family}:{json.dumps(setting.ladder_parameters(), sort_keys=True)}"


def with_depth(template: EngineSetting, depth: int, name: str) -> EngineSetting:
    """`template` at another depth, validated like a listed setting (a chain's draft tokens follow)."""
    return template.with_depth(depth, name)


def _at_ladder_depth(template: EngineSetting, depth: int, name: str) -> EngineSetting | None:
    """`template` at another depth of its search ladder; None when the engine refuses that setting."""
    if template.depth_field is not None:
        return with_depth(template, depth, name)
    data = template.model_dump()
    data.update({"name": name, ladder_field(template) or "": depth})
    try:
        return template.model_validate(data)
    except ValidationError:
        return None


def _extension_name(template: EngineSetting, depth: int, taken: set[str]) -> str:
    """`steps3` -> `steps4` when the name ends in the template's depth; else `<name>-d<depth>` (a tree
    `s3k4d8` at depth 4 is `s3k4d8-d4`, never `s3k4d4`, which reads as another draft budget)."""
    match = re.fullmatch(r"(.*?)(\d+)", template.name)
    ends_in_depth = match is not None and int(match.group(2)) == ladder_depth(template)
    base = f"{match.group(1)}{depth}" if match and ends_in_depth else f"{template.name}-d{depth}"
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
        """Listed depths ascending, then extensions by the last step, up to `max_depth` (and up to the
        first the engine would refuse)."""
        listed = self.listed_depths
        yield from listed
        step = listed[-1] - listed[-2] if len(listed) > 1 else 1
        depth = listed[-1] + max(step, 1)
        while depth <= self.max_depth and self._extend(depth) is not None:
            yield depth
            depth += max(step, 1)

    def _extend(self, depth: int) -> EngineSetting | None:
        if depth not in self._extensions:
            template = self.members[self.listed_depths[-1]]
            name = _extension_name(template, depth, self.taken)
            made = _at_ladder_depth(template, depth, name)
            if made is None:
                return None
            self.taken.add(name)
            self._extensions[depth] = made
        return self._extensions[depth]

    def setting_at(self, depth: int) -> EngineSetting:
        if depth in self.members:
            return self.members[depth]
        made = self._extend(depth)
        if made is None:
            raise ValueError(f"ladder {self.key}: depth {depth} is a setting the engine refuses")
        return made

    def neighbours(self, depth: int) -> list[int]:
        """The ladder depths just below and above `depth` (within the ladder's range)."""
        all_depths = list(self.depths())
        i = all_depths.index(depth)
        return [all_depths[j] for j in (i - 1, i + 1) if 0 <= j < len(all_depths)]


def build_ladders(
    settings: Sequence[EngineSetting], max_depth: int | None = None, extend: ExtendDepth = "chains"
) -> list[Ladder]:
    """Group the speculative settings that have a depth into ladders (chains, and trees per branching and
    draft-token budget), in the order they are listed. `extend` says which ladders may grow past their deepest
    listed depth (`search.extend_depth`): the others stay inside what the config lists."""
    taken = {s.name for s in settings}
    ladders: dict[str, Ladder] = {}
    for s in settings:
        depth = ladder_depth(s)
        if depth is None:
            continue
        key = ladder_key(s)
        if key not in ladders:
            chain = s.depth_field is not None
            grows = extend == "all" or (extend == "chains" and chain)
            limit = (max_depth if max_depth is not None else s.max_depth) if grows else depth
            ladders[key] = Ladder(key, {}, limit, taken)
        ladder = ladders[key]
        ladder.members.setdefault(depth, s)
        ladder.max_depth = max(ladder.max_depth, depth)
    return list(ladders.values())


__all__ = [
    "Ladder",
    "build_ladders",
    "depth_of",
    "family_key",
    "ladder_depth",
    "ladder_field",
    "ladder_key",
    "with_depth",
]
