"""TensorRT-LLM adapter: settings checked before launch, the options file per setting (keys spelled as
TensorRT-LLM's llm_args.py spells them), the argv with probed spellings, and the readers of a running
trtllm-serve: iteration stats drained on every GET /metrics, kept as a running total per server.

The iteration-stats sample (tests/data/trtllm_iteration_stats.json) is built from the field names of
TensorRT-LLM's `IterationStats` (cpp/include/tensorrt_llm/executor/types.h, serialised camelCase by
`to_json_str`) as the PyTorch executor fills them (`PyExecutor._update_iter_stats`); it is not a recording
of a real server, which this project has never run. The simulator face that speaks trtllm-serve is tested
at the end and, live, by the engine contract suite.
"""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml
from aiohttp import web

from builders import serving
from specfrontier.config.load import load_config, parse_config
from specfrontier.engines.trtllm import (
    DEFAULT_STATS_CAP,
    TrtllmAdapter,
    TrtllmEngine,
    TrtllmSetting,
    _Tally,
    capacity_from_iteration,
    fold_iterations,
    llm_api_options,
    stats_cap,
)
from specfrontier.errors import ConfigError, DependencyError, EngineResponseError
from specfrontier.perfmodel.cells import setting_params
from specfrontier.sim.trtllm_face import IterationLog
from specfrontier.sim.trtllm_serve import build_parser, make_config, resolve_speculation

ROOT = Path(__file__).resolve().parents[3]
SAMPLE = json.loads((ROOT / "tests/data/trtllm_iteration_stats.json").read_text())

# Excerpts in the shape of click's `trtllm-serve serve --help` (tensorrt_llm/commands/serve.py @00209af),
# and of an older release that has only --extra_llm_api_options and the long TP spelling.
HELP = """Usage: trtllm-serve serve [OPTIONS] MODEL
  --host TEXT                     :tag:`beta` Hostname of the server.
  --port INTEGER                  :tag:`beta` Port of the server.
  --backend [pytorch|tensorrt|_autodeploy]
  --max_batch_size INTEGER        :tag:`beta` Maximum number of requests that the engine can schedule.
  --max_num_tokens INTEGER        --max_seq_len INTEGER
  --tensor_parallel_size, --tp_size INTEGER
  --free_gpu_memory_fraction, --kv_cache_free_gpu_memory_fraction FLOAT
  --config, --extra_llm_api_options TEXT
"""
OLD_HELP = """Usage: trtllm-serve [OPTIONS] MODEL
  --host TEXT  --port INTEGER  --backend [pytorch|tensorrt]  --max_batch_size INTEGER
  --tensor_parallel_size INTEGER  --kv_cache_free_gpu_memory_fraction FLOAT  --extra_llm_api_options TEXT
"""
ENGINE = TrtllmEngine(model="/models/llama", speculative_model="/models/eagle3")
EAGLE3 = TrtllmSetting(name="e3", decoding_type="Eagle3", max_draft_len=3)


@pytest.fixture(autouse=True)
def _fresh_tallies() -> None:
    """The running totals are kept per URL on the class: no test sees another's (ports are reused)."""
    TrtllmAdapter._tallies.clear()


def _flags(argv: list[str]) -> dict[str, str]:
    return {a: argv[i + 1] for i, a in enumerate(argv[:-1]) if a.startswith("--")}


def _setting_error(**fields: Any) -> str:
    with pytest.raises(ValueError) as info:
        TrtllmSetting(name="s", **fields)
    return str(info.value)


# -- settings -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        (
            {"max_draft_len": 3},
            ["settings[s]: max_draft_len needs a speculative decoding_type", "fix: set decoding_type"],
        ),
        ({"decoding_type": "Eagle3"}, ["decoding_type = Eagle3 needs max_draft_len", "fix: set max_draft_len"]),
        (
            {"decoding_type": "Eagle3", "max_draft_len": 2, "max_matching_ngram_size": 3},
            ["max_matching_ngram_size is an NGram option but decoding_type = Eagle3", "fix: remove"],
        ),
        (
            {"decoding_type": "NGram", "max_draft_len": 2, "eagle3_one_model": True},
            ["eagle3_one_model is an Eagle3 option", "fix: remove eagle3_one_model"],
        ),
        (
            {"extra_options": {"speculative_config": {"decoding_type": "Eagle3"}}},
            ["extra_options.speculative_config", "fix: set decoding_type"],
        ),
        (
            {"extra_options": {"return_perf_metrics": True}},
            ["return_perf_metrics = true", "drains the iteration stats", "fix: remove it"],
        ),
        (
            {"extra_options": {"max_batch_size": 8}},
            ["extra_options.max_batch_size", "fix: set the setting's max_batch_size"],
        ),
        ({"extra_options": {"enable_iter_perf_stats": False}}, ["always writes true", "fix: remove it"]),
    ],
)
def test_settings_are_checked_with_the_field_and_the_fix(fields: dict[str, Any], expected: list[str]) -> None:
    message = _setting_error(**fields)
    for part in expected:
        assert part in message, message


def test_eagle3_and_draft_target_need_the_engines_draft_model() -> None:
    for kind in ("Eagle3", "DraftTarget"):
        data = {
            "engine": {"name": "trtllm", "model": "/m"},
            "settings": [{"name": "b"}, {"name": "s", "decoding_type": kind, "max_draft_len": 2}],
        }
        with pytest.raises(ConfigError) as info:
            parse_config(data)
        assert f"decoding_type = {kind} needs a draft model" in str(info.value)
        assert "fix: set engine.speculative_model" in str(info.value)
    ngram = {"name": "n", "decoding_type": "NGram", "max_draft_len": 3}
    parse_config({"engine": {"name": "trtllm", "model": "/m"}, "settings": [{"name": "b"}, ngram]})


def test_engine_options_refuse_keys_that_flags_own() -> None:
    with pytest.raises(ValueError, match=r"engine.extra_options.tensor_parallel_size.*fix: set engine.tp_size"):
        TrtllmEngine(model="/m", extra_options={"tensor_parallel_size": 2})
    with pytest.raises(ValueError, match=r"kv_cache_config replaces .*fix: put free_gpu_memory_fraction inside"):
        TrtllmEngine(model="/m", kv_cache_free_gpu_memory_fraction=0.8, extra_options={"kv_cache_config": {}})


def test_a_setting_answers_for_itself_and_reads_through_the_merged_names() -> None:
    assert EAGLE3.speculative and EAGLE3.depth == 3 and EAGLE3.drafter == "Eagle3"
    deeper = EAGLE3.with_depth(5, "e5")
    assert deeper.max_draft_len == 5 and deeper.ladder_parameters() == EAGLE3.ladder_parameters()
    params = setting_params(EAGLE3.parameters())
    assert params.speculative and params.steps == 3 and params.family == "Eagle3"
    assert not TrtllmSetting(name="b").speculative and TrtllmSetting(name="b").depth is None
    assert hash(TrtllmSetting(name="x", extra_options={"a": {"b": 1}})) == hash(
        TrtllmSetting(name="x", extra_options={"a": {"b": 1}})
    )


# -- the options file and the command -------------------------------------------------------------------


def test_options_file_per_setting_spells_keys_as_llm_args_does() -> None:
    assert llm_api_options(TrtllmSetting(name="b"), ENGINE) == {"enable_iter_perf_stats": True}
    assert llm_api_options(EAGLE3, ENGINE)["speculative_config"] == {
        "decoding_type": "Eagle3",
        "max_draft_len": 3,
        "speculative_model": "/models/eagle3",
    }
    one = TrtllmSetting(name="o", decoding_type="Eagle3", max_draft_len=2, eagle3_one_model=True)
    assert llm_api_options(one, ENGINE)["speculative_config"]["eagle3_one_model"] is True
    ngram = TrtllmSetting(
        name="n", decoding_type="NGram", max_draft_len=4, max_matching_ngram_size=3, is_keep_all=False,
        is_use_oldest=True, is_public_pool=False,
    )  # fmt: skip
    assert llm_api_options(ngram, ENGINE)["speculative_config"] == {
        "decoding_type": "NGram",
        "max_draft_len": 4,
        "max_matching_ngram_size": 3,
        "is_keep_all": False,
        "is_use_oldest": True,
        "is_public_pool": False,
    }  # no speculative_model: NGram drafts from the context
    mtp = llm_api_options(TrtllmSetting(name="m", decoding_type="MTP", max_draft_len=3), ENGINE)["speculative_config"]
    assert mtp == {"decoding_type": "MTP", "max_draft_len": 3, "num_nextn_predict_layers": 3}
    draft = TrtllmSetting(name="d", decoding_type="DraftTarget", max_draft_len=5)
    assert llm_api_options(draft, ENGINE)["speculative_config"]["speculative_model"] == "/models/eagle3"


def test_extra_options_merge_engine_then_setting_and_keep_ours() -> None:
    engine = TrtllmEngine(
        model="/m", extra_options={"cuda_graph_config": {"enable_padding": True, "max_batch_size": 8}}
    )
    setting = TrtllmSetting(
        name="b", extra_options={"cuda_graph_config": {"max_batch_size": 16}, "print_iter_log": True}
    )
    assert llm_api_options(setting, engine) == {
        "cuda_graph_config": {"enable_padding": True, "max_batch_size": 16},
        "print_iter_log": True,
        "enable_iter_perf_stats": True,
    }


def test_command_binds_loopback_and_points_at_the_written_options_file() -> None:
    adapter = TrtllmAdapter(TrtllmEngine(model="/m/llama", speculative_model="/m/e3", tp_size=2), help_text=HELP)
    adapter.prepare((TrtllmSetting(name="b"), EAGLE3))
    argv = adapter.command(EAGLE3, port=30001, max_concurrency=16)
    assert argv[:2] == ["trtllm-serve", "/m/llama"]
    flags = _flags(argv)
    assert flags["--host"] == "127.0.0.1" and flags["--port"] == "30001" and flags["--backend"] == "pytorch"
    assert flags["--max_batch_size"] == "16"  # the sweep's highest concurrency when the setting sets none
    assert flags["--tp_size"] == "2" and "--config" in flags and "--extra_llm_api_options" not in flags
    written = yaml.safe_load(Path(flags["--config"]).read_text())
    assert written == llm_api_options(EAGLE3, adapter.options)
    capped = TrtllmSetting(name="c", max_batch_size=48)
    assert _flags(adapter.command(capped, port=1, max_concurrency=4))["--max_batch_size"] == "48"


def test_older_spellings_are_probed_from_help() -> None:
    engine = TrtllmEngine(model="/m", tp_size=4, kv_cache_free_gpu_memory_fraction=0.8, max_seq_len=8192)
    adapter = TrtllmAdapter(engine, help_text=OLD_HELP)
    adapter.prepare((TrtllmSetting(name="b"),))
    flags = _flags(adapter.command(TrtllmSetting(name="b"), port=2, max_concurrency=1))
    assert flags["--tensor_parallel_size"] == "4" and flags["--kv_cache_free_gpu_memory_fraction"] == "0.8"
    assert "--extra_llm_api_options" in flags and flags["--max_seq_len"] == "8192"


def test_a_server_without_the_needed_options_is_refused_before_launch() -> None:
    adapter = TrtllmAdapter(ENGINE, help_text="Usage: trtllm-serve [OPTIONS] MODEL\n  --host TEXT  --port INTEGER\n")
    with pytest.raises(ConfigError) as info:
        adapter.prepare((TrtllmSetting(name="b"),))
    assert "--backend" in str(info.value) and "--config/--extra_llm_api_options" in str(info.value)
    assert "fix: install a TensorRT-LLM" in str(info.value)


def test_prepare_probes_the_serve_subcommands_help(tmp_path: Path) -> None:
    """`trtllm-serve --help` shows the click group; the options are under `serve --help`."""
    script = tmp_path / "fake_serve.py"
    script.write_text(f"import sys\nassert sys.argv[1:] == ['serve', '--help'], sys.argv\nprint({HELP!r})\n")
    adapter = TrtllmAdapter(TrtllmEngine(model="/m", launcher=(sys.executable, str(script))))
    adapter.prepare((TrtllmSetting(name="b"),))
    assert adapter.command(TrtllmSetting(name="b"), port=3, max_concurrency=1)[:3] == [
        sys.executable,
        str(script),
        "/m",
    ]
    missing = TrtllmAdapter(TrtllmEngine(model="/m", binary="no-such-trtllm-serve-here"))
    with pytest.raises(DependencyError, match="fix: install TensorRT-LLM"):
        missing.prepare((TrtllmSetting(name="b"),))


# -- iteration stats: draining, running totals, capacity -------------------------------------------------


def test_counters_are_sums_over_the_iterations_of_one_read() -> None:
    tally = _Tally()
    batch = fold_iterations(tally, list(SAMPLE))
    assert batch.lost == 0 and tally.iterations == 4 and tally.last_iter == 10
    assert (tally.drafted, tally.accepted, tally.steps) == (27, 14, 9)  # TensorRT-LLM's AL: (14 + 9) / 9
    again = fold_iterations(tally, [])  # the next read of an idle server: nothing new, nothing lost
    assert again.lost == 0 and (tally.drafted, tally.accepted, tally.steps) == (27, 14, 9)


def test_a_full_read_that_skips_iterations_is_a_loss_and_a_restart_starts_over() -> None:
    tally = _Tally(cap=4)
    fold_iterations(tally, [{"iter": 1, "specDecodingStats": None}])
    full = [{"iter": i, "specDecodingStats": {"numDraftTokens": 3}} for i in range(6, 11)]
    assert fold_iterations(tally, full).lost == 4  # iterations 2-5 were dropped by the server's cap
    short_gap = _Tally(cap=DEFAULT_STATS_CAP)
    fold_iterations(short_gap, [{"iter": 1}])
    assert fold_iterations(short_gap, [{"iter": 5}]).lost == 0  # not full: `iter` need not be contiguous
    fold_iterations(tally, [{"iter": 0, "specDecodingStats": {"numDraftTokens": 2}}])  # a new server
    assert tally.drafted == 2 and tally.last_iter == 0
    assert stats_cap({"max_stats_len": -1}) is None and stats_cap({}) == DEFAULT_STATS_CAP


def test_capacity_names_its_field_and_the_kv_pool() -> None:
    cap = capacity_from_iteration(SAMPLE[-1])
    assert cap.max_running_requests == 64
    assert cap.source.startswith("trtllm-serve /metrics maxNumActiveRequests; KV pool 21504 blocks x 32 tokens")
    runtime = capacity_from_iteration({"maxNumActiveRequests": 0, "maxBatchSizeRuntime": 12})
    assert runtime.max_running_requests == 12 and runtime.source == "trtllm-serve /metrics maxBatchSizeRuntime"
    with pytest.raises(EngineResponseError, match="did not say its capacity"):
        capacity_from_iteration({"iter": 3})


class FakeServer:
    """/metrics answers the queued bodies one GET at a time (then []), as a server that drains on read."""

    def __init__(
        self, bodies: list[Any], *, models: Any = None, version: Any = None, extra: dict[str, Any] | None = None
    ):
        self.bodies = list(bodies)
        self.models = models
        self.version = version
        self.extra = extra or {}
        self.completions = 0

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/metrics", self._metrics)
        if self.models is not None:
            app.router.add_get("/v1/models", self._json(self.models))
        if self.version is not None:
            app.router.add_get("/version", self._json(self.version))
        for path, body in self.extra.items():
            app.router.add_get(path, self._json(body))
        app.router.add_post("/v1/completions", self._complete)
        return app

    @staticmethod
    def _json(body: Any) -> Callable[[web.Request], Any]:
        async def handler(_request: web.Request) -> web.Response:
            return web.json_response(body)

        return handler

    async def _metrics(self, _request: web.Request) -> web.Response:
        return web.json_response(self.bodies.pop(0) if self.bodies else [])

    async def _complete(self, _request: web.Request) -> web.Response:
        self.completions += 1
        self.bodies.append([SAMPLE[0]])
        return web.json_response({"choices": [{"text": "x"}]})


async def _served(fake: FakeServer) -> AsyncIterator[str]:
    async with serving(fake.app()) as root:
        yield root.rstrip("/")


async def test_window_counters_are_a_running_total_across_draining_reads() -> None:
    first, second = SAMPLE[:2], SAMPLE[2:]
    fake = FakeServer([[], first, second, []])
    async for root in _served(fake):
        async with aiohttp.ClientSession() as session:
            assert await TrtllmAdapter.spec_counters(session, root) is None  # no iteration reported yet
            before = await TrtllmAdapter.spec_counters(session, root)
            after = await TrtllmAdapter.spec_counters(session, root)
            idle = await TrtllmAdapter.spec_counters(session, root)
    assert before is not None and after is not None and idle is not None
    window = after.minus(before)
    assert (window.draft_tokens, window.accepted_tokens, window.verify_steps) == (18, 9, 6)  # iterations 9-10
    assert idle == after  # a read of nothing new changes nothing


async def test_a_read_that_lost_iterations_gives_no_counters() -> None:
    full = [
        {"iter": i, "specDecodingStats": {"numDraftTokens": 3, "numRequestsWithDraftTokens": 1}}
        for i in range(50, 1051)
    ]
    fake = FakeServer([[SAMPLE[0]], full])
    async for root in _served(fake):
        async with aiohttp.ClientSession() as session:
            assert await TrtllmAdapter.spec_counters(session, root) is not None
            assert await TrtllmAdapter.spec_counters(session, root) is None


async def test_metrics_entries_may_be_json_strings_and_must_be_a_list() -> None:
    fake = FakeServer([[json.dumps(e) for e in SAMPLE], {"not": "a list"}])
    async for root in _served(fake):
        async with aiohttp.ClientSession() as session:
            counters = await TrtllmAdapter.spec_counters(session, root)
            assert counters is not None and counters.draft_tokens == 27
            with pytest.raises(EngineResponseError, match="expected a JSON list"):
                await TrtllmAdapter.spec_counters(session, root)


async def test_capacity_starts_a_fresh_total_and_makes_an_iteration_when_there_is_none() -> None:
    fake = FakeServer([[]], models={"data": [{"id": "llama", "owned_by": "tensorrt_llm"}]})
    adapter = TrtllmAdapter(ENGINE, help_text=HELP)
    async for root in _served(fake):
        async with aiohttp.ClientSession() as session:
            TrtllmAdapter._tallies[root] = _Tally(drafted=99, iterations=5)
            cap = await adapter.capacity(session, root, EAGLE3)
            counters = await TrtllmAdapter.spec_counters(session, root)
    assert fake.completions == 1 and cap.max_running_requests == 64 and "maxNumActiveRequests" in cap.source
    assert counters is not None and counters.draft_tokens == 0  # the old total is gone


async def test_capacity_says_plainly_when_the_server_reports_no_stats(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("specfrontier.engines.trtllm.CAPACITY_POLL_S", 0.0)
    fake = FakeServer([], models={"data": [{"id": "llama", "owned_by": "tensorrt_llm"}]})
    fake._complete = _complete_without_stats  # type: ignore[method-assign]
    async for root in _served(fake):
        async with aiohttp.ClientSession() as session:
            with pytest.raises(EngineResponseError, match="no iteration stats after a generation"):
                await TrtllmAdapter(ENGINE, help_text=HELP).capacity(session, root, EAGLE3)


async def _complete_without_stats(_request: web.Request) -> web.Response:
    return web.json_response({"choices": [{"text": "x"}]})


TRTLLM_MODELS = {"object": "list", "data": [{"id": "llama", "object": "model", "owned_by": "tensorrt_llm"}]}


async def test_detect_recognises_trtllm_serve_and_reports_missing_stats_plainly() -> None:
    fake = FakeServer([[]], models=TRTLLM_MODELS, version={"version": "1.2.0"})
    async for root in _served(fake):
        async with aiohttp.ClientSession() as session:
            detected = await TrtllmAdapter.detect(session, root)
    assert detected is not None and detected.version == "TensorRT-LLM 1.2.0" and detected.capacity is None
    assert detected.capacity_source.startswith("unknown (trtllm-serve /metrics had no iteration stats")
    fake = FakeServer([list(SAMPLE)], models=TRTLLM_MODELS, version={"version": "1.2.0"})
    async for root in _served(fake):
        async with aiohttp.ClientSession() as session:
            detected = await TrtllmAdapter.detect(session, root)
    assert detected is not None and detected.capacity is not None and detected.capacity.max_running_requests == 64


@pytest.mark.parametrize(
    "fake",
    [
        FakeServer(
            [], models={"data": [{"id": "m", "owned_by": "sglang"}]}, extra={"/server_info": {"version": "0.5"}}
        ),
        FakeServer([], models={"data": [{"id": "m", "owned_by": "llamacpp"}]}, extra={"/props": {"total_slots": 4}}),
        FakeServer([], models={"data": [{"id": "m", "owned_by": "vllm"}]}, version={"version": "0.11.0"}),
        FakeServer([], models={"data": [{"id": "m"}]}),
        FakeServer([], models={"data": [{"id": "m", "owned_by": "tensorrt_llm"}]}),  # no /version: not claimed
    ],
    ids=["sglang", "llamacpp", "vllm", "plain-openai", "no-version"],
)
async def test_detect_never_claims_another_engine(fake: FakeServer) -> None:
    async for root in _served(fake):
        async with aiohttp.ClientSession() as session:
            assert await TrtllmAdapter.detect(session, root) is None


def test_streams_carry_no_per_request_draft_counts() -> None:
    assert TrtllmAdapter.request_spec_stats({"choices": [{"avg_decoded_tokens_per_iter": 2.5}]}) is None


def test_the_example_config_validates() -> None:
    config = load_config(ROOT / "examples/trtllm.yaml")
    assert config.engine.name == "trtllm" and any(not s.speculative for s in config.settings)
    assert {s.decoding_type for s in config.settings} == {None, "Eagle3", "NGram"}


# -- the simulator face that speaks trtllm-serve (a MODEL) ----------------------------------------------


def test_face_maps_chains_and_refuses_what_it_cannot_model() -> None:
    chain = resolve_speculation({"decoding_type": "Eagle3", "max_draft_len": 3, "speculative_model": "/d"}, 8)
    assert (chain.speculative, chain.num_steps, chain.num_draft_tokens, chain.max_running_requests) == (True, 3, 4, 8)
    assert resolve_speculation({"decoding_type": "MTP", "num_nextn_predict_layers": 2}, 8).num_steps == 2
    assert not resolve_speculation(None, 8).speculative
    for spec, message in [
        ({"decoding_type": "NGram", "max_draft_len": 3}, "models only draft chains"),
        ({"decoding_type": "Eagle3", "max_draft_len": 3}, "Draft model must be provided for EAGLE"),
        ({"decoding_type": "Eagle3", "max_draft_len": 0, "speculative_model": "/d"}, "max_draft_len must be > 0"),
        (
            {"decoding_type": "Eagle3", "max_draft_len": 4, "use_dynamic_tree": True, "dynamic_tree_max_topK": 4},
            "not an Eagle3 tree",
        ),
    ]:
        with pytest.raises(ConfigError, match=message):
            resolve_speculation(spec, 8)


def test_face_reads_the_adapters_argv_and_options_file() -> None:
    adapter = TrtllmAdapter(ENGINE, help_text=HELP)
    argv = adapter.command(EAGLE3, port=4, max_concurrency=6)
    args = build_parser().parse_args(argv[1:])
    config = make_config(args)
    assert config.max_batch_size == 6 and config.iter_perf_stats and config.max_stats_len == DEFAULT_STATS_CAP
    assert config.base.setting.num_steps == 3 and not config.drain_on_completion


def test_face_iteration_log_drains_and_drops_the_oldest() -> None:
    log = IterationLog(enabled=True, max_len=2)
    for i in range(5):
        log.append({"iter": i})
    assert [e["iter"] for e in log.drain()] == [2, 3, 4] and log.drain() == []  # max_len + 1, as PyExecutor
    off = IterationLog(enabled=False, max_len=None)
    off.append({"iter": 0})
    assert off.drain() == [] and off.iterations == 1


async def test_sglang_does_not_take_the_server_info_of_a_newer_trtllm_serve_for_its_own() -> None:
    """Newer trtllm-serve also answers `GET /server_info`; `bench --url` asks SGLang first, which must not
    claim a server whose /server_info holds none of SGLang's resolved server args."""
    from specfrontier.engines.sglang import SGLangAdapter

    info = {"version": "1.3.0", "disaggregated_params": None}
    fake = FakeServer([list(SAMPLE)], models=TRTLLM_MODELS, version={"version": "1.3.0"}, extra={"/server_info": info})
    async for root in _served(fake):
        async with aiohttp.ClientSession() as session:
            assert await SGLangAdapter.detect(session, root) is None
            assert await TrtllmAdapter.detect(session, root) is not None
