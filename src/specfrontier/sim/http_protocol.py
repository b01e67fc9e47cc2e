"""Request parsing and response shapes of the simulator's HTTP face (SGLang's OpenAI-compatible flavour).

Split from `http_face` so the server loop and the wire format can be read apart. Everything here
describes a MODEL's output (placeholder tokens with modelled counts), not a measurement.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal

from aiohttp import web

from specfrontier.sim.core import SimRequest
from specfrontier.sim.profile import SimProfile
from specfrontier.sim.setting import ResolvedSetting


@dataclass(frozen=True, slots=True)
class FaceConfig:
    """What the face serves: the model (profile, resolved setting), its pacing and the fault knobs."""

    profile: SimProfile
    setting: ResolvedSetting
    workload: str
    seed: int
    time_scale: float
    server_args: dict[str, Any]
    """Resolved launch arguments, SGLang's names, served at the top level of /server_info."""
    model_name: str
    context_length: int
    max_total_num_tokens: int
    startup_s: float
    hang: bool = False
    stall_stream_after: int | None = None
    malformed_sse: bool = False
    crash_after: int | None = None
    crash_once_file: str | None = None
    """With `crash_after`: crash only while this file does not exist, and create it when crashing (a
    transient crash: the relaunch a `--resume` makes then runs clean)."""
    crash_linger_s: float = 0.0
    """With `crash_after`: close every socket first, then live this long before exiting (a server that
    tears down for a while after its connections are gone, as engines freeing GPU memory do)."""


class BadRequest(Exception):
    """A request body the face refuses (served as an OpenAI-style 400)."""


@dataclass(frozen=True, slots=True)
class Ask:
    """The parts of a completion request the model uses."""

    api: Literal["chat", "completion"]
    stream: bool
    include_usage: bool
    max_tokens: int
    temperature: float
    ignore_eos: bool
    prompt_tokens: int
    meta_info: bool
    spec_details: bool
    model: str


def parse_ask(body: object, api: Literal["chat", "completion"], config: FaceConfig) -> Ask:
    """Validate a request body; prompt tokens are estimated as characters / 4 (at least 1)."""
    if not isinstance(body, dict):
        raise BadRequest("the request body must be a JSON object")
    if api == "chat":
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise BadRequest("messages must be a non-empty list")
        chars = sum(len(str(m.get("content") or "")) for m in messages if isinstance(m, dict))
    else:
        prompt = body.get("prompt")
        if isinstance(prompt, list) and all(isinstance(p, str) for p in prompt) and len(prompt) == 1:
            prompt = prompt[0]
        if not isinstance(prompt, str):
            raise BadRequest("prompt must be a string (one prompt per request)")
        chars = len(prompt)
    if body.get("n", 1) != 1:
        raise BadRequest("n must be 1 (the simulator serves one choice)")
    prompt_tokens = max(1, chars // 4)
    default_max = 16 if api == "completion" else max(1, config.context_length - prompt_tokens)
    raw_max = body.get("max_completion_tokens", body.get("max_tokens"))
    max_tokens = default_max if raw_max is None else raw_max
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
        raise BadRequest(f"max_tokens must be a positive integer, got {max_tokens!r}")
    if prompt_tokens + max_tokens > config.context_length:
        raise BadRequest(
            f"prompt ({prompt_tokens} tokens) + max_tokens ({max_tokens}) exceeds the context length "
            f"{config.context_length}"
        )
    temperature = body.get("temperature")
    temperature = 1.0 if temperature is None else temperature  # OpenAI's default
    if isinstance(temperature, bool) or not isinstance(temperature, int | float) or temperature < 0:
        raise BadRequest(f"temperature must be a number >= 0, got {temperature!r}")
    options = body.get("stream_options")
    model = body.get("model")
    stream = bool(body.get("stream", False))
    if api == "chat" and stream:
        _refuse_streaming_chat_fields(body)
    return Ask(
        api=api,
        stream=stream,
        include_usage=isinstance(options, dict) and bool(options.get("include_usage")),
        max_tokens=max_tokens,
        temperature=float(temperature),
        ignore_eos=bool(body.get("ignore_eos", False)),
        prompt_tokens=prompt_tokens,
        meta_info=api == "chat" and bool(body.get("return_meta_info", False)),
        spec_details=bool(body.get("return_spec_tokens_details", False)),
        model=model if isinstance(model, str) else config.model_name,
    )


STREAMING_CHAT_REFUSED = {
    "return_prompt_token_ids": "return_prompt_token_ids is not supported with streaming. Please set stream=false "
    "when using return_prompt_token_ids=true.",
    "return_token_ids": "return_token_ids is not supported with streaming on /v1/chat/completions. Please set "
    "stream=false when using return_token_ids=true.",
    "return_meta_info": "return_meta_info is not supported with streaming. Please set stream=false when using "
    "return_meta_info=true.",
}
"""Fields SGLang's streaming chat refuses with HTTP 400, and its messages (0.5.23
`srt/entrypoints/openai/serving_chat.py:1309-1325`)."""


def _refuse_streaming_chat_fields(body: dict[str, Any]) -> None:
    """SGLang's refusal of a field a streaming chat request may not ask for."""
    for field, message in STREAMING_CHAT_REFUSED.items():
        if body.get(field):
            raise BadRequest(message)


def spec_details(request: SimRequest, setting: ResolvedSetting) -> dict[str, Any]:
    """SGLang's per-request speculative figures (engines.md 1.7; key names kept exactly).

    `spec_accept_length` is completion_tokens / verify steps, the prefill token included, as SGLang computes
    it; the histogram counts verify steps by number of correct drafts (0 .. num_draft_tokens - 1)."""
    verify = request.verify_steps
    histogram = [0] * setting.num_draft_tokens
    for tokens in request.chunk_tokens[1:]:
        histogram[min(tokens - 1, len(histogram) - 1)] += 1
    return {
        "spec_verify_ct": verify,
        "spec_num_correct_drafts": request.accepted,
        "spec_num_proposed_drafts": request.drafted,
        "spec_accept_rate": request.accepted / request.drafted if request.drafted else 0.0,
        "spec_accept_length": request.generated / verify if verify else 0.0,
        "spec_correct_drafts_histogram": histogram,
    }


def error_response(status: int, message: str) -> web.Response:
    body = {"object": "error", "message": message, "type": "BadRequestError", "param": None, "code": status}
    if status == 503:
        body["type"] = "ServiceUnavailableError"
    return web.json_response(body, status=status)


def sse_event(payload: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(payload, separators=(",", ":")).encode() + b"\n\n"


__all__ = ["Ask", "BadRequest", "FaceConfig", "error_response", "parse_ask", "spec_details", "sse_event"]
