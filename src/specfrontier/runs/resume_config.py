"""`tune --resume RUN -c FILE`: what a resume may change in the stored config, and the record of it.

Why: the advice after a failed setting is "remove the cause, then resume", and the cause is often in the
stored config itself (an `extra_args` that crashes the server, a timeout too short for a slow start).
A resume may therefore change what decides how a server is launched and how long to wait for it, but
never what is measured: the settings (their names and parameters), the levels, the repeats and the
workload stay those of the stored cells, else one run would mix two experiments. Anything else that
differs is refused with one line naming the first such field. An accepted change replaces the run's
stored config (a later plain `--resume` keeps it) and is appended to the run's environment under
`resume_changes`, which the report prints.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from specfrontier.config import TuneConfig
from specfrontier.errors import ConfigError
from specfrontier.store import Store

CHANGEABLE = (
    ("request_timeout_s",),
    ("max_consecutive_timeouts",),
    ("engine", "startup_timeout_s"),
    ("engine", "extra_args"),
    ("settings", "*", "extra_args"),
)
"""Config paths a resume may change (`*`: any setting): launch arguments and timeouts."""

IGNORED = (("store",),)
"""Config paths not compared: where the run is stored is not part of what it measures."""

ENVIRONMENT_KEY = "resume_changes"
"""The run environment's list of accepted changes: [{"at": ISO time, "changes": [line, ...]}, ...]."""


def _matches(path: tuple[str, ...], patterns: Sequence[tuple[str, ...]]) -> bool:
    return any(len(p) == len(path) and all(a in ("*", b) for a, b in zip(p, path, strict=True)) for p in patterns)


def _label(path: tuple[str, ...], stored: Mapping[str, Any]) -> str:
    """`settings[steps2].extra_args` for ('settings', '1', 'extra_args'): settings are named by name."""
    parts: list[str] = []
    for i, key in enumerate(path):
        if i == 1 and path[0] == "settings" and key.isdigit():
            parts[-1] += f"[{stored['settings'][int(key)].get('name', key)}]"
        elif key.isdigit():
            parts[-1] += f"[{key}]"
        else:
            parts.append(key)
    return ".".join(parts)


def _differences(old: Any, new: Any, path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], Any, Any]]:
    """(path, old, new) of every leaf that differs; a changeable path is compared whole."""
    if _matches(path, IGNORED):
        return []
    if isinstance(old, dict) and isinstance(new, dict) and not _matches(path, CHANGEABLE):
        found: list[tuple[tuple[str, ...], Any, Any]] = []
        for key in [*old, *(k for k in new if k not in old)]:
            found += _differences(old.get(key), new.get(key), (*path, str(key)))
        return found
    same_length = isinstance(old, list) and isinstance(new, list) and len(old) == len(new)
    of_objects = same_length and all(isinstance(v, dict) for v in [*old, *new])  # a list of numbers: whole
    if of_objects and path != ("settings",) and not _matches(path, CHANGEABLE):
        return [d for i, (a, b) in enumerate(zip(old, new, strict=True)) for d in _differences(a, b, (*path, str(i)))]
    if path == ("settings",) and of_objects and [s.get("name") for s in old] == [s.get("name") for s in new]:
        return [d for i, (a, b) in enumerate(zip(old, new, strict=True)) for d in _differences(a, b, (*path, str(i)))]
    return [] if old == new else [(path, old, new)]


def config_changes(stored: TuneConfig, given: TuneConfig, source: str, run_id: str) -> list[str]:
    """One line per changed field (`settings[steps2].extra_args: [...] -> [...]`); ConfigError naming
    the first field a resume may not change."""
    old, new = stored.model_dump(mode="json"), given.model_dump(mode="json")
    lines = []
    for path, before, after in _differences(old, new):
        where = _label(path, old)
        if not _matches(path, CHANGEABLE):
            if path == ("settings",):
                before = [s.get("name") for s in before or []]
                after = [s.get("name") for s in after or []]
            raise ConfigError(
                f"{source} with --resume {run_id}: {where} = {after!r} but the run was measured with {before!r}; "
                "a resume may change only launch arguments (extra_args) and timeouts; "
                "fix: start a new run with this config (no --resume), or resume without -c"
            )
        lines.append(f"{where}: {before!r} -> {after!r}")
    return lines


def record_changes(store: Store, run_id: str, stored: TuneConfig, given: TuneConfig, lines: Sequence[str]) -> None:
    """Record accepted `lines` (from `config_changes`): the run's config and its settings' parameters
    become `given`'s, and the lines are appended to the run's `resume_changes`."""
    if not lines:
        return
    store.update_run_config(run_id, given.model_copy(update={"store": stored.store}).model_dump(mode="json"))
    for setting in given.all_settings():
        store.update_setting(run_id, setting.name, params=setting.parameters())
    history = store.run(run_id).environment.get(ENVIRONMENT_KEY)
    entry = {"at": datetime.now(UTC).isoformat(timespec="seconds"), "changes": list(lines)}
    store.merge_environment(run_id, ENVIRONMENT_KEY, [*(history if isinstance(history, list) else []), entry])


__all__ = ["CHANGEABLE", "ENVIRONMENT_KEY", "config_changes", "record_changes"]
