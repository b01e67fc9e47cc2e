"""Fault matrix, SGLang's own server code (`.venv-sglang`, `scripts/install.sh --sglang`): a scheduler that
dies mid-run, behind SGLang 0.5.23's real launcher, TokenizerManager and HTTP app. The simulated scheduler
exits after N answered requests (`--sim-crash-after`, once: `--sim-crash-once-file`); SGLang's own
watchdog (srt/utils/watchdog.py `SubprocessWatchdog`) sees it and takes the server down, as it does when a
GPU scheduler crashes. The real CLI must record the setting as failed, the run incomplete (exit 3) with the
resume named, and `tune --resume` must complete it with every cell stored once. Markers `sglang`, `slow`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from tests.faults.conftest import MatrixEntry, cli, count_rows, latest_run, run_status, sim_config, write_config

from sglang_frontend import frontend_engine, require_sglang
from specfrontier.store import Store

pytestmark = [pytest.mark.sglang, pytest.mark.slow]


def _config(store: Path, crash_knobs: list[str]) -> dict[str, Any]:
    """The fault matrix's small sweep (`sim_config`), served by SGLang's front end, one repeat."""
    settings = [
        {"name": "no-spec"},
        {"name": "standalone-s2", "algorithm": "STANDALONE", "num_steps": 2, "extra_args": crash_knobs},
    ]
    return sim_config(
        store, settings, engine=frontend_engine(), repeats=1, rounds_per_cell=1, warmup_rounds=0, request_timeout_s=60
    )


def test_sglang_scheduler_crash_mid_run_is_incomplete_and_resume_completes_it(
    tmp_path: Path, matrix: MatrixEntry
) -> None:
    require_sglang()
    store = tmp_path / "s.db"
    once = tmp_path / "crashed-once"
    knobs = ["--sim-crash-after", "3", "--sim-crash-once-file", str(once)]
    config = write_config(tmp_path / "tune.yaml", _config(store, knobs))
    done = cli("tune", "--config", str(config), "--quiet", cwd=tmp_path, timeout=1200)
    assert done.returncode == 3, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    line = next(ln for ln in done.stderr.splitlines() if ln.startswith("INCOMPLETE:"))
    assert "standalone-s2: server" in line and "--resume" in line, line
    run_id = latest_run(store)
    assert run_status(store, run_id) == "incomplete" and once.exists()
    settings = {s.name: s for s in Store(store).settings(run_id)}
    assert settings["standalone-s2"].status == "failed" and settings["no-spec"].status == "done"
    log = Path(settings["standalone-s2"].log_path or "").read_text(errors="replace")
    assert "simulated scheduler crash after 3 requests" in log
    partial = count_rows(store)

    resumed = cli("tune", "--resume", run_id, "--store", str(store), "--quiet", cwd=tmp_path, timeout=1200)
    assert resumed.returncode == 0, resumed.stderr
    assert run_status(store, run_id) == "done"
    rows = count_rows(store)
    workloads = {k[1] for k in rows.cell_keys}
    measured = [k for k in rows.cell_keys if k[3] >= 0]
    assert sorted(measured) == sorted(
        (s, w, c, 0) for s in ("no-spec", "standalone-s2") for w in workloads for c in (1, 2)
    )
    # SGLang relaunches slowly, so `drift_control: auto` adds the end-of-run drift reference: the first
    # setting once more at every level, stored as repeat -1 (never counted as a repeat).
    reference = [k for k in rows.cell_keys if k[3] < 0]
    assert sorted(reference) == sorted(("no-spec", w, c, -1) for w in workloads for c in (1, 2))
    assert len(set(rows.cell_keys)) == len(rows.cell_keys)  # every cell stored once
    matrix.rows(kept=partial, after=rows)


def test_sglang_scheduler_failing_at_start_up_fails_its_setting_with_the_cause_not_a_start_up_timeout(
    tmp_path: Path, matrix: MatrixEntry
) -> None:
    """A scheduler that raises while it initialises (here: a simulator profile that does not exist) SIGQUITs
    SGLang's launcher, as SGLang's own scheduler does, and the launcher's handler kills the process tree: the
    sweep sees the server exit, fails that setting with the scheduler's own error line, and goes on. Before,
    the stand-in scheduler only exited, the launcher hung on its other children, and the setting failed
    with "not ready after 600 s" ten minutes later."""
    require_sglang()
    store = tmp_path / "s.db"
    engine = frontend_engine(startup_timeout_s=300)  # ample for the front end; the old hang ran it out
    engine["extra_args"] += ["--sim-profile", str(tmp_path / "no-such-profile.json")]  # every launch fails
    settings = [{"name": "no-spec"}, {"name": "standalone-s2", "algorithm": "STANDALONE", "num_steps": 2}]
    config = sim_config(store, settings, engine=engine, repeats=1, rounds_per_cell=1, warmup_rounds=0)
    done = cli("tune", "--config", str(write_config(tmp_path / "tune.yaml", config)), "--quiet", cwd=tmp_path)
    assert done.returncode != 0 and "Traceback" not in done.stderr, done.stderr
    run_id = latest_run(store)
    for failed in Store(store).settings(run_id):
        assert failed.status == "failed" and failed.error is not None, failed
        assert "not ready" not in failed.error, failed.error  # not the start-up timeout
        cause = failed.error.split("its log says: ", 1)[-1]  # the scheduler's own exception, not the shutdown
        assert cause.startswith("specfrontier.errors.ConfigError: sim profile") and "no-such-profile" in cause
    matrix.rows(kept=count_rows(store), after=count_rows(store))


# -- an adaptive config SGLang would not run as written: refused before launch, as SGLang's own code refuses it --
FALLS_BACK = "SGLang starts with adaptive off (a warning, then the static setting: adaptive_spec_params.py:56-100)"
CHAIN = {"algorithm": "EAGLE3", "num_steps": 3, "eagle_topk": 1}
INVALID_SCHEDULES: list[tuple[str, dict[str, Any], str, str | None]] = [
    # (case, the setting, our refusal, SGLang 0.5.23's exception for the same file and flags; None: it starts
    # with adaptive off, see FALLS_BACK)
    (
        "empty-candidates",
        {**CHAIN, "adaptive_config": {1: []}},
        "adaptive_config[1] = []: keys are batch sizes >= 1, values non-empty lists of steps >= 0",
        "BS 1: candidate_steps must be a list of non-negative ints, got []",
    ),
    (
        "negative-step",
        {**CHAIN, "adaptive_config": {1: [3, -1]}},
        "adaptive_config[1] = [3, -1]",
        "BS 1: candidate_steps must be a list of non-negative ints, got [-1, 3]",
    ),
    (
        "start-not-a-candidate",
        {**CHAIN, "num_steps": 4, "adaptive_config": {1: [3], 2: [1]}},
        "num_steps = 4 is not among the adaptive candidate steps [1, 3] (SGLang checks this at start-up); fix: "
        "set num_steps to 3",
        "--speculative-num-steps=4 is not in the adaptive config candidate_steps [1, 3]",
    ),
    (
        "no-batch-size",
        {**CHAIN, "adaptive_config": {}},
        "adaptive_config is empty; fix:",
        "speculative_adaptive_config must contain at least one integer-string BS key",
    ),
    (
        "tree",
        {**CHAIN, "eagle_topk": 2, "num_draft_tokens": 4, "adaptive_config": {1: [3]}},
        "adaptive_config needs eagle_topk = 1 (SGLang falls back to static speculation without an error",
        None,
    ),
    (
        "two-batch-overlap",
        {**CHAIN, "adaptive_config": {1: [3], 2: [1]}, "extra_args": ["--enable-two-batch-overlap"]},
        "extra_args has --enable-two-batch-overlap with adaptive_config: SGLang turns adaptive mode off under "
        "two-batch overlap",
        None,
    ),
    (
        "ngram",
        {"algorithm": "NGRAM", "num_draft_tokens": 4, "adaptive_config": {1: [3]}},
        "adaptive_config with algorithm = 'NGRAM': SGLang's adaptive mode runs EAGLE/EAGLE3 only",
        None,
    ),
]


KEY_0 = {**CHAIN, "adaptive_config": {0: [3], 4: [1]}}
"""Accepted by SGLang, refused here (test_a_batch_size_key_0_is_refused_here_and_accepted_by_sglang)."""


@pytest.fixture(scope="module")
def sglangs_verdicts() -> dict[str, dict[str, Any]]:
    """SGLang's own parse and resolution of each invalid case's launch command, as the adapter would write it
    were the setting let through (the adaptive config file included), in one `.venv-sglang` process."""
    from sglang_frontend import resolve_with_sglang
    from specfrontier.engines.sglang import SGLangAdapter, SGLangEngine, SGLangSetting

    adapter = SGLangAdapter(SGLangEngine.model_validate(frontend_engine()))
    cases = [(case, fields) for case, fields, _, _ in INVALID_SCHEDULES] + [("key-0", KEY_0)]
    commands = [
        adapter.command(SGLangSetting.model_construct(name=case, **fields), port=30000, max_concurrency=1)
        for case, fields in cases
    ]
    resolved = resolve_with_sglang(commands)
    return {case: verdict for (case, _), verdict in zip(cases, resolved, strict=True)}


@pytest.mark.parametrize(
    ("case", "fields", "ours", "sglangs"), INVALID_SCHEDULES, ids=[c[0] for c in INVALID_SCHEDULES]
)
def test_an_adaptive_config_sglang_would_not_run_as_written_is_refused_before_launch(
    tmp_path: Path,
    sglangs_verdicts: dict[str, dict[str, Any]],
    case: str,
    fields: dict[str, Any],
    ours: str,
    sglangs: str | None,
) -> None:
    """An SGLang per-batch-size schedule (adaptive config) that SGLang 0.5.23's own code refuses at start-up
    (its config parser, adaptive_spec_params.py:103-139; its start-step check, speculative_hook.py:1416-1421) is
    refused by `tune` before anything launches (exit 2, one line naming the field and the fix); one that
    SGLang would silently run as the static setting (a tree, another algorithm) is refused too, where SGLang
    only warns. The SGLang side is SGLang's own code reading the file and flags the adapter writes."""
    from tests.faults.test_input_faults import assert_nothing_started, assert_one_config_error

    store = tmp_path / "s.db"
    settings = [{"name": "no-spec"}, {"name": case, **fields}]
    config = write_config(tmp_path / "c.yaml", _config(store, []) | {"settings": settings})
    assert_one_config_error(cli("tune", "--config", str(config), cwd=tmp_path), f"settings[{case}]", ours)
    assert_nothing_started(tmp_path, store)
    verdict = sglangs_verdicts[case]
    if sglangs is not None:
        assert verdict.get("error") == "ValueError" and sglangs in verdict["message"], verdict
    else:
        assert "error" not in verdict and verdict["speculative_adaptive"] is False, (FALLS_BACK, verdict)


def test_a_batch_size_key_0_is_refused_here_and_accepted_by_sglang(sglangs_verdicts: dict[str, dict[str, Any]]) -> None:
    """Where this is stricter than SGLang: `"0".isdigit()`, so SGLang takes a key 0 (adaptive_spec_params.py:118)
    and routes every batch below the next key to it; a batch is never 0, so it is key 1 by another name, and
    the fix says so."""
    from specfrontier.engines.sglang import SGLangSetting

    with pytest.raises(ValueError, match=r"adaptive_config\[0\] = \[3\]: keys are batch sizes >= 1"):
        SGLangSetting(name="key-0", **KEY_0)
    verdict = sglangs_verdicts["key-0"]
    assert verdict.get("speculative_adaptive") is True and verdict["speculative_num_steps"] == 3, verdict
