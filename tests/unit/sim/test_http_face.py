"""The simulator's HTTP face, launched as a subprocess exactly like a real SGLang (its own process group, a
free 127.0.0.1 port) and stopped by process group: endpoints, SSE shape, SGLang's start-up rules, every
fault knob, and agreement with the virtual-time face on one cell. What it serves is a MODEL, not a measurement."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from builders import wait_for
from specfrontier.engines.sglang import SGLangAdapter
from specfrontier.load.client import StreamingClient
from specfrontier.load.closed_loop import run_closed_loop
from specfrontier.metrics.window import cell_metrics
from specfrontier.process.launch import free_port, group_alive
from specfrontier.records import Prompt, Sampling
from specfrontier.sim import SimSetting, load_profile, simulate_cell

SEED = "seed-qwen3.5-122b-a10b"
SERVE = [sys.executable, "-m", "specfrontier.sim.serve"]
STEPS3 = ["--speculative-algorithm", "EAGLE3", "--speculative-num-steps", "3", "--speculative-eagle-topk", "1"]
FAST = ["--time-scale", "50", "--startup-s", "0"]
PROMPT_128 = "x" * 512  # 128 prompt tokens at the face's 4 characters per token
SGLANG_FLAGS = (
    "--model-path", "--host", "--port", "--tp-size", "--speculative-algorithm", "--speculative-num-steps",
    "--speculative-eagle-topk", "--speculative-num-draft-tokens", "--max-running-requests",
)  # fmt: skip


@dataclass
class Face:
    proc: subprocess.Popen[bytes]
    port: int
    log: Path

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")


def _status(url: str) -> int | None:
    """HTTP status of a GET, or None while nothing listens."""
    try:
        with urllib.request.urlopen(url, timeout=2) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        return exc.code
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return None


class Launcher:
    """Starts faces in their own process groups and stops every one of them, checking nothing is left."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self.faces: list[Face] = []

    def start(self, *args: str, wait: str = "health") -> Face:
        port = free_port()
        log = self.tmp_path / f"face-{len(self.faces)}.log"
        with log.open("wb") as out:
            proc = subprocess.Popen(
                [*SERVE, "--port", str(port), *args],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        face = Face(proc, port, log)
        self.faces.append(face)
        if wait == "health":
            wait_for(lambda: _status(face.base + "/health") == 200, timeout_s=20, what="healthy")
        elif wait == "listen":
            wait_for(lambda: _status(face.base + "/health") is not None, timeout_s=20, what="listening")
        return face

    def stop_all(self) -> None:
        for face in self.faces:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(face.proc.pid, signal.SIGTERM)
            try:
                face.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(face.proc.pid, signal.SIGKILL)
                face.proc.wait()
            wait_for(lambda f=face: not group_alive(f.proc.pid), timeout_s=5, what="group gone")
            with socket.socket() as sock, pytest.raises(OSError):
                sock.connect(("127.0.0.1", face.port))  # nothing listens any more


@pytest.fixture
def launch(tmp_path: Path) -> Iterator[Launcher]:
    launcher = Launcher(tmp_path)
    yield launcher
    launcher.stop_all()


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    """A face that must exit on its own (refusals and start-up faults)."""
    return subprocess.run(
        [*SERVE, *args], capture_output=True, text=True, timeout=60, start_new_session=True, check=False
    )


def _chat(max_tokens: int = 64) -> Prompt:
    return Prompt("p0", "synthetic", "chat", max_tokens, messages=(("user", PROMPT_128),))


async def _get_json(url: str) -> dict[str, Any]:
    async with aiohttp.ClientSession() as session, session.get(url) as resp:
        assert resp.status == 200
        body: dict[str, Any] = await resp.json()
        return body


async def _post(url: str, body: dict[str, Any]) -> tuple[int, str]:
    async with aiohttp.ClientSession() as session, session.post(url, json=body) as resp:
        return resp.status, await resp.text()


# -- command line and start-up rules ----------------------------------------------------------------
def test_help_lists_sglang_flags_and_faults() -> None:
    done = _run("--help")
    assert done.returncode == 0
    for flag in (*SGLANG_FLAGS, "--time-scale", "--seed", "--crash-after", "--stall-stream-after", "--malformed-sse"):
        assert flag in done.stdout


def test_invalid_setting_and_remote_host_are_refused() -> None:
    # steps 3, topk 2: SGLang scores 2 + 2 * 4 = 10 candidates, so at most 11 draft tokens
    bad = _run(*STEPS3[:4], "--speculative-eagle-topk", "2", "--speculative-num-draft-tokens", "12")
    assert bad.returncode == 1 and "ValueError: sim setting: num_draft_tokens = 12" in bad.stderr
    assert "fix: set num_draft_tokens <= 11" in bad.stderr
    remote = _run("--host", "0.0.0.0")
    assert remote.returncode == 1 and "not a loopback address" in remote.stderr and "--allow-remote" in remote.stderr
    assert _run("--no-such-flag").returncode == 2


def test_start_up_faults_exit_with_messages() -> None:
    fail = _run("--fail-at-start")
    assert fail.returncode == 1 and "--fail-at-start" in fail.stderr
    oom = _run(*STEPS3, "--oom-above", "16")  # max_running_requests unset: reset to 48 > 16
    assert oom.returncode == 1 and "CUDA out of memory" in oom.stderr and "48 > --oom-above 16" in oom.stderr


async def test_health_is_503_while_starting_then_200(launch: Launcher) -> None:
    face = launch.start(*STEPS3, "--startup-s", "1.5", wait="listen")
    assert _status(face.base + "/health") == 503
    assert _status(face.base + "/health_generate") == 503
    status, _ = await _post(face.base + "/v1/completions", {"prompt": "hi", "max_tokens": 2})
    assert status == 503
    wait_for(lambda: _status(face.base + "/health_generate") == 200, timeout_s=20, what="healthy")
    assert "fired up and ready to roll" in face.log_text()


async def test_server_info_reports_resolved_args_and_capacity(launch: Launcher) -> None:
    face = launch.start(*STEPS3, "--speculative-num-draft-tokens", "7", "--tp-size", "4", *FAST)
    info = await _get_json(face.base + "/server_info")
    assert info["speculative_algorithm"] == "EAGLE3" and info["speculative_num_steps"] == 3
    assert info["speculative_eagle_topk"] == 1 and info["speculative_num_draft_tokens"] == 4  # topk 1 rewrite
    assert info["max_running_requests"] == 48 and info["tp_size"] == 4
    assert info["internal_states"][0]["effective_max_running_requests_per_dp"] == 17
    assert "avg_spec_accept_length" not in info["internal_states"][0]  # nothing decoded yet
    assert isinstance(info["max_total_num_tokens"], int) and info["version"]
    assert info["simulated"] is True and info["time_scale"] == 50.0
    log = face.log_text()
    assert "Max running requests is reset to 48 for speculative decoding" in log
    assert "speculative_num_draft_tokens is adjusted to speculative_num_steps + 1" in log
    async with StreamingClient(face.base) as client:
        assert (await client.send(_chat(), Sampling(temperature=0.0, ignore_eos=True))).ok
    info = await _get_json(face.base + "/get_server_info")
    assert 1.0 < info["internal_states"][0]["avg_spec_accept_length"] <= 4.0

    capped = launch.start(*STEPS3, "--max-running-requests", "8", "--oom-above", "16", *FAST)
    info = await _get_json(capped.base + "/server_info")
    assert (
        info["max_running_requests"] == 8 and info["internal_states"][0]["effective_max_running_requests_per_dp"] == 8
    )
    assert "reset to 48" not in capped.log_text()


# -- generation --------------------------------------------------------------------------------------
async def test_streamed_chat_carries_multi_token_chunks_usage_and_spec_details(launch: Launcher) -> None:
    """Streaming chat reports acceptance in the sglext chunk, asked for as the SGLang adapter asks for it."""
    face = launch.start(*STEPS3, *FAST)
    client = StreamingClient(
        face.base, spec_stats_extractor=SGLangAdapter.request_spec_stats, extra_body=SGLangAdapter.request_extras()
    )
    async with client:
        record = await client.send(_chat(64), Sampling(temperature=0.0, ignore_eos=True))
    assert record.ok, record.error
    assert record.completion_tokens == 64 and record.prompt_tokens == 128 and record.finish_reason == "length"
    assert record.output_text == "tok " * 64
    assert len(record.chunk_ns) < 40  # several tokens per chunk: accepted drafts arrive together
    spec = record.spec
    assert spec is not None and spec.verify_steps is not None
    assert 1 + spec.verify_steps + spec.accepted_tokens == 64 and spec.draft_tokens == 3 * spec.verify_steps


async def test_streamed_chat_refuses_return_meta_info_as_sglang_does(launch: Launcher) -> None:
    """SGLang 0.5.23 refuses `return_meta_info` on a streaming chat request with HTTP 400
    (srt/entrypoints/openai/serving_chat.py:1321-1325); the face must not accept what SGLang refuses (issue 37)."""
    face = launch.start(*STEPS3, *FAST)
    chat = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 8, "stream": True}
    status, text = await _post(face.base + "/v1/chat/completions", {**chat, "return_meta_info": True})
    assert status == 400
    assert json.loads(text)["message"] == (
        "return_meta_info is not supported with streaming. Please set stream=false when using return_meta_info=true."
    )
    status, _ = await _post(face.base + "/v1/chat/completions", {**chat, **SGLangAdapter.request_extras()})
    assert status == 200


async def test_sse_shape_and_sglext_on_completions(launch: Launcher) -> None:
    face = launch.start(*STEPS3, *FAST)
    body = {
        "prompt": PROMPT_128, "max_tokens": 32, "temperature": 0, "ignore_eos": True, "stream": True,
        "stream_options": {"include_usage": True}, "return_spec_tokens_details": True,
    }  # fmt: skip
    status, text = await _post(face.base + "/v1/completions", body)
    assert status == 200
    events = [e.removeprefix("data: ") for e in text.split("\n\n") if e]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert all(c["object"] == "text_completion" for c in chunks)
    usage_chunk = chunks[-1]
    assert usage_chunk["choices"] == [] and usage_chunk["usage"]["completion_tokens"] == 32
    details = usage_chunk["sglext"]["spec_tokens_details"]
    keys = ("spec_verify_ct", "spec_num_correct_drafts", "spec_num_proposed_drafts", "spec_accept_length")
    assert all(k in details for k in keys)
    assert details["spec_accept_length"] == pytest.approx(32 / details["spec_verify_ct"])
    assert chunks[-2]["choices"][0]["finish_reason"] == "length"
    assert "".join(c["choices"][0]["text"] for c in chunks[:-1]) == "tok " * 32


async def test_stream_false_and_natural_eos_and_bad_requests(launch: Launcher) -> None:
    face = launch.start(*STEPS3, "--time-scale", "200", "--startup-s", "0")
    chat = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 20, "temperature": 0, "ignore_eos": True}
    status, text = await _post(face.base + "/v1/chat/completions", {**chat, "return_meta_info": True})
    body = json.loads(text)
    assert status == 200 and body["object"] == "chat.completion" and body["usage"]["completion_tokens"] == 20
    choice = body["choices"][0]
    assert choice["message"]["content"] == "tok " * 20 and choice["finish_reason"] == "length"
    assert choice["meta_info"]["completion_tokens"] == 20 and choice["meta_info"]["spec_verify_ct"] > 0
    status, text = await _post(face.base + "/v1/completions", {"prompt": "hi", "max_tokens": 4000, "temperature": 0})
    body = json.loads(text)
    assert body["choices"][0]["finish_reason"] == "stop" and body["usage"]["completion_tokens"] < 4000
    status, text = await _post(face.base + "/v1/chat/completions", {"max_tokens": 3})
    assert status == 400 and "messages" in json.loads(text)["message"]


# -- faults while serving ----------------------------------------------------------------------------
async def test_hang_and_slow_start(launch: Launcher) -> None:
    hung = launch.start(*STEPS3, "--hang", "--startup-s", "0", wait="listen")
    slow = launch.start(*STEPS3, "--slow-start", "1.2", "--startup-s", "0", wait="listen")
    spawned = time.monotonic()
    assert _status(slow.base + "/health") == 503
    wait_for(lambda: _status(slow.base + "/health") == 200, timeout_s=20, what="slow start over")
    assert time.monotonic() - spawned > 0.5
    assert _status(hung.base + "/health") == 503 and hung.proc.poll() is None


async def test_stalled_stream_hits_the_client_timeout(launch: Launcher) -> None:
    face = launch.start(*STEPS3, *FAST, "--stall-stream-after", "5")
    async with StreamingClient(face.base, timeout_s=1.0) as client:
        record = await client.send(_chat(64), Sampling(temperature=0.0, ignore_eos=True))
    assert record.error == "timeout after 1.0 s"
    assert 5 <= record.output_text.count("tok") < 64
    assert _status(face.base + "/health") == 200  # the server is alive, only the stream stalled


async def test_malformed_sse_is_a_client_error(launch: Launcher) -> None:
    face = launch.start(*STEPS3, *FAST, "--malformed-sse")
    async with StreamingClient(face.base) as client:
        record = await client.send(_chat(16), Sampling(temperature=0.0, ignore_eos=True))
    assert record.error is not None and record.error.startswith("malformed SSE data")


async def test_crash_after_n_completed_requests(launch: Launcher) -> None:
    face = launch.start(*STEPS3, *FAST, "--crash-after", "2")
    async with StreamingClient(face.base) as client:
        for _ in range(2):
            assert (await client.send(_chat(8), Sampling(temperature=0.0, ignore_eos=True))).ok
        assert face.proc.wait(timeout=10) == 1
        after = await client.send(_chat(8), Sampling(temperature=0.0, ignore_eos=True))
    assert after.error is not None and after.error.startswith("connection error")
    assert "simulated crash after 2 completed requests" in face.log_text()


# -- agreement with the virtual-time face --------------------------------------------------------------
TIME_SCALE = 2.0
"""Each request's modelled timeline is served 2x faster; ~3 s of wall time for this cell (see below)."""


@pytest.mark.slow
async def test_http_face_agrees_with_virtual_face(launch: Launcher) -> None:
    """Seed profile, steps 3, C = 4, 32 requests, greedy ignore_eos, 128 in / 128 out.

    A real client needs a moment (here ~1-2 ms of wall time) to send its next request after the previous
    one ended, so that request misses the decode step starting at that instant and waits one cycle
    (~18 ms): the virtual face with a zero client gap is ~2.5-3 % faster on aggregate tok/s. Against a
    virtual client that pauses less than one cycle (1 ms here, the same outcome for any gap below ~18 ms)
    the two faces agree within 1 % at time scale <= 2; above that the client's turnaround, multiplied
    by the scale, spans more than one cycle and agreement degrades (about -2 % at 5x, -4 to -7 % at 10x).
    """
    face = launch.start(*STEPS3, "--time-scale", str(TIME_SCALE), "--startup-s", "0", "--seed", "3")
    prompt = Prompt("p", "synthetic", "chat", 128, messages=(("user", PROMPT_128),))
    async with StreamingClient(face.base) as client:
        records = await run_closed_loop(
            client, [prompt], Sampling(temperature=0.0, ignore_eos=True), concurrency=4, num_requests=32
        )
    served = cell_metrics(records)
    assert served.errors == 0 and served.output_tokens == 32 * 128
    assert served.aggregate_tok_s is not None and served.per_request_tok_s_p50 is not None
    aggregate, p50 = served.aggregate_tok_s / TIME_SCALE, served.per_request_tok_s_p50 / TIME_SCALE

    def virtual(gap_ms: float) -> tuple[float, float]:
        m = cell_metrics(
            simulate_cell(
                load_profile(SEED), SimSetting("EAGLE3", 3, 1), concurrency=4, num_requests=32,
                workload="synthetic", temperature=0.0, ignore_eos=True, input_tokens=128, max_tokens=128,
                seed=3, client_gap_ms=gap_ms,
            )
        )  # fmt: skip
        assert m.aggregate_tok_s is not None and m.per_request_tok_s_p50 is not None
        return m.aggregate_tok_s, m.per_request_tok_s_p50

    v_aggregate, v_p50 = virtual(1.0)
    assert aggregate == pytest.approx(v_aggregate, rel=0.03)
    assert p50 == pytest.approx(v_p50, rel=0.03)
    ideal_aggregate, ideal_p50 = virtual(0.0)
    assert aggregate == pytest.approx(ideal_aggregate, rel=0.05)
    assert p50 == pytest.approx(ideal_p50, rel=0.05)


async def test_a_scheduler_loop_that_fails_takes_the_face_down(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The done-callback every face puts on its scheduler loop: a failure is logged under the loop's name and
    the process exits 1 (as SGLang's scheduler does); a loop that ends or is cancelled exits nothing."""
    from specfrontier.sim.http_face import exit_when_it_fails

    exits: list[int] = []
    monkeypatch.setattr(os, "_exit", exits.append)

    async def fails() -> None:
        raise RuntimeError("boom")

    async def ends() -> None:
        return None

    callback = exit_when_it_fails("executor loop")
    for coro in (fails(), ends()):
        task = asyncio.create_task(coro)
        await asyncio.gather(task, return_exceptions=True)
        callback(task)
    assert exits == [1]
    assert "ERROR executor loop failed: RuntimeError('boom')" in capsys.readouterr().err


def test_crash_due_counts_answered_requests_and_crashes_once_per_marker_file(tmp_path: Path) -> None:
    """Both faces (ours and the SGLang double's scheduler) crash through `crash_due`: never without a limit,
    from the limit on, and with a marker file only the first time (a resumed run's relaunch serves on)."""
    from specfrontier.sim.http_face import crash_due

    assert not crash_due(10**6, None, None)
    assert not crash_due(2, 3, None) and crash_due(3, 3, None) and crash_due(4, 3, None)
    marker = tmp_path / "crashed-once"
    assert not crash_due(2, 3, str(marker)) and not marker.exists()
    assert crash_due(3, 3, str(marker)) and marker.read_text(encoding="utf-8") == "crashed once\n"
    assert not crash_due(3, 3, str(marker))
