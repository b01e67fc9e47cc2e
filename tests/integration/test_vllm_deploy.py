"""The deployable vLLM command, pasted in a shell as printed, starts a real vLLM (vllm-cpu 0.32.0) with the KV
cache the run was measured with (issue 31 item 2: without VLLM_CPU_KVCACHE_SPACE the server took 20 GiB of
KV cache instead of 1 GiB) and the measured speculation. One launch: ~1-3 minutes on 2 cores (eager)."""

from __future__ import annotations

import json
import re
import urllib.request
from pathlib import Path

import pytest

from builders import free_port, start_printed_command, stop_group
from specfrontier.engines.vllm import (
    VllmAdapter,
    VllmEngine,
    VllmSetting,
    intel_openmp_library,
    resolve_model,
    resolve_python,
)
from specfrontier.errors import DependencyError

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

KV_BYTES_PER_TOKEN = 2 * 30 * 3 * 64 * 2
"""SmolLM2-135M: K and V x 30 layers x 3 KV heads x head size 64 x 2 bytes (bf16)."""


def test_printed_command_starts_vllm_with_the_measured_kv_cache_and_speculation() -> None:
    try:
        python = resolve_python(VllmEngine())
        model = resolve_model(VllmEngine(), python)
    except DependencyError as exc:
        pytest.fail(f"{exc} (the vllm tests need the real vLLM)")
    engine = VllmEngine(python=python, model=model, cpu_kvcache_space_gib=1, extra_args=("--enforce-eager",))
    adapter = VllmAdapter(engine)
    setting = VllmSetting(name="ngram-k2", method="ngram", num_speculative_tokens=2, prompt_lookup_max=4,
                          prompt_lookup_min=2)  # fmt: skip
    launched = adapter.command(setting, port=36729, max_concurrency=4)  # as the sweep stores it
    port = free_port()
    deployed = adapter.deployable(setting, launched, host="127.0.0.1", port=port)
    command = deployed.text()
    preload = intel_openmp_library(python)
    assert preload is not None  # scripts/install.sh --vllm: the wheel's dependencies put it in .venv-vllm/lib
    assert command.startswith(f"LD_PRELOAD={preload} VLLM_CPU_KVCACHE_SPACE=1 ")

    server = start_printed_command(command, f"http://127.0.0.1:{port}/health", timeout_s=540)
    try:
        environ = Path(f"/proc/{server.pid}/environ").read_bytes().split(b"\0")
        assert f"LD_PRELOAD={preload}".encode() in environ  # the measured environment, Intel OpenMP included
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as resp:
            metrics = resp.read().decode()
        body = json.dumps({"prompt": "a b c a b c a b c", "max_tokens": 16, "temperature": 0}).encode()
        request = urllib.request.Request(
            f"http://127.0.0.1:{port}/v1/completions", data=body, headers={"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=120) as resp:
            assert json.loads(resp.read())["choices"][0]["text"]
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as resp:
            after = resp.read().decode()
    finally:
        stop_group(server)
    info = next(line for line in metrics.splitlines() if line.startswith("vllm:cache_config_info{"))
    blocks = int(re.search(r'num_gpu_blocks="(\d+)"', info).group(1))  # type: ignore[union-attr]
    block_size = int(re.search(r'block_size="(\d+)"', info).group(1))  # type: ignore[union-attr]
    tokens = blocks * block_size
    assert 0.8 * 2**30 / KV_BYTES_PER_TOKEN < tokens <= 2**30 / KV_BYTES_PER_TOKEN + block_size  # 1 GiB, not 20
    drafts = re.search(r"^vllm:spec_decode_num_drafts_total\{[^}]*\} ([0-9.e+]+)", after, re.MULTILINE)
    assert drafts is not None and float(drafts.group(1)) > 0  # it speculates as measured
