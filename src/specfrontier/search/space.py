"""The space a search explores: the dimensions along which the settings of a config vary.

A dimension is a field of the engine's setting whose value differs between the speculative settings
the config lists (SGLang's `num_steps`, `eagle_topk`, `num_draft_tokens`; vLLM's `method` and
`num_speculative_tokens`; ...). It is read from the settings themselves, never from a list of engine
field names, so a config that varies any other knob gets that knob searched too. A numeric field is
ordered (a move steps to the next value up or down; an unset value sorts first); any other field is a
category (a drafter method: a move goes to each other value). Fields whose values are not plain
scalars (an adaptive schedule, extra arguments) are not dimensions.

Guided search builds its design from these dimensions (every dimension's ends and its second value,
every category) and moves along each of them (`steps_along`); the planner reports which values of each
dimension were explored (`coverage`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from specfrontier.engines.base import EngineSetting

Scalar = str | int | float | bool | None


def _scalar(value: object) -> bool:
    return value is None or isinstance(value, str | int | float | bool)


def _numeric(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


@dataclass(frozen=True, slots=True)
class Dimension:
    """One field that varies across the settings, with its values (ordered: ascending, unset first)."""

    field: str
    values: tuple[Scalar, ...]
    ordered: bool

    def rank(self, value: Scalar) -> int:
        return self.values.index(value)

    def position(self, setting: EngineSetting) -> float:
        """Where `setting` lies along this dimension, 0..1 (ordered), for distances between settings."""
        value = value_of(setting, self.field)
        if value not in self.values or len(self.values) < 2:
            return 0.0
        return self.rank(value) / (len(self.values) - 1)

    def label(self, values: Iterable[Scalar]) -> str:
        """`values` in this dimension's order, e.g. `1,2,6`; unset shown as `unset`."""
        chosen = set(values)
        return ",".join("unset" if v is None else str(v) for v in self.values if v in chosen)

    def cover_targets(self) -> tuple[Scalar, ...]:
        """The values a design must hold: every category; an ordered dimension's lowest, second and
        highest value (a chain, a narrow and a wide tree when the dimension is the branching)."""
        if not self.ordered:
            return self.values
        return tuple(dict.fromkeys((self.values[0], self.values[min(1, len(self.values) - 1)], self.values[-1])))


def value_of(setting: EngineSetting, field: str) -> Scalar:
    value = getattr(setting, field, None)
    return value if _scalar(value) else None


def dimensions(settings: Sequence[EngineSetting]) -> list[Dimension]:
    """The fields of the speculative settings whose values differ, in the setting's field order."""
    spec = [s for s in settings if s.speculative]
    fields: dict[str, None] = {}
    for s in spec:
        fields.update(dict.fromkeys(f for f in type(s).model_fields if f != "name"))
    out = []
    for name in fields:
        raw = [getattr(s, name, None) for s in spec]
        if not all(_scalar(v) for v in raw):
            continue
        values: list[Scalar] = list(dict.fromkeys(raw))
        if len(values) < 2:
            continue
        ordered = all(v is None or _numeric(v) for v in values)
        if ordered:
            values.sort(key=lambda v: (v is not None, v if _numeric(v) else 0))
        out.append(Dimension(name, tuple(values), ordered))
    return out


def distance(a: EngineSetting, b: EngineSetting, dims: Sequence[Dimension], skip: str | None = None) -> float:
    """How far apart two settings lie over the dimensions (each ordered one scaled to 0..1, a category
    0 or 1), leaving out the dimension `skip` (the one a move steps along)."""
    total = 0.0
    for d in dims:
        if d.field == skip:
            continue
        if d.ordered:
            total += abs(d.position(a) - d.position(b))
        else:
            total += 0.0 if value_of(a, d.field) == value_of(b, d.field) else 1.0
    return total


def steps_along(
    current: EngineSetting,
    dim: Dimension,
    candidates: Sequence[EngineSetting],
    dims: Sequence[Dimension],
    score: Callable[[EngineSetting], float | None] | None = None,
) -> list[EngineSetting]:
    """The settings one move from `current` along `dim`: for an ordered dimension the nearest value
    below and above that some speculative candidate has, for a category each other value. At each value
    the candidate nearest `current` in the other dimensions (the first listed on a tie) and, with
    `score` (the model's prediction), also the best-scored one there: from a chain, one step up in
    branching is then both the tree nearest the chain and the tree of that branching the model rates
    best, whose draft-token budget may lie far from the chain's."""
    here = value_of(current, dim.field)
    spec = [c for c in candidates if c.speculative and c.name != current.name]
    by_value: dict[Scalar, list[EngineSetting]] = {}
    for c in spec:
        if value_of(c, dim.field) in dim.values:
            by_value.setdefault(value_of(c, dim.field), []).append(c)
    if dim.ordered and here in dim.values:
        r = dim.rank(here)
        below = [v for v in dim.values[:r] if v in by_value][-1:]
        above = [v for v in dim.values[r + 1 :] if v in by_value][:1]
        targets = [*below, *above]
    else:
        targets = [v for v in dim.values if v != here and v in by_value]
    out: dict[str, EngineSetting] = {}
    for v in targets:
        near = min(by_value[v], key=lambda c: distance(current, c, dims, skip=dim.field))
        out.setdefault(near.name, near)
        scored = [(p, c) for c in by_value[v] if score is not None and (p := score(c)) is not None]
        if scored:
            top = max(scored, key=lambda item: item[0])[1]
            out.setdefault(top.name, top)
    return list(out.values())


def cover_design(settings: Sequence[EngineSetting], dims: Sequence[Dimension]) -> list[EngineSetting]:
    """A small design that holds every dimension's `cover_targets`: greedily the setting holding the most
    values not held yet; on a tie the one farthest from those chosen (spread over the space), then the
    first listed. On SGLang's steps x topk x draft tokens: a shallow chain, the deepest widest tree and a
    narrow tree; on vLLM's methods x K: one setting per method, K's ends among them."""
    spec = [s for s in settings if s.speculative]
    wanted = {(d.field, v) for d in dims for v in d.cover_targets()}

    def held(s: EngineSetting) -> set[tuple[str, Scalar]]:
        return {(d.field, value_of(s, d.field)) for d in dims} & wanted

    chosen: list[EngineSetting] = []
    while wanted and spec:
        best = max(
            spec,
            key=lambda s: (
                len(held(s)),
                min((distance(s, c, dims) for c in chosen), default=0.0),
                -spec.index(s),
            ),
        )
        if not held(best):
            break
        chosen.append(best)
        wanted -= held(best)
        spec.remove(best)
    if not chosen and spec:
        chosen.append(spec[0])  # no dimension varies: one speculative setting stands for them all
    return chosen


def coverage(dims: Sequence[Dimension], measured: Sequence[EngineSetting]) -> list[tuple[Dimension, list[Scalar]]]:
    """Per dimension, the values the measured speculative settings hold."""
    spec = [s for s in measured if s.speculative]
    return [(d, [v for v in d.values if any(value_of(s, d.field) == v for s in spec)]) for d in dims]


def describe_coverage(dims: Sequence[Dimension], measured: Sequence[EngineSetting]) -> str:
    """One line: per dimension the values explored of those listed, e.g. `eagle_topk 1,2,8 of 1,2,4,8`."""
    if not dims:
        return "no dimension varies (one speculative shape listed)"
    parts = []
    for d, seen in coverage(dims, measured):
        parts.append(f"{d.field} {d.label(seen) or 'none'} of {d.label(d.values)}")
    return "; ".join(parts)


def unexplored(dims: Sequence[Dimension], measured: Sequence[EngineSetting]) -> list[tuple[Dimension, list[Scalar]]]:
    """The dimensions not explored yet, each with the values that would explore it: an ordered one with
    fewer than two measured values (nothing says which way it goes), any value not measured; a category
    (a drafter method), each value never measured (nothing measured of it can predict it)."""
    out = []
    for d, seen in coverage(dims, measured):
        missing = [v for v in d.values if v not in seen]
        if missing and (not d.ordered or len(seen) < 2):
            out.append((d, missing))
    return out


__all__ = [
    "Dimension",
    "Scalar",
    "cover_design",
    "coverage",
    "describe_coverage",
    "dimensions",
    "distance",
    "steps_along",
    "unexplored",
    "value_of",
]
