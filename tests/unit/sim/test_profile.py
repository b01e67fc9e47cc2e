"""Profiles: shipped JSON loads, unknown names and bad fields fail with the field and the fix."""

from __future__ import annotations

import json
from importlib import resources

import pytest
from pydantic import BaseModel

from specfrontier.errors import ConfigError
from specfrontier.sim import SimProfile, available_profiles, load_profile, parse_profile
from specfrontier.sim import profile as profile_module

SEED = "seed-qwen3.5-122b-a10b"


def _seed_json() -> dict[str, object]:
    text = resources.files("specfrontier.sim").joinpath(f"profiles/{SEED}.json").read_text("utf-8")
    data: dict[str, object] = json.loads(text)
    return data


def test_seed_profile_is_shipped_and_loads() -> None:
    assert SEED in available_profiles()
    profile = load_profile(SEED)
    assert profile.name == SEED
    assert profile.model.experts == 256 and profile.model.experts_per_token == 8 and profile.model.layers == 48
    assert {"synthetic", "chat"} <= set(profile.workloads)
    # The description must say what is fitted and what is assumed.
    assert "FITTED" in profile.description and "ASSUMED" in profile.description


def test_unknown_profile_lists_the_available_ones() -> None:
    with pytest.raises(ConfigError) as info:
        load_profile("no-such-profile")
    message = str(info.value)
    assert "name = 'no-such-profile'" in message
    assert SEED in message and "fix:" in message


def test_unknown_key_is_rejected_with_its_path() -> None:
    data = _seed_json()
    cycle = dict(data["cycle"])  # type: ignore[call-overload]
    cycle["base_msec"] = 1.0
    data["cycle"] = cycle
    with pytest.raises(ConfigError) as info:
        parse_profile(json.dumps(data), source="x.json")
    assert "x.json: cycle.base_msec" in str(info.value) and "fix:" in str(info.value)


def test_out_of_range_rate_is_rejected() -> None:
    data = _seed_json()
    data["workloads"]["synthetic"]["acceptance_per_position"] = [1.5]  # type: ignore[index]
    with pytest.raises(ConfigError, match="acceptance_per_position"):
        parse_profile(json.dumps(data), source="x.json")


def test_not_json_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="not valid JSON"):
        parse_profile("{", source="x.json")


def test_unknown_workload_lists_the_classes() -> None:
    with pytest.raises(ConfigError, match=r"workload = 'poetry'.*fix: use one of chat, code, math, synthetic"):
        load_profile(SEED).workload("poetry")


def _models(model: type[BaseModel]) -> list[type[BaseModel]]:
    found = [model]
    for field in model.model_fields.values():
        annotation = field.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            found += _models(annotation)
    return found


def test_every_profile_field_has_a_description() -> None:
    models: list[type[BaseModel]] = [*_models(SimProfile), profile_module.WorkloadModel]
    for model in models:
        assert model.model_config.get("extra") == "forbid", model.__name__
        for name, field in model.model_fields.items():
            assert field.description, f"{model.__name__}.{name} has no description"
