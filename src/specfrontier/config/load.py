"""Load a sweep config: YAML file or mapping -> the registered engine's config class.

`engine.name` picks the engine (`specfrontier.engines.registry`); none means the default engine. Nothing
here launches a server: `load_config` fails before any process starts, with one line naming the field,
the value seen and the fix.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import ValidationError

from specfrontier.config.common import STORED, TuneBase, describe_validation_error
from specfrontier.config.limits import DEFAULT_MAX_SETTINGS, MAX_SETTINGS
from specfrontier.config.space import SpaceExpansion, expand_space
from specfrontier.engines import registry
from specfrontier.errors import ConfigError, shown_value
from specfrontier.textfiles import read_text_utf8
from specfrontier.yamltext import load_yaml, yaml_error_line

TuneConfig = TuneBase


def parse_config(data: dict[str, Any], *, source: str = "config", stored: bool = False) -> TuneConfig:
    """Validate a config mapping; `engine.name` picks the engine (none: the default engine); a `space:`
    expands into settings (`config.space`), after any listed ones; with neither, that engine's default
    settings. `stored`: a run's stored config (a resume), which an older version may have accepted under
    limits added since (`config.common.STORED`)."""
    engine = data.get("engine")
    name = engine.get("name") if isinstance(engine, dict) else None
    spec = registry.default_spec() if name is None else registry.spec(str(name), where=f"{source}: engine.name")
    expansion = None
    if "space" in data:
        data = dict(data)
        listed = data.get("settings") or []
        try:
            expansion = expand_space(data.pop("space"), spec.setting, listed if isinstance(listed, list) else [])
        except ValueError as exc:
            raise ConfigError(f"{source}: {exc}") from exc
        data["settings"] = [*listed, *expansion.settings] if isinstance(listed, list) else listed
    defaults = None
    if expansion is None and "settings" not in data:
        defaults = [s.model_dump(exclude_defaults=True) for s in spec.default_settings()]
        data = {**data, "settings": defaults}
    if not stored:  # a run's stored config was accepted when it started
        check_settings_count(data, expansion, source)
    try:
        config = spec.config.model_validate(data, context={STORED: stored})
    except ValidationError as exc:
        raise ConfigError(describe_validation_error(exc, source)) from exc
    if expansion is not None:
        config._settings_summary = expansion.summary()
    elif defaults is not None:
        names = ", ".join(str(d.get("name")) for d in defaults)
        config._settings_summary = (
            f"settings: none in {source}, so the {spec.name} engine's {len(defaults)} built-in settings run "
            f"({names}); list `settings:` or a `space:` to choose them"
        )
    return config


def check_settings_count(data: dict[str, Any], expansion: SpaceExpansion | None, source: str) -> None:
    """Refuse more settings than `max_settings` (default DEFAULT_MAX_SETTINGS) before the config is
    validated setting by setting, and long before anything is written or launched: a grid search launches
    a server per setting, and a space of 47,233 settings was accepted without a word (issue 39)."""
    settings = data.get("settings")
    if not isinstance(settings, list):
        return  # not a list: the model's validation names it
    bound = data.get("max_settings", DEFAULT_MAX_SETTINGS)
    if isinstance(bound, bool) or not isinstance(bound, int) or not 1 <= bound <= MAX_SETTINGS:
        raise ConfigError(
            f"{source}: max_settings = {shown_value(bound)}: not a whole number from 1 to {MAX_SETTINGS}; "
            f"fix: use one (default {DEFAULT_MAX_SETTINGS})"
        )
    count = len(settings)
    if count <= bound:
        return
    raise_to = f", or set max_settings: {count} to run them all" if count <= MAX_SETTINGS else ""
    if expansion is not None:
        listed = count - len(expansion.settings)
        also = f" and {listed} listed" if listed else ""
        what = f"space: {expansion.combinations} combinations give {len(expansion.settings)} settings{also}"
        fix = "narrow the space (fewer values per knob)"
    else:
        what = f"settings: {count} listed"
        fix = "list fewer settings"
    raise ConfigError(
        f"{source}: {what}, more than max_settings = {bound} (a grid search launches a server for each: "
        f"{count} launches); fix: {fix}{raise_to}"
    )


def default_config() -> TuneConfig:
    """What `tune` runs without `--config`: the default engine's embedded sweep."""
    make = registry.default_spec().default_config
    assert make is not None, "the default engine has an embedded config"
    return make()


def load_config(path: Path | None) -> TuneConfig:
    """Read and validate a YAML config; None gives the embedded default."""
    if path is None:
        return default_config()
    text = read_text_utf8(path, "--config", too_big_fix="pass the config meant here (a config is a few kilobytes)")
    data = load_yaml(text, path)
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: top level = {type(data).__name__}: must be a mapping; fix: use `key: value` lines")
    return parse_config(data, source=str(path))


__all__ = ["check_settings_count", "default_config", "load_config", "parse_config", "yaml_error_line"]
