"""A config's `space:`: the settings to compare declared as lists per knob, the way SGLang's
`bench_speculative.py` sweeps them, expanded here into named settings plus a baseline.

    space: {algorithm: EAGLE3, num_steps: [1, 2, 3], eagle_topk: [1, 4], num_draft_tokens: [4, 16]}

Every combination of the lists is one candidate setting, validated by the engine's own setting class,
so the engine's rules decide, not this module (it names no engine):

- a combination the engine refuses is pruned, and the prunes are summarised once per rule broken
  (`SettingRefused.rule`), e.g. `pruned 37 of 144 combinations: ...`, never an error;
- combinations the engine runs identically collapse into one setting: the setting class rewrites each
  one as the engine would run it (`EngineSetting.space_point`, e.g. SGLang's topk-1 chain verifies
  num_steps + 1 whatever num_draft_tokens says);
- names are generated from the values, stable and readable (`eagle3-s3-k4-d16`): text values as they are,
  numbers behind the knob's short label (`EngineSetting.space_labels`, else the knob's name), a numeric
  knob with one value for the whole space left out (it tells no setting apart);
- a baseline (the setting class with no knob set) is added unless a listed setting is one already.
"""

from __future__ import annotations

import itertools
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from specfrontier.config.common import SettingRefused, describe_validation_error
from specfrontier.config.limits import MAX_SETTINGS

SCALAR = (str, int, float, bool)
MAX_COMBINATIONS = MAX_SETTINGS
BASELINE_NAME = "baseline"


@dataclass(frozen=True)
class SpaceExpansion:
    """The settings a `space:` declares (as data for the setting class) and what happened on the way."""

    settings: tuple[dict[str, Any], ...]
    combinations: int
    pruned: Counter[str] = field(default_factory=Counter)
    """Rule broken -> combinations pruned for it."""
    collapsed: Counter[str] = field(default_factory=Counter)
    """Engine rewrite -> combinations that turned out to be an already listed setting."""
    baseline_added: bool = False

    def summary(self) -> str:
        """One line: how many settings the space gave, and what was pruned and collapsed, and why."""
        parts = [f"space: {self.combinations} combinations -> {len(self.settings)} settings"]
        if self.baseline_added:
            parts[0] += " (with the baseline)"
        if self.pruned:
            total = sum(self.pruned.values())
            why = "; ".join(f"{n} x {rule}" for rule, n in self.pruned.most_common())
            parts.append(f"pruned {total} of {self.combinations} combinations the engine refuses: {why}")
        if self.collapsed:
            total = sum(self.collapsed.values())
            why = "; ".join(f"{n} x {rule}" for rule, n in self.collapsed.most_common())
            parts.append(f"collapsed {total} the engine runs identically: {why}")
        return "; ".join(parts)


def _alternatives(space: Mapping[str, Any], fields: Sequence[str], where: str) -> dict[str, list[Any]]:
    """Each knob's values as a list, in the setting class's field order (so names do not depend on the
    order the config lists the knobs in)."""
    unknown = [k for k in space if k not in fields or k == "name"]
    if unknown:
        known = ", ".join(f for f in fields if f != "name")
        raise ValueError(f"{where}.{unknown[0]}: not a knob of this engine's settings; fix: use one of {known}")
    values: dict[str, list[Any]] = {}
    for knob in fields:
        if knob not in space:
            continue
        raw = space[knob]
        listed = list(raw) if isinstance(raw, list | tuple) else [raw]
        if not listed:
            raise ValueError(f"{where}.{knob} = []: no values; fix: list at least one value or remove {knob}")
        bad = next((v for v in listed if v is not None and not isinstance(v, SCALAR)), None)
        if bad is not None:
            raise ValueError(
                f"{where}.{knob} = {bad!r}: a space lists single values per knob; fix: put settings with this "
                "value under `settings:`"
            )
        values[knob] = list(dict.fromkeys(listed))
    if not values:
        raise ValueError(f"{where}: empty; fix: list values per knob, e.g. num_steps: [1, 2, 3]")
    return values


def setting_name(values: Mapping[str, Any], labels: Mapping[str, str], fixed: frozenset[str] = frozenset()) -> str:
    """`eagle3-s3-k4-d16`: text values lower-cased, numbers behind the knob's label; unset knobs and the
    numeric knobs in `fixed` (one value across the whole space: they tell no setting apart) left out."""
    parts: list[str] = []
    for knob, value in values.items():
        if value is None or knob == "name" or (knob in fixed and not isinstance(value, str)):
            continue
        if isinstance(value, bool):
            parts.append(f"{labels.get(knob, knob)}{'on' if value else 'off'}")
        elif isinstance(value, str):
            parts.append(value.lower())
        else:
            shown = f"{value:g}" if isinstance(value, float) else str(value)
            parts.append(f"{labels.get(knob, knob)}{shown}")
    return re.sub(r"[^A-Za-z0-9_.:+-]+", "_", "-".join(parts)) or "setting"


def expand_space(
    space: object, setting_cls: Any, listed: Sequence[Mapping[str, Any]] = (), *, where: str = "space"
) -> SpaceExpansion:
    """The settings `space` declares, validated by `setting_cls` (an `EngineSetting` subclass): refused
    combinations pruned by rule, identical ones collapsed, a baseline added unless `listed` has one.
    Raises ValueError (one line, with the fix) for a malformed space or one that leaves nothing."""
    if not isinstance(space, Mapping):
        raise ValueError(
            f"{where} = {space!r}: must be a mapping of knob -> value or list; fix: e.g. {{num_steps: [1, 2]}}"
        )
    fields = list(setting_cls.model_fields)
    values = _alternatives(space, fields, where)
    combinations = 1
    for options in values.values():
        combinations *= len(options)
    if combinations > MAX_COMBINATIONS:
        raise ValueError(f"{where}: {combinations} combinations; fix: list fewer values (at most {MAX_COMBINATIONS})")
    labels: Mapping[str, str] = getattr(setting_cls, "space_labels", {})
    fixed = frozenset(k for k, options in values.items() if len(options) == 1)
    pruned: Counter[str] = Counter()
    collapsed: Counter[str] = Counter()
    seen: dict[str, dict[str, Any]] = {}
    rewrites: dict[str, str | None] = {}
    for combo in itertools.product(*values.values()):
        point = dict(zip(values, combo, strict=True))
        point, rewrite = setting_cls.space_point(point)
        name = setting_name(point, labels, fixed)
        if name in rewrites:
            collapsed[rewrite or rewrites[name] or "listed twice"] += 1
            continue
        rewrites[name] = rewrite
        try:
            setting_cls.model_validate({"name": name, **point})
        except ValidationError as exc:
            pruned[_rule(exc)] += 1
            continue
        seen[name] = {"name": name, **{k: v for k, v in point.items() if v is not None}}
    if not seen:
        why = "; ".join(f"{n} x {rule}" for rule, n in pruned.most_common())
        raise ValueError(
            f"{where}: every one of the {combinations} combinations is refused by the engine ({why}); "
            "fix: widen the lists"
        )
    settings = list(seen.values())
    has_baseline = any(not _speculative(setting_cls, data) for data in [*listed, *settings])
    if not has_baseline:
        settings.insert(0, _baseline(setting_cls, values))
    return SpaceExpansion(tuple(settings), combinations, pruned, collapsed, baseline_added=not has_baseline)


def _rule(exc: ValidationError) -> str:
    """The rule a refused combination broke: the engine's `SettingRefused.rule`, else pydantic's message."""
    first = exc.errors()[0]
    error = (first.get("ctx") or {}).get("error")
    if isinstance(error, SettingRefused):
        return error.rule
    message = describe_validation_error(exc, "setting").removeprefix("setting: ").split("; fix:")[0]
    return re.sub(r"^settings\[[^]]*\]:\s*", "", message)


def _baseline(setting_cls: Any, values: Mapping[str, list[Any]]) -> dict[str, Any]:
    """The baseline: no knob set, but the space's single-valued knobs that leave it a valid setting without
    speculation (a `max_running_requests: 64` applies to the baseline too; `algorithm: EAGLE3` does not)."""
    baseline: dict[str, Any] = {"name": BASELINE_NAME}
    for knob, options in values.items():
        if (
            len(options) == 1
            and options[0] is not None
            and not _speculative(setting_cls, {**baseline, knob: options[0]})
        ):
            baseline[knob] = options[0]
    return baseline


def _speculative(setting_cls: Any, data: Mapping[str, Any]) -> bool:
    try:
        return bool(setting_cls.model_validate({**data, "name": "probe"}).speculative)
    except ValidationError:
        return True  # an invalid listed setting is reported by the config's own validation


__all__ = ["BASELINE_NAME", "SpaceExpansion", "expand_space", "setting_name"]
