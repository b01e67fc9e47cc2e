"""Connection reuse against a real llama-server, which closes the connection after every stream.

llama-server b11434 answers `Keep-Alive: timeout=5, max=100` and then closes the socket after a
streamed response, so a client that reuses connections meets a dead socket on its next request. The
client must send that request again on a fresh connection, stop reusing connections after a few such
failures, and lose no request; the llama.cpp adapter asks for no reuse from the start.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from specfrontier.config.load import parse_config
from specfrontier.engines.llamacpp import LlamaCppAdapter
from specfrontier.load.client import StreamingClient
from specfrontier.process.launch import ServerProcess, free_port
from specfrontier.records import Prompt, Sampling
from specfrontier.testing.synthetic_models import SyntheticPair

pytestmark = pytest.mark.engine

PROMPT = Prompt(prompt_id="p", category="test", api="completion", max_tokens=8, text="hello there")


async def test_a_keep_alive_client_loses_no_request_to_llama_servers_closed_connections(
    llama_server: Path, pair_full_acceptance: SyntheticPair, tmp_path: Path
) -> None:
    cfg = parse_config(
        {
            "engine": {"model": str(pair_full_acceptance.target), "threads": 1, "ctx_size": 1024},
            "settings": [{"name": "baseline"}],
            "concurrency": [1],
            "store": str(tmp_path / "unused.db"),
        }
    )
    adapter = LlamaCppAdapter(cfg.engine)  # type: ignore[arg-type]
    adapter.prepare(cfg.settings)  # type: ignore[arg-type]
    assert adapter.keep_alive is False  # what `tune` uses with llama.cpp
    port = free_port()
    argv = adapter.command(cfg.settings[0], port=port, max_concurrency=1)  # type: ignore[arg-type]
    with ServerProcess(argv, tmp_path / "server.log") as server:
        await server.wait_ready(f"http://127.0.0.1:{port}/health", timeout_s=120)
        async with StreamingClient(f"http://127.0.0.1:{port}", timeout_s=60, keep_alive=True) as client:
            records = [await client.send(PROMPT, Sampling(ignore_eos=True)) for _ in range(8)]
    assert [r.error for r in records] == [None] * 8
    assert all(r.completion_tokens == 8 for r in records)
    # Measured: every reused socket was dead, and the third made the client stop reusing (3 of 3 here,
    # every time on an idle machine); a client slow enough to see the close first would not reuse it.
    assert 1 <= client.stale_retries <= 3
    assert client.keep_alive is (client.stale_retries < 3)
