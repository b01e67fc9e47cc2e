"""The command a user runs to deploy a measured setting, drawn from the store.

The store keeps each setting's launch command as it ran: the run's own free port, 127.0.0.1, and flags
that only served the measurement. What the reports, `schedule` and `compare` print is that command as the
engine's adapter rewrites it for a deployment (`EngineAdapter.deployable`: the engine's rule, so nothing
here names an engine), at the address the config's `deploy:` names, with the environment the server was
measured under taken from the stored config's engine options.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from pydantic import ValidationError

from specfrontier.analysis.summary import RunData
from specfrontier.engines.base import Deployable, EngineAdapter, deploy_address
from specfrontier.engines.registry import spec, stored_setting
from specfrontier.errors import ConfigError
from specfrontier.store import LAUNCH_ENVIRONMENT_KEY


def _adapter(data: RunData) -> EngineAdapter[Any] | None:
    """The run's adapter built from its stored engine options (cheap, no I/O); None when the engine is no
    longer registered or its stored options no longer validate."""
    try:
        engine = spec(data.run.engine)
        options = engine.config.model_fields["engine"].annotation
        stored = data.run.config.get("engine", {})
        if not isinstance(options, type) or not hasattr(options, "model_validate"):
            return None
        return engine.adapter(options.model_validate(stored))
    except (ConfigError, ValidationError, TypeError):
        return None


def _address(data: RunData) -> tuple[str | None, int | None]:
    """The config's `deploy.host` / `deploy.port` (None: the engine's default)."""
    block = data.run.config.get("deploy")
    if not isinstance(block, dict):
        return None, None
    host, port = block.get("host"), block.get("port")
    return (host if isinstance(host, str) else None), (port if isinstance(port, int) else None)


def deploy_command(data: RunData, name: str) -> Deployable | None:
    """The deployable command of setting `name` (None: the run launched no server for it, e.g. `bench
    --url`). When the stored options no longer fit the engine, the command as launched, saying so."""
    launched = data.setting(name).command
    if not launched:
        return None
    host, port = _address(data)
    adapter = _adapter(data)
    if adapter is None:  # the engine's own rule needs its options: only the address is rewritten
        argv, left_out = deploy_address(launched, host=host, port=port)
        unknown = "the engine's own rule not applied (the stored engine options no longer parse): check its flags"
        return Deployable(tuple(argv), (), (*left_out, unknown))
    try:
        setting = stored_setting(data.run.engine, name, data.setting(name).params)
    except (ConfigError, ValidationError):
        setting = None
    found = adapter.deployable(setting, launched, host=host, port=port)
    recorded = data.run.environment.get(LAUNCH_ENVIRONMENT_KEY)
    env = recorded.get(name) if isinstance(recorded, dict) else None
    if isinstance(env, dict):  # what the server was measured with, not what the options would set today
        return replace(found, env=tuple(sorted((str(k), str(v)) for k, v in env.items())))
    return found


NOT_LAUNCHED = "(no command: the run measured a server it did not launch, e.g. `bench --url`)"
"""What a report prints for a setting without a stored launch command."""


def deploy_text(data: RunData, name: str) -> tuple[str, str]:
    """(command, note) as printed under a recommendation: the deployable command and what it leaves out."""
    found = deploy_command(data, name)
    if found is None:
        url = data.setting(name).params.get("url")
        if isinstance(url, str):  # `bench --url`: the user's own server, launched by the user's own command
            return f"(no command: the server at {url} was measured as it runs; specfrontier did not launch it)", ""
        return NOT_LAUNCHED, ""
    return found.text(), found.note()


__all__ = ["NOT_LAUNCHED", "deploy_command", "deploy_text"]
