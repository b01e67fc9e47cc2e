"""vLLM's deployable command (issue 31 items 2-3): the recommended and scheduled commands carry every
variable and flag that changes what was measured (VLLM_CPU_KVCACHE_SPACE: without it the CPU backend took
20 GiB of KV cache instead of 1 GiB), leave out what served only the measurement, and say so; `schedule`
starts the server as the run did (`python -m vllm.entrypoints.openai.api_server`, the run's model), not
with the `vllm` console script, which fails on vllm-cpu."""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

from rich.console import Console

from builders import StoredRun, closed_loop_ms
from specfrontier.analysis import load_run
from specfrontier.cli.schedule import run_schedule
from specfrontier.engines.vllm import VllmAdapter, VllmEngine, VllmSetting, VllmTuneConfig
from specfrontier.report import report_json
from specfrontier.report.tables import recommendation_lines
from specfrontier.store import LAUNCH_ENVIRONMENT_KEY, Store

PYTHON = "/opt/venv vllm/bin/python"  # a space in the path: the printed command must quote it
MODEL = "/models/smollm2"
K2 = VllmSetting(name="ngram-k2", method="ngram", num_speculative_tokens=2, prompt_lookup_max=4, prompt_lookup_min=2)
K4 = K2.model_copy(update={"name": "ngram-k4", "num_speculative_tokens": 4})


def _engine(**options: Any) -> VllmEngine:
    return VllmEngine(python=Path(PYTHON), model=MODEL, cpu_kvcache_space_gib=1, **options)


def _split(text: str) -> tuple[dict[str, str], list[str]]:
    """A printed command as the shell reads it: leading NAME=value words are the environment."""
    words = shlex.split(text)
    env = {}
    while words and "=" in words[0] and words[0].split("=")[0].isidentifier():
        name, value = words.pop(0).split("=", 1)
        env[name] = value
    return env, words


def test_the_deployable_command_keeps_what_changes_the_measurement_and_names_what_only_measured() -> None:
    adapter = VllmAdapter(_engine())
    launched = adapter.command(K2, port=36729, max_concurrency=4)
    assert {"--no-enable-prefix-caching", "36729", "127.0.0.1"} <= set(launched)  # the run's own command

    found = adapter.deployable(K2, launched, host=None, port=None)
    env, argv = _split(found.text())
    assert env == {"VLLM_CPU_KVCACHE_SPACE": "1"}  # the KV cache the run was measured with
    assert argv[:5] == [PYTHON, "-m", "vllm.entrypoints.openai.api_server", "--model", MODEL]
    assert argv[argv.index("--max-model-len") + 1] == "2048"
    spec = json.loads(argv[argv.index("--speculative-config") + 1])
    assert spec == {"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_max": 4, "prompt_lookup_min": 2}
    for gone in ("--port", "--host", "--no-enable-prefix-caching", "--max-num-seqs"):
        assert gone not in argv
    note = found.note()
    for said in ("--port 36729", "--host 127.0.0.1", "--no-enable-prefix-caching", "--max-num-seqs 4"):
        assert said in note

    # The setting's own running limit and a prefix cache the user asked for change what is measured: kept.
    own = K2.model_copy(update={"max_num_seqs": 2})
    cached = VllmAdapter(_engine(prefix_caching=True))
    argv = _split(cached.deployable(own, cached.command(own, port=1, max_concurrency=4), host=None, port=None).text())[
        1
    ]
    assert argv[argv.index("--max-num-seqs") + 1] == "2" and "--enable-prefix-caching" in argv

    # The user's address, when configured.
    argv = _split(adapter.deployable(K2, launched, host="0.0.0.0", port=8000).text())[1]
    assert argv[argv.index("--host") + 1] == "0.0.0.0" and argv[argv.index("--port") + 1] == "8000"

    # The suffix drafter runs only with its plugin switched on.
    suffix = VllmSetting(name="sfx", method="suffix", num_speculative_tokens=8)
    env = _split(
        adapter.deployable(suffix, adapter.command(suffix, port=1, max_concurrency=1), host=None, port=None).text()
    )[0]
    assert env == {"ARCTIC_INFERENCE_ENABLED": "1", "VLLM_CPU_KVCACHE_SPACE": "1"}


def _vllm_run(tmp_path: Path) -> Store:
    """A stored vLLM run: k4 wins at C = 1, k2 at C = 4 (a depth schedule 4 -> 2), commands as launched."""
    config = VllmTuneConfig(engine=_engine(), settings=(VllmSetting(name="baseline"), K2, K4), concurrency=(1, 4),
                            repeats=2, store=tmp_path / "s.db")  # fmt: skip
    run = StoredRun(config.store, "vllm", config=config.model_dump(mode="json"))
    adapter = VllmAdapter(config.engine)
    tokens = {"baseline": (10, 10), "ngram-k2": (20, 30), "ngram-k4": (30, 20)}
    for pos, setting in enumerate(config.settings):
        argv = adapter.command(setting, port=36000 + pos, max_concurrency=4)
        run.setting(setting.name, setting.parameters(), speculative=setting.speculative, status="done", command=argv,
                    capacity=4)  # fmt: skip
        for c, per_request in zip((1, 4), tokens[setting.name], strict=True):
            run.repeats(setting.name, c, [closed_loop_ms(c, 8, 1000, per_request)] * 2)
    return run.store


def test_recommended_and_scheduled_commands_carry_the_measured_environment(tmp_path: Path) -> None:
    store = _vllm_run(tmp_path)
    data = load_run(store, store.runs()[0].run_id)
    lines = recommendation_lines(data)
    assert [head.split(": ")[1].split(" (")[0] for head, _, _ in lines] == ["ngram-k4", "ngram-k2"]
    for _head, command, note in lines:
        env, argv = _split(command)
        assert env == {"VLLM_CPU_KVCACHE_SPACE": "1"} and argv[0] == PYTHON and "--port" not in argv
        assert "--no-enable-prefix-caching" in note
    rec = report_json(data)["recommendations"][0]
    assert rec["environment"] == {"VLLM_CPU_KVCACHE_SPACE": "1"} and "36002" in rec["launched_command"]

    console = Console(record=True, width=400)
    run_schedule(data, "vllm", None, None, console)
    text = console.export_text()
    launch = next(line for line in text.splitlines() if line.strip().startswith("launch: "))
    env, argv = _split(launch.strip().removeprefix("launch: "))
    assert env == {"VLLM_CPU_KVCACHE_SPACE": "1"}
    assert argv[:5] == [PYTHON, "-m", "vllm.entrypoints.openai.api_server", "--model", MODEL]  # not `vllm serve`
    spec = json.loads(argv[argv.index("--speculative-config") + 1])
    assert spec["num_speculative_tokens"] == 4 and spec["num_speculative_tokens_per_batch_size"][0][2] == 4
    assert argv.count("--speculative-config") == 1 and "vllm serve" not in text
    store.close()


def test_the_recorded_launch_environment_is_what_the_command_carries(tmp_path: Path) -> None:
    """The sweep records each setting's launch variables; the recommendation prints those, whatever the
    engine options would give today (here: a KV cache of 2 GiB and a preload the run had)."""
    store = _vllm_run(tmp_path)
    run_id = store.runs()[0].run_id
    measured = {"VLLM_CPU_KVCACHE_SPACE": "2", "LD_PRELOAD": "/envs/vllm/lib/libiomp5.so"}
    store.merge_environment(run_id, LAUNCH_ENVIRONMENT_KEY, {"ngram-k4": measured, "ngram-k2": measured})
    data = load_run(store, run_id)
    for _head, command, _note in recommendation_lines(data):
        assert _split(command)[0] == measured
    store.close()
