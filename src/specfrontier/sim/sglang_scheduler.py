"""The simulator standing in for SGLang's scheduler process, behind SGLang's own TokenizerManager.

`sim.sglang_frontend` runs SGLang 0.5.23's own `launch_server` with `run_simulated_scheduler` as its
`run_scheduler_process_func` (an injection point of SGLang's launcher, srt/entrypoints/http_server.py:3125).
SGLang starts it in a spawned process with its own scheduler's arguments (`run_scheduler_process`,
srt/managers/scheduler.py:6310), waits for its ready message on the pipe, and talks to it over the same ZMQ
sockets its scheduler uses (srt/managers/scheduler_components/ipc_channels.py): tokenized requests arrive
from the TokenizerManager, token ids go to SGLang's real DetokenizerManager as `BatchTokenIDOutput` (the
fields its scheduler fills, scheduler_components/output_streamer.py:724), and control replies
(`GetInternalStateReq`, for `/server_info`) go back to the TokenizerManager. So SGLang's own code
detokenizes, computes `spec_accept_rate` / `spec_accept_length` (`TokenizerManager.
_calculate_spec_decoding_metrics`) and formats every response; this module decides only what the GPU
would: when each token is ready and how many drafts each verify step accepted, from the simulator core
(`sim.core.ServerCore`, paced against the wall clock by `sim.http_face.Pacer`). What it serves is a MODEL.

The names it uses from SGLang (io_struct messages, `async_sock_send`/`async_sock_recv`, `get_zmq_socket`,
`resolved_view`) are private: they are SGLang 0.5.23's, the version `scripts/install.sh --sglang` pins.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import time
import traceback
from array import array
from typing import Any

from specfrontier.sim.core import ServerCore
from specfrontier.sim.costs import capacity
from specfrontier.sim.http_face import Pacer, crash_due, exit_when_it_fails, log
from specfrontier.sim.profile import SimProfile, load_profile, parse_profile
from specfrontier.sim.serving import DEFAULT_PROFILE
from specfrontier.sim.setting import ResolvedSetting, SimSetting, resolve_setting

ENV_PREFIX = "SPECFRONTIER_SGLANG_SIM_"
"""The simulator's options reach the spawned scheduler through the environment (set by `sglang_frontend`)."""
PLACEHOLDER_TEXT = " tok"
"""Each generated token is the model tokenizer's first token of this text: the model is timing, not language."""
HEALTH_CHECK_PREFIX = "HEALTH_CHECK"
"""Request ids of SGLang's own /health_generate probes (`HEALTH_CHECK_RID_PREFIX`, srt/constants.py:12)."""
INCREMENTAL_OFFSET = 5
"""Prompt tokens the detokenizer gets before the output (SGLang's INIT_INCREMENTAL_DETOKENIZATION_OFFSET,
srt/managers/schedule_batch.py:163), as `Req.init_incremental_detokenize` sends them."""


def declare_torchvision_schemas() -> None:
    """Declare torchvision's `nms` and `qnms` operator schemas, which its C++ library (a CUDA build on the
    registry, unloadable with CPU torch) would declare, so that `import torchvision` (which SGLang's model
    configs import for multimodal transforms) can register their fake kernels; no kernel is ever run."""
    try:
        import torch
    except ImportError:  # not SGLang's environment (specfrontier's own imports every module): nothing to declare
        return
    for op in ("nms", "qnms"):
        with contextlib.suppress(RuntimeError):  # already declared: torchvision's own library loaded
            torch.library.define(f"torchvision::{op}", "(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")


# At import, before anything imports SGLang: the launcher's process and the scheduler process SGLang spawns
# (which imports this module to unpickle its target) both import SGLang's configs, hence torchvision.
declare_torchvision_schemas()


def env_option(name: str, default: str) -> str:
    """One simulator option, from the environment `sglang_frontend` set."""
    return os.environ.get(ENV_PREFIX + name.upper(), default)


def profile_option(value: str) -> SimProfile:
    """`--sim-profile`: a shipped profile's name, or the path of a profile JSON file (`parse_profile`'s checks),
    so a test can serve a deployment of its own (e.g. one whose best depth changes at batch size 2)."""
    if value.endswith(".json") and os.path.isfile(value):
        with open(value, encoding="utf-8") as file:
            return parse_profile(file.read(), source=value)
    return load_profile(value)


def resolved_setting(server_args: Any) -> ResolvedSetting:
    """The setting as SGLang's own start-up hooks resolved it (the reset of an unset --max-running-requests to
    48, NGRAM's breadth as topk and steps 0, the topk-1 chain's num_steps + 1), as the simulator core runs it:
    a topk-1 chain of draft tokens - 1 steps, else a tree of SGLang's topk and draft tokens (NGRAM's steps,
    0 in SGLang, count as 1 here: the core needs a depth)."""
    from sglang.srt.arg_groups.overrides import resolved_view

    view = resolved_view(server_args)
    algorithm = view.speculative_algorithm
    mrr = view.max_running_requests
    if algorithm is None:
        return ResolvedSetting(False, 0, 1, 1, mrr)
    topk = int(view.speculative_eagle_topk or 1)
    draft = int(view.speculative_num_draft_tokens or 2)
    steps = draft - 1 if topk == 1 else int(view.speculative_num_steps or 1)
    head = algorithm if algorithm in ("EAGLE", "EAGLE3") else None  # the profile's draft-head check
    if view.speculative_adaptive:  # still on after SGLang's `_maybe_disable_adaptive`: an EAGLE-family chain
        entries = adaptive_entries(view.speculative_adaptive_config)
        adaptive = SimSetting(algorithm, steps, 1, steps + 1, mrr, entries)
        return resolve_setting(adaptive, spec_default_cap=mrr or 48)
    return ResolvedSetting(True, max(1, steps), topk, draft, mrr, algorithm=head)


def adaptive_entries(path: str | None) -> tuple[tuple[int, tuple[int, ...]], ...]:
    """SGLang's adaptive config file as (batch size, candidate steps) entries; SGLang's own parser
    (`adaptive_spec_params._load_adaptive_config`) has already refused a malformed one at start-up. Without a
    file SGLang uses its built-in default (`DEFAULT_ADAPTIVE_CONFIG`)."""
    from sglang.srt.speculative.adaptive_spec_params import _load_adaptive_config

    _, entries = _load_adaptive_config(path)
    return tuple((lo, tuple(int(d) for d in entry["candidate_steps"])) for lo, entry in sorted(entries.items()))


class _Output:
    """What SGLang's scheduler keeps per request to stream it (`Req`): output ids, what was sent, counters."""

    def __init__(self, request: Any, prompt_ids: list[int]) -> None:
        self.request = request
        self.output_ids: list[int] = []
        self.sent = 0
        self.decode_ids = prompt_ids[max(len(prompt_ids) - INCREMENTAL_OFFSET, 0) :]
        self.read_offset = len(self.decode_ids)
        self.sent_decode_ids = 0
        self.verify_ct = 0
        self.correct = 0
        self.histogram: list[int] = []


class SimulatedScheduler:
    """One spawned scheduler: requests in over ZMQ, the simulator core's steps, token ids out."""

    def __init__(self, server_args: Any, port_args: Any) -> None:
        from sglang.srt.arg_groups.overrides import resolved_view
        from transformers import AutoTokenizer

        self.server_args = server_args
        self.port_args = port_args
        view = resolved_view(server_args)
        self.profile = profile_option(env_option("profile", DEFAULT_PROFILE))
        self.workload = self.profile.workload(env_option("workload", "synthetic"), where="sglang frontend")
        self.time_scale = float(env_option("time_scale", "1.0"))
        self.seed = int(env_option("seed", "0"))
        crash_after = int(env_option("crash_after", "0"))
        self.crash_after = crash_after if crash_after > 0 else None
        self.crash_once_file = env_option("crash_once_file", "") or None
        self.completed = 0
        self.setting = resolved_setting(server_args)
        self.capacity = self.setting.max_running_requests or capacity(self.profile, self.setting)
        self.speculative = self.setting.speculative
        tokenizer = AutoTokenizer.from_pretrained(view.tokenizer_path or view.model_path)
        self.token_id = int(tokenizer.encode(PLACEHOLDER_TEXT, add_special_tokens=False)[0])
        eos = tokenizer.eos_token_id
        self.eos_id = int(eos) if eos is not None else self.token_id
        context: Any = getattr(view, "context_length", None) or getattr(tokenizer, "model_max_length", None)
        self.context_length = min(int(context or 8192), 1 << 20)
        self.started = time.time()
        self.verify_total = 0
        self.accept_total = 0
        self.last_gen_throughput = 0.0
        self._aborted: set[str] = set()
        self._tasks: dict[str, asyncio.Task[None]] = {}

    def init_info(self) -> dict[str, Any]:
        """What SGLang's scheduler hands the launcher once ready (`Scheduler.get_init_info`, scheduler.py:1937)."""
        from sglang.srt.mem_cache.hicache_storage import disabled_l3_layout

        return {
            "status": "ready",
            "max_total_num_tokens": self.capacity * self.context_length,
            "max_req_input_len": self.context_length - 1,
            "startup_time": {"load_weight": 0.0, "kv_cache_allocation": 0.0, "scheduler_e2e": 0.0},
            "hicache_object_layout": disabled_l3_layout("Hierarchical cache is disabled", page_size=1),
        }

    def internal_state(self) -> dict[str, Any]:
        """The scheduler's part of `/server_info` (`SchedulerInternalState.get_internal_state`,
        scheduler_components/internal_state.py:45): the resolved server args, the effective capacity, the last
        throughput and, with speculation, the lifetime average accept length."""
        from sglang.srt.arg_groups.overrides import resolved_view
        from sglang.srt.utils.msgspec_utils import msgspec_to_builtins

        state: dict[str, Any] = dict(vars(resolved_view(self.server_args)))
        state = {k: v for k, v in state.items() if not k.startswith("_") and not callable(v)}
        state.update(
            world_size=1,
            startup_time=time.time() - self.started,
            effective_max_running_requests_per_dp=self.capacity,
            last_gen_throughput=self.last_gen_throughput,
            simulated=True,
            sim_profile=self.profile.name,
            time_scale=self.time_scale,
        )
        if self.speculative and self.verify_total:
            state["avg_spec_accept_length"] = self.accept_total / self.verify_total
        result: dict[str, Any] = msgspec_to_builtins(state)
        return result

    # -- the event loop -------------------------------------------------------------------------
    async def serve(self) -> None:
        """Receive from the TokenizerManager until the process is stopped; one task per request."""
        import zmq
        import zmq.asyncio
        from sglang.srt.managers import io_struct
        from sglang.srt.utils.network import get_zmq_socket

        self._io = io_struct
        context = zmq.asyncio.Context(2)
        recv = get_zmq_socket(context, zmq.PULL, self.port_args.scheduler_input_ipc_name, False)
        self._to_detokenizer = get_zmq_socket(context, zmq.PUSH, self.port_args.detokenizer_ipc_name, False)
        self._to_tokenizer = get_zmq_socket(context, zmq.PUSH, self.port_args.tokenizer_ipc_name, False)
        self.pacer = Pacer(ServerCore(self.profile, self.setting, seed=self.seed), time_scale=self.time_scale)
        pacer_task = asyncio.create_task(self.pacer.run(), name="sim-pacer")
        pacer_task.add_done_callback(exit_when_it_fails("simulated scheduler loop"))
        while True:
            message = await io_struct.async_sock_recv(recv)
            batch = getattr(message, "batch", None)
            for item in batch if isinstance(batch, list) else [message]:
                await self._handle(item)

    async def _handle(self, message: Any) -> None:
        io = self._io
        if isinstance(message, io.TokenizedGenerateReqInput):
            rid = str(message.rid)
            task = asyncio.create_task(self._generate(message), name=rid)
            self._tasks[rid] = task
            task.add_done_callback(self._forget)
        elif isinstance(message, io.GetInternalStateReq):
            reply = io.GetInternalStateReqOutput(internal_state=self.internal_state())
            await io.async_sock_send(self._to_tokenizer, reply)
        elif isinstance(message, io.AbortReq):
            self._aborted.update(self._tasks if message.abort_all else [str(message.rid)])
        else:
            log(f"simulated scheduler: {type(message).__name__} is not modelled; ignored", "WARNING")

    def _forget(self, task: asyncio.Task[None]) -> None:
        self._tasks.pop(task.get_name(), None)
        self._aborted.discard(task.get_name())

    async def _generate(self, request: Any) -> None:
        """Admit the request to the simulator and stream its tokens as the core produces them."""
        params = request.sampling_params
        prompt_ids = list(request.input_ids or [])
        max_new = params.max_new_tokens
        limit = max(1, self.context_length - len(prompt_ids))
        max_tokens = limit if max_new is None else max(1, min(int(max_new), limit))
        stream = self.pacer.admit(
            workload=self.workload,
            temperature=float(params.temperature if params.temperature is not None else 1.0),
            ignore_eos=bool(params.ignore_eos),
            prompt_tokens=max(1, len(prompt_ids)),
            max_tokens=max_tokens,
        )
        out = _Output(request, prompt_ids)
        started = time.monotonic()
        chunks = 0
        while (tokens := await stream.queue.get()) is not None:
            out.output_ids += [self.token_id] * tokens
            if chunks:  # a verify step; the first token comes from the prefill, with no verify
                self._count_step(out, tokens)
            chunks += 1
            if request.stream:
                await self._send(out, finished=None)
        sim = stream.request
        if sim.finish_reason == "stop":
            out.output_ids[-1] = self.eos_id
            finished = {"type": "stop", "matched": self.eos_id}
        else:
            finished = {"type": "length", "length": max_tokens}
        elapsed = time.monotonic() - started
        self.last_gen_throughput = len(out.output_ids) / elapsed if elapsed > 0 else 0.0
        await self._send(out, finished=finished)
        if not str(request.rid).startswith(HEALTH_CHECK_PREFIX):
            self._completed()

    def _completed(self) -> None:
        """`--sim-crash-after N`: the scheduler process dies after N answered requests (once, with
        `--sim-crash-once-file PATH`: only while PATH is absent, which it creates), and SGLang's own watchdog
        takes the server down (srt/utils/watchdog.py `SubprocessWatchdog`: SIGQUIT to the launcher)."""
        self.completed += 1
        if not crash_due(self.completed, self.crash_after, self.crash_once_file):
            return
        log(f"simulated scheduler crash after {self.completed} requests (--sim-crash-after)", "ERROR")
        sys.stderr.flush()
        os._exit(1)

    def _count_step(self, out: _Output, tokens: int) -> None:
        """One verify step that emitted `tokens` (accepted drafts + 1), counted as SGLang's scheduler counts it
        per request (batch_result_processor.py:832-836: `spec_verify_ct`, `spec_num_correct_drafts`, and the
        histogram of correct drafts, grown only as far as the largest count seen, schedule_batch.py:1566).
        Under an adaptive schedule a step at 0 steps (no drafting at that batch size) is still a verify step
        with 0 correct drafts: SGLang verifies a one-token tree then (eagle_worker_v2.py:1463-1466)."""
        if not self.speculative:
            return
        correct = tokens - 1
        out.verify_ct += 1
        out.correct += correct
        if len(out.histogram) <= correct:
            out.histogram += [0] * (correct + 1 - len(out.histogram))
        out.histogram[correct] += 1
        self.verify_total += 1
        self.accept_total += tokens

    async def _send(self, out: _Output, *, finished: dict[str, Any] | None) -> None:
        """One `BatchTokenIDOutput` for one request, as `OutputStreamer.accept` fills it (output_streamer.py)."""
        rid = str(out.request.rid)
        if rid in self._aborted:
            return
        io = self._io
        params = out.request.sampling_params
        new_ids = out.output_ids[out.sent :]
        out.sent = len(out.output_ids)
        out.decode_ids += new_ids
        decode_ids = out.decode_ids[out.sent_decode_ids :]
        out.sent_decode_ids = len(out.decode_ids)
        spec: dict[str, Any] = {}
        if self.speculative:
            spec = {
                "spec_verify_ct": [out.verify_ct],
                "spec_num_correct_drafts": [out.correct],
                "spec_num_block_accept_tokens": [0],
                "spec_num_cap_tokens": [0],
                "spec_correct_drafts_histogram": [list(out.histogram)],
                "spec_cap_lens_histogram": [[]],
            }
        empty: list[Any] = [[]]
        payload = io.BatchTokenIDOutput(
            rids=[rid],
            http_worker_ipcs=[out.request.http_worker_ipc],
            finished_reasons=[finished],
            decoded_texts=[""],
            decode_ids=[array("l", decode_ids)],
            read_offsets=[out.read_offset],
            output_ids=[array("l", new_ids)],
            skip_special_tokens=[params.skip_special_tokens],
            spaces_between_special_tokens=[params.spaces_between_special_tokens],
            no_stop_trim=[params.no_stop_trim],
            prompt_tokens=[len(out.request.input_ids or [])],
            reasoning_tokens=[0],
            completion_tokens=[len(out.output_ids)],
            cached_tokens=[0],
            input_token_logprobs_val=empty,
            input_token_logprobs_idx=empty,
            output_token_logprobs_val=empty,
            output_token_logprobs_idx=empty,
            input_top_logprobs_val=empty,
            input_top_logprobs_idx=empty,
            output_top_logprobs_val=empty,
            output_top_logprobs_idx=empty,
            input_token_ids_logprobs_val=empty,
            input_token_ids_logprobs_idx=empty,
            output_token_ids_logprobs_val=empty,
            output_token_ids_logprobs_idx=empty,
            output_token_entropy_val=None,
            output_token_sampling_mask=None,
            output_hidden_states=None,
            routed_experts=None,
            indexer_topk=None,
            placeholder_tokens_idx=None,
            placeholder_tokens_val=None,
            retraction_counts=[0],
            dp_ranks=[0],
            **spec,
        )
        await io.async_sock_send(self._to_detokenizer, payload)


def run_simulated_scheduler(
    server_args: Any,
    port_args: Any,
    gpu_id: int,
    tp_rank: int,
    pp_rank: int,
    dp_rank: int | None,
    pipe_writer: Any,
    *_: Any,
    **__: Any,
) -> None:
    """SGLang's `run_scheduler_process` signature: build the simulated scheduler, report ready, serve."""
    try:
        scheduler = SimulatedScheduler(server_args, port_args)
        pipe_writer.send(scheduler.init_info())
        log(
            f"simulated scheduler ready: {scheduler.setting} capacity {scheduler.capacity}, profile "
            f"{scheduler.profile.name}, time scale {scheduler.time_scale} (a MODEL, not a measurement)"
        )
        asyncio.run(scheduler.serve())
    except Exception as exc:
        # As SGLang's scheduler does (srt/managers/scheduler.py:6370-6373): log the traceback, then SIGQUIT
        # the launcher, whose handler kills the whole process tree. Exiting alone left the launcher waiting
        # on its other children, alive and never ready, until the sweep's start-up timeout (600 s) ran out.
        log(f"simulated scheduler hit an exception: {exc!r}\n{traceback.format_exc()}", "ERROR")
        sys.stderr.flush()
        with contextlib.suppress(ProcessLookupError):
            os.kill(os.getppid(), signal.SIGQUIT)
        os._exit(1)
