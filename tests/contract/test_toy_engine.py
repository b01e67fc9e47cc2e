"""A toy engine under the contract, in this one file: the proof that adding an engine needs nothing else.

It has its own settings (`draft`: tokens drafted per step, its depth), options, tune config and adapter,
and a tiny OpenAI-compatible server (this file run as a script) that streams placeholder tokens, reports
per-request draft counts in its final chunk (`toy_spec`), its capacity on `/toy_info` and cumulative
counters on `/toy_counters`. `SPEC` and `NAMES` are its registration; `TestToyEngineContract` hands them
to the contract (`registration`), which registers the toy engine around each of this class's tests only,
so no other test sees a fifth engine, and runs every check on it as on the built-in engines. No other
file names it: `test_every_engine.py` finds the class by itself.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar, Literal

import aiohttp
from aiohttp import web
from pydantic import Field

from contract import engine_contract
from contract.engine_contract import LiveEngineContract
from specfrontier.config.common import TuneBase
from specfrontier.engines.base import (
    Capacity,
    Detected,
    EngineAdapter,
    EngineOptions,
    EngineSetting,
    ParamNames,
    get_json,
)
from specfrontier.engines.registry import EngineSpec
from specfrontier.records import RequestSpecStats, SpecCounters


class ToySetting(EngineSetting):
    """No speculation (`draft` 0), or `draft` tokens drafted per step."""

    ladder_family: ClassVar[str] = "toy"
    max_depth: ClassVar[int] = 6

    name: str = Field(min_length=1, pattern=r"^[A-Za-z0-9_.:+-]+$")
    draft: int = Field(0, ge=0, le=16)
    extra_args: tuple[str, ...] = ()

    @property
    def speculative(self) -> bool:
        return self.draft > 0

    @property
    def depth_field(self) -> str | None:
        return "draft" if self.draft > 0 else None


class ToyOptions(EngineOptions):
    name: Literal["toy"] = "toy"
    slots: int = Field(8, ge=1, le=64)
    startup_timeout_s: float = Field(30.0, gt=0)
    extra_args: tuple[str, ...] = ()


class ToyTuneConfig(TuneBase):
    baseline_hint: ClassVar[str] = "no setting with draft 0; fix: add a baseline"

    engine: ToyOptions = Field(default_factory=ToyOptions)
    settings: tuple[ToySetting, ...] = Field(min_length=1)


class ToyAdapter(EngineAdapter[ToySetting]):
    name: ClassVar[str] = "toy"
    display_name: ClassVar[str] = "toy engine"
    counters_source: ClassVar[str] = "toy /toy_counters diff"

    def __init__(self, engine: ToyOptions) -> None:
        self.engine = engine

    def prepare(self, settings: tuple[ToySetting, ...]) -> None:
        return None

    def command(self, setting: ToySetting, *, port: int, max_concurrency: int) -> list[str]:
        return [
            sys.executable, str(Path(__file__)), "--host", "127.0.0.1", "--port", str(port),
            "--slots", str(self.engine.slots), "--draft", str(setting.draft), *setting.extra_args,
        ]  # fmt: skip

    def version(self) -> str:
        return "toy 1"

    def environment(self) -> dict[str, str]:
        """The server is this file run as a script: it imports the contract suite, as its tests do."""
        paths = [str(Path(engine_contract.__file__).resolve().parents[1]), os.environ.get("PYTHONPATH", "")]
        return {"PYTHONPATH": os.pathsep.join(p for p in paths if p)}

    async def capacity(self, session: aiohttp.ClientSession, base_url: str, setting: ToySetting) -> Capacity:
        info = await get_json(session, f"{base_url}/toy_info")
        return Capacity(int(info["slots"]), "toy /toy_info slots")

    @classmethod
    async def spec_counters(cls, session: aiohttp.ClientSession, base_url: str) -> SpecCounters | None:
        counts = await get_json(session, f"{base_url}/toy_counters")
        return SpecCounters(counts["drafted"], counts["accepted"], counts["steps"]) if counts else None

    @classmethod
    def request_extras(cls) -> dict[str, Any]:
        return {"toy_report": True}

    @classmethod
    def request_spec_stats(cls, chunk: Mapping[str, Any]) -> RequestSpecStats | None:
        spec = chunk.get("toy_spec")
        if not isinstance(spec, Mapping):
            return None
        return RequestSpecStats(spec["drafted"], spec["accepted"], spec["steps"])

    @classmethod
    async def detect(cls, session: aiohttp.ClientSession, root: str) -> Detected | None:
        info = await get_json(session, f"{root}/toy_info")
        if not isinstance(info, Mapping) or info.get("engine") != "toy":
            return None
        source = "toy /toy_info slots"
        return Detected(Capacity(int(info["slots"]), source), source, "toy 1")

    @property
    def startup_timeout_s(self) -> float:
        return self.engine.startup_timeout_s


def _default_settings() -> tuple[ToySetting, ...]:
    return (ToySetting(name="none"), ToySetting(name="d2", draft=2), ToySetting(name="d4", draft=4))


SPEC = EngineSpec(
    name="toy", config=ToyTuneConfig, setting=ToySetting, adapter=ToyAdapter, default_settings=_default_settings
)
NAMES = ParamNames(depth=("draft",), draft_length=("draft",))


class TestToyEngineContract(LiveEngineContract):
    engine = "toy"
    registration = (SPEC, NAMES)
    options: ClassVar[dict[str, Any]] = {"name": "toy"}
    baseline: ClassVar[dict[str, Any]] = {"name": "none"}
    speculative: ClassVar[dict[str, Any]] = {"name": "d3", "draft": 3}


# -- the toy server (run as a script) ------------------------------------------------------------------
def _serve(args: argparse.Namespace) -> None:
    counts = {"drafted": 0, "accepted": 0, "steps": 0}

    async def health(request: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def info(request: web.Request) -> web.Response:
        return web.json_response({"engine": "toy", "slots": args.slots})

    async def counters(request: web.Request) -> web.Response:
        return web.json_response(counts)

    async def chat(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        tokens = int(body.get("max_tokens", 8))
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        steps = -(-tokens // (args.draft + 1)) if args.draft else tokens
        drafted, accepted = steps * args.draft, max(0, tokens - steps)
        for i in range(tokens):
            chunk = {"choices": [{"index": 0, "delta": {"content": f"t{i} "}, "finish_reason": None}]}
            await resp.write(f"data: {json.dumps(chunk)}\n\n".encode())
            await asyncio.sleep(0.001)
        last: dict[str, Any] = {
            "choices": [{"index": 0, "delta": {}, "finish_reason": "length"}],
            "usage": {"prompt_tokens": 4, "completion_tokens": tokens, "total_tokens": 4 + tokens},
        }
        if body.get("toy_report") and args.draft:
            last["toy_spec"] = {"drafted": drafted, "accepted": accepted, "steps": steps}
        counts.update(drafted=counts["drafted"] + drafted, accepted=counts["accepted"] + accepted)
        counts["steps"] += steps if args.draft else 0
        await resp.write(f"data: {json.dumps(last)}\n\ndata: [DONE]\n\n".encode())
        await resp.write_eof()
        return resp

    app = web.Application()
    app.router.add_get("/health", health)
    app.router.add_get("/toy_info", info)
    app.router.add_get("/toy_counters", counters)
    app.router.add_post("/v1/chat/completions", chat)
    web.run_app(app, host=args.host, port=args.port, print=None, access_log=None)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--host", required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--slots", type=int, default=8)
    parser.add_argument("--draft", type=int, default=0)
    _serve(parser.parse_args())
