"""llama.cpp under the engine contract: the real llama-server (marker `engine`: scripts/install.sh builds it)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, ClassVar

import pytest

from contract.engine_contract import LiveEngineContract
from specfrontier.config.load import parse_config
from specfrontier.engines.llamacpp import LlamaCppAdapter, packaged_smollm2
from specfrontier.engines.registry import vocabulary
from specfrontier.perfmodel.cells import setting_params
from specfrontier.process.launch import ServerProcess, free_port, group_alive


@pytest.mark.engine
class TestLlamaCppContract(LiveEngineContract):
    engine = "llamacpp"
    options: ClassVar[dict[str, Any]] = {"name": "llamacpp", "ctx_size": 2048}
    baseline: ClassVar[dict[str, Any]] = {"name": "baseline"}
    speculative: ClassVar[dict[str, Any]] = {
        "name": "ngram",
        "spec_type": "ngram-simple",
        "ngram_size_n": 3,
        "ngram_size_m": 8,
    }


SYNTHETIC_DEPTH = re.compile(r"synthetic acceptance: n_max = (\d+)")
"""llama-server's log line with `--spec-synth-len`: the `common_speculative_n_max` of its speculative setup."""

DEPTH_SETTINGS: tuple[dict[str, Any], ...] = (
    {"name": "draft-d2", "spec_type": "draft-simple", "draft_n_max": 2},
    {"name": "draft", "spec_type": "draft-simple"},
    {"name": "simple-m8", "spec_type": "ngram-simple", "ngram_size_n": 3, "ngram_size_m": 8},
    {"name": "simple", "spec_type": "ngram-simple"},
    {"name": "map-k-m5", "spec_type": "ngram-map-k", "ngram_size_m": 5},
    {"name": "map-k4v", "spec_type": "ngram-map-k4v"},
    {"name": "mod-12", "spec_type": "ngram-mod", "ngram_mod_n_max": 12},
    {"name": "mod", "spec_type": "ngram-mod"},
    {"name": "cache", "spec_type": "ngram-cache"},
    # the flag the setting refuses, passed verbatim: the server drafts size-m all the same
    {
        "name": "simple-m8-flag",
        "spec_type": "ngram-simple",
        "ngram_size_m": 8,
        "extra_args": ["--spec-draft-n-max", "2"],
    },
    {"name": "cache-flag", "spec_type": "ngram-cache", "extra_args": ["--spec-draft-n-max", "2"]},
)


@pytest.mark.engine
@pytest.mark.slow
async def test_the_depth_we_read_is_the_one_llama_server_drafts(tmp_path: Path) -> None:
    """Every spec type's depth as the model and the cost order read it (`TYPE_DEPTH`) is the draft length the
    real llama-server sets up: with `--spec-synth-len` it logs `common_speculative_n_max` (common/speculative.cpp
    :2396-2430), which is draft_n_max (default 3) only for a draft model; size-m (48), ngram-mod's n-max (64)
    and ngram-cache's fixed 8 for the n-gram types, whatever --spec-draft-n-max says."""
    draft = str(packaged_smollm2())  # any GGUF of the target's vocabulary serves as a draft here
    config = parse_config(
        {
            "engine": {"name": "llamacpp", "ctx_size": 1024, "draft_model": draft},
            "settings": [{"name": "baseline"}, *DEPTH_SETTINGS],
            "store": "x.db",
        }
    )
    adapter = LlamaCppAdapter(config.engine)
    adapter.prepare(config.settings)
    for setting in config.settings[1:]:
        port = free_port()
        argv = [*adapter.command(setting, port=port, max_concurrency=1), "--spec-synth-len", "2"]
        log = tmp_path / f"{setting.name}.log"
        server = ServerProcess(argv, log)
        try:
            server.start()
            await server.wait_ready(f"http://127.0.0.1:{port}/health", timeout_s=adapter.startup_timeout_s)
        finally:
            pgid = server.pid
            server.stop()
        assert pgid is not None and not group_alive(pgid)
        found = SYNTHETIC_DEPTH.search(log.read_text(encoding="utf-8", errors="replace"))
        assert found is not None, f"{setting.name}: no n_max line in {log}"
        drafted = int(found.group(1))
        assert setting_params(setting.parameters()).steps == drafted, setting.name
        assert vocabulary().draft_length_of(setting.parameters()) == drafted, setting.name
        assert setting.depth in (None, drafted), setting.name
