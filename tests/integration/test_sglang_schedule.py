"""Per-batch-size schedules against SGLang 0.5.23's own server code (`.venv-sglang`, the simulator standing in
for its scheduler: `specfrontier.sim.sglang_frontend`).

SGLang's per-batch-size schedule is its adaptive speculative config (`--speculative-adaptive
--speculative-adaptive-config FILE`): SGLang's own parser reads the file (srt/speculative/adaptive_spec_params.py
`_load_adaptive_config`), its start-up hook checks `--speculative-num-steps` against the candidates and sets the
draft tokens to steps + 1 (srt/arg_groups/speculative_hook.py:1392-1427), and `/server_info` reports what it
resolved. The double then runs the depth SGLang's router would pick for each running batch.

One `tune` with `verify_schedule: true` (3 launches: no speculation, an EAGLE3 chain of 3 steps, then the
measured schedule) is shared by both tests; the served deployment is a test profile
(tests/data/sim_profile_switch_at_2.json, a MODEL) in which the chain wins at C=1 and no speculation at C=2,
so the schedule has two ranges at the two cheapest levels. The schedule `specfrontier schedule` writes from
that run is then launched with the command it prints (1 more launch). Short cells, one repeat: about 5-8
minutes on a shared 2-core host."""

from __future__ import annotations

import io
import json
import re
import shlex
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import pytest_asyncio
from rich.console import Console

from sglang_frontend import (  # noqa: F401 (frontend_tagged: the module's autouse fixture)
    SGLANG_VERSION,
    frontend_engine,
    frontend_server,
    frontend_tagged,
    require_sglang,
    run_in_sglang,
)
from specfrontier.analysis import RunData, load_run
from specfrontier.analysis.schedule_check import schedule_summary_lines, verify_schedules
from specfrontier.cli.schedule import run_schedule
from specfrontier.config.load import parse_config
from specfrontier.process.launch import free_port
from specfrontier.runs.sweep import open_sweep
from specfrontier.schedules.verify import SCHEDULE_SETTING

pytestmark = [pytest.mark.sglang, pytest.mark.slow]

PROFILE = Path(__file__).resolve().parents[1] / "data" / "sim_profile_switch_at_2.json"
SCHEDULE = {"1": {"candidate_steps": [3]}, "2": {"candidate_steps": [0]}}
"""What the run's evidence gives: depth 3 from batch size 1, no drafting from 2 (SGLang's file format)."""


ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")


def _config(store: Path) -> dict[str, Any]:
    return {
        "engine": frontend_engine(extra_args=["--sim-time-scale", "1", "--sim-profile", str(PROFILE)]),
        "workloads": [
            {"source": "builtin:cpu-mix", "name": "mix", "mode": "completion", "prompts": 4, "max_tokens": 32}
        ],
        "concurrency": [1, 2],
        "repeats": 1,
        "rounds_per_cell": 2,
        "cell_duration_s": 6,  # C=2 needs a steady span of 4 request lifetimes (up to ~1 s each here)
        "warmup_rounds": 0,
        "drift_control": "off",  # no reference relaunch: 3 launches in all
        "max_client_lag_share": 1.0,  # a shared 2-core host lags the client; this test is not about the client
        "settings": [
            {"name": "no-spec"},
            {"name": "steps3", "algorithm": "EAGLE3", "num_steps": 3, "eagle_topk": 1},
        ],
        "verify_schedule": True,
        "store": str(store),
    }


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def verified(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[RunData]:
    require_sglang()
    sweep, run_id = open_sweep(parse_config(_config(tmp_path_factory.mktemp("sched") / "s.db")), None, resume=None)
    await sweep.run(run_id)
    yield load_run(sweep.store, run_id)


def _per_step(data: RunData, name: str, level: int) -> tuple[float, float]:
    """(correct drafts, proposed drafts) per verify step of a cell, summed from SGLang's per-request figures."""
    cell = data.cell(name, level)
    assert cell is not None and cell.counters is not None and cell.counters.verify_steps > 0, (name, level)
    c = cell.counters
    return c.accepted_tokens / c.verify_steps, c.draft_tokens / c.verify_steps


@pytest.mark.asyncio(loop_scope="module")
async def test_verify_schedule_measures_sglangs_adaptive_config_against_the_best_static_setting(
    verified: RunData,
) -> None:
    """(b) `verify_schedule` builds the schedule from the run's cells, launches it as one more setting through
    SGLang's own parser (an adaptive config with one pinned candidate per range), and reports it per level
    against the best static setting. SGLang's per-request figures show the per-batch-size depth: as many
    correct drafts per verify step at C=1 as the static chain of depth 3 (1.45 in the first run) and almost
    none at C=2 (0 steps; the running batch drops to 1 only between a request's end and its replacement's
    prefill). SGLang's
    TokenizerManager counts every verify step as proposing the start depth's drafts whatever depth ran
    (`verify_ct * (speculative_num_draft_tokens - 1)`, srt/managers/tokenizer_manager.py:3156-3158), so the
    stored proposed drafts are 3 per step at both levels: under a schedule SGLang's acceptance rate is a
    lower bound, its accepted drafts per step exact."""
    data = verified
    assert data.run.status == "done", [(s.name, s.error) for s in data.settings]
    assert not data.not_evidence_lines(), data.not_evidence_lines()
    assert [s.name for s in data.settings] == ["no-spec", "steps3", SCHEDULE_SETTING]
    scheduled = data.setting(SCHEDULE_SETTING)
    assert {int(k): v for k, v in scheduled.params["adaptive_config"].items()} == {1: [3], 2: [0]}
    assert "--speculative-adaptive-config" in scheduled.command and "--speculative-adaptive" in scheduled.command
    assert scheduled.capacity == 48  # SGLang's reset of the unset --max-running-requests, read from /server_info
    # the measured evidence: the chain wins alone, no speculation from two requests (the profile's premise)
    for level, winner_name, loser_name in ((1, "steps3", "no-spec"), (2, "no-spec", "steps3")):
        winner, loser = data.cell(winner_name, level), data.cell(loser_name, level)
        assert winner is not None and loser is not None
        assert (winner.aggregate_tok_s.median or 0) > 1.3 * (loser.aggregate_tok_s.median or 0), (winner, loser)
    levels = {int(lv.level): lv for lv in verify_schedules(data)}
    assert sorted(levels) == [1, 2]
    assert levels[1].best_static == "steps3" and levels[2].best_static == "no-spec"
    for lv in levels.values():  # the schedule runs the winner's depth at each level, so it lands near the winner
        assert lv.schedule_tok_s is not None and lv.best_static_tok_s is not None and lv.verdict in ("holds", "loses")
        assert 0.8 < lv.schedule_tok_s / lv.best_static_tok_s < 1.25, lv
    (line, *_) = schedule_summary_lines(data)
    assert line.startswith(f"{SCHEDULE_SETTING} (per-batch-size schedule)"), line
    correct_1, proposed_1 = _per_step(data, SCHEDULE_SETTING, 1)
    correct_2, proposed_2 = _per_step(data, SCHEDULE_SETTING, 2)
    static_correct, _ = _per_step(data, "steps3", 1)
    assert correct_1 > 1.0 and correct_1 == pytest.approx(static_correct, rel=0.25), (correct_1, static_correct)
    assert correct_2 < 0.3 * correct_1, (correct_2, correct_1)
    assert proposed_1 == proposed_2 == 3.0


def _printed(data: RunData, out: Path) -> str:
    """What `specfrontier schedule RUN --engine sglang -o FILE` prints (its own function, unwrapped)."""
    buffer = io.StringIO()
    run_schedule(data, "sglang", out, None, Console(file=buffer, width=100_000, color_system=None))
    return buffer.getvalue()


@pytest.mark.asyncio(loop_scope="module")
async def test_the_written_schedule_launches_with_its_printed_command_and_sglang_takes_it(
    verified: RunData, tmp_path: Path
) -> None:
    """(a) `schedule --engine sglang -o FILE` on the run: the file and the printed launch command (the measured
    setting's command, with the run's interpreter, launcher and engine arguments, the speculative flags
    swapped) are taken by SGLang's own ServerArgs and start-up resolution, and its `/server_info` shows them:
    adaptive on, the file's path, steps 3 (the deepest candidate), topk 1, draft tokens 4. A request at batch
    size 1 drafts at depth 3 (correct drafts beyond 1 in SGLang's per-request histogram)."""
    out = tmp_path / "sglang-schedule.json"
    printed = _printed(verified, out)
    assert json.loads(out.read_text(encoding="utf-8")) == SCHEDULE
    line = next(ln.strip() for ln in printed.splitlines() if ln.strip().startswith("launch: "))
    words = shlex.split(line.removeprefix("launch: "))
    start = next(i for i, w in enumerate(words) if not ASSIGNMENT.match(w))  # `VAR=value ...` first, then argv
    argv = words[start:]
    assert argv[1:3] == ["-m", "specfrontier.sim.sglang_frontend"] and "--sim-profile" in argv
    assert argv.count("--speculative-num-steps") == 1 and "--port" not in argv  # the deployable: SGLang's port
    port = free_port()
    async with frontend_server([*argv, "--host", "127.0.0.1", "--port", str(port)], port, tmp_path / "s.log"):
        root = f"http://127.0.0.1:{port}"
        async with aiohttp.ClientSession() as session:
            async with session.get(root + "/server_info") as resp:
                info = await resp.json()
            body = {"prompt": "Count from one to twenty.", "max_tokens": 24, "temperature": 0, "stream": False}
            async with session.post(root + "/v1/completions", json={**body, "return_spec_tokens_details": True}) as r:
                answer = await r.json()
                assert r.status == 200, answer
    assert info["version"] == SGLANG_VERSION
    assert info["speculative_adaptive"] is True and info["speculative_adaptive_config"] == str(out)
    assert info["speculative_algorithm"] == "EAGLE3" and info["speculative_eagle_topk"] == 1
    assert info["speculative_num_steps"] == 3 and info["speculative_num_draft_tokens"] == 4
    assert info["internal_states"][0]["simulated"] is True
    details = answer["sglext"]["spec_tokens_details"]
    assert details["spec_verify_ct"] > 0 and details["spec_num_correct_drafts"] > 0
    assert len(details["spec_correct_drafts_histogram"]) > 2, details  # a step accepted 2+ drafts: depth >= 2


CONTROLLER = """
import json, sys, tempfile
from sglang.srt.speculative.adaptive_spec_params import AdaptiveSpeculativeParams, AdaptiveStepSlot
payload = json.loads(sys.argv[1])
trajectories = []
for trial in payload["trials"]:
    slot = AdaptiveStepSlot(trial["initial"], {"candidate_steps": trial["candidates"]})
    steps = [slot.current_steps]
    for batch in trial["batches"]:
        slot.update(batch)
        steps.append(slot.current_steps)
    trajectories.append(steps)
with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as file:
    json.dump(payload["config"], file)
params = AdaptiveSpeculativeParams(initial_steps=payload["initial"], cfg_path=file.name)
keys = [params._find_closest_bs(params._pad_to_cuda_graph_bs(b)) for b in payload["batch_sizes"]]
print("RESULT " + json.dumps({"trajectories": trajectories, "keys": keys}))
"""
"""SGLang 0.5.23's own adaptive controller (`AdaptiveStepSlot`, srt/speculative/adaptive_spec_params.py:153-272)
over given verify results, and its router (`AdaptiveSpeculativeParams._route`, :342-358; no CUDA graphs here)."""


def test_the_simulators_schedule_controller_and_router_step_as_sglangs_own() -> None:
    """The double (and the simulator's face) runs a schedule with `sim.schedule`, our restatement of SGLang's
    controller and router; here both are fed the same verify results (random per-request correct-draft counts,
    random candidate sets and start steps, 40 trials of 300 verify steps) and must choose the same steps after
    every one, and route every batch size 1-80 to the same entry of a three-entry config. No launch."""
    import random

    from specfrontier.sim.schedule import ScheduleState, SlotController, normalise

    rng = random.Random(37)
    trials = []
    for _ in range(40):
        candidates = sorted(rng.sample(range(8), rng.randint(1, 4)))
        level = rng.uniform(0, 6)  # a trial's typical acceptance, so the EMA settles and crosses thresholds
        batches = [[min(7, max(0, round(rng.gauss(level, 1.5)))) for _ in range(rng.randint(1, 4))] for _ in range(300)]
        trials.append({"candidates": candidates, "initial": rng.randint(0, 7), "batches": batches})
    config = {"1": {"candidate_steps": [1, 3, 5]}, "8": {"candidate_steps": [0, 1, 3]}, "32": {"candidate_steps": [0]}}
    batch_sizes = list(range(1, 81))
    sglangs = run_in_sglang(CONTROLLER, {"trials": trials, "config": config, "initial": 3, "batch_sizes": batch_sizes})
    for trial, theirs in zip(trials, sglangs["trajectories"], strict=True):
        ours = SlotController(trial["candidates"], trial["initial"])
        mine = [ours.steps]
        for batch in trial["batches"]:
            ours.observe(sum(batch) / len(batch))
            mine.append(ours.steps)
        assert mine == theirs, (trial["candidates"], trial["initial"])
    assert sum(len(set(t)) > 1 for t in sglangs["trajectories"]) >= 20  # the steps did move in most trials
    state = ScheduleState(normalise([(int(k), v["candidate_steps"]) for k, v in config.items()]), 3)
    key_of = {id(controller): lo for lo, controller in state.controllers.items()}
    assert [key_of[id(state.controller(b))] for b in batch_sizes] == sglangs["keys"]
