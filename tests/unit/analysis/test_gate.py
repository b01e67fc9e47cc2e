"""Correctness gate: greedy outputs of speculative settings vs the baseline's, prompt by prompt."""

from __future__ import annotations

from pathlib import Path

from builders import StoredRun
from specfrontier.analysis import load_run, recommend
from specfrontier.analysis.gate import correctness_gate, is_greedy_workload, unsafe_settings
from specfrontier.records import RequestRecord
from specfrontier.store import CellRow, Store

MS = 1_000_000
TEXTS = {f"p{i}": f"def f{i}(x):\n    return x * {i}  # the reference output of prompt {i}" for i in range(10)}


def _req(prompt: str, text: str, error: str | None = None) -> RequestRecord:
    return RequestRecord(prompt, 0, 1000 * MS, 100 * MS, completion_tokens=20, output_text=text, error=error)


def _row(setting: str, workload: str, c: int, repeat: int, texts: dict[str, str]) -> CellRow:
    requests = tuple(_req(p, t) for p, t in texts.items())
    return CellRow(0, setting, workload, c, repeat, None, None, requests)


def _altered(n: int) -> dict[str, str]:
    """The reference outputs with the first `n` deliberately changed after a common prefix."""
    return {p: (t[:12] + " + 1  # altered" if i < n else t) for i, (p, t) in enumerate(TEXTS.items())}


def test_identical_outputs_pass_and_an_altered_output_is_caught() -> None:
    rows = [
        _row("baseline", "code@greedy", 1, 0, TEXTS),
        _row("baseline", "code@greedy", 1, 1, TEXTS),
        _row("same", "code@greedy", 1, 0, TEXTS),
        _row("broken", "code@greedy", 1, 0, _altered(3)),
    ]
    results = {r.setting: r for r in correctness_gate(rows, "baseline", 0.1)}
    assert (results["same"].diverged, results["same"].compared, results["same"].unsafe) == (0, 10, False)
    broken = results["broken"]
    assert (broken.diverged, broken.compared, broken.unsafe) == (3, 10, True)
    first = broken.examples[0]
    assert first.prompt_id == "p0" and first.first_diff_char == 13 and "altered" in first.setting_excerpt
    assert results["broken"].baseline_rate == 0.0
    assert unsafe_settings(list(results.values())) == {"broken"}


def test_tolerance_allows_rare_differences_and_any_baseline_output_counts_as_safe() -> None:
    batched = _altered(10)  # at C=4 the baseline itself produced other text
    broken = {p: t + " and then something else" for p, t in TEXTS.items()}
    rows = [
        _row("baseline", "w@greedy", 1, 0, TEXTS),
        _row("baseline", "w@greedy", 4, 0, batched),
        _row("ngram", "w@greedy", 1, 0, {**TEXTS, "p0": broken["p0"]}),  # 1 of 10 differs: at the tolerance
        _row("ngram", "w@greedy", 4, 0, TEXTS),  # the baseline's C=1 text at C=4: not a difference
    ]
    (result,) = correctness_gate(rows, "baseline", 0.1)
    assert (result.diverged, result.compared, result.unsafe) == (1, 20, False)
    strict = correctness_gate(rows, "baseline", 0.0)[0]
    assert not strict.unsafe and strict.diverged_prompts == 1  # one prompt: possibly one near-tie token
    rows.append(_row("ngram", "w@greedy", 1, 1, {**TEXTS, "p1": broken["p1"]}))
    assert correctness_gate(rows, "baseline", 0.0)[0].unsafe  # two distinct prompts differ


def test_sampled_workloads_and_failed_requests_are_not_compared() -> None:
    failed = CellRow(0, "ngram", "w@greedy", 1, 0, None, None, (_req("p0", "", error="timeout"),))
    rows = [
        _row("baseline", "w@greedy", 1, 0, {"p0": TEXTS["p0"]}),
        failed,
        _row("baseline", "chat@t0.6", 1, 0, TEXTS),
        _row("ngram", "chat@t0.6", 1, 0, _altered(10)),
    ]
    assert [(r.workload, r.compared) for r in correctness_gate(rows, "baseline")] == []
    assert is_greedy_workload("builtin:cpu-mix|t=0.0|max=48|eos=natural")
    assert not is_greedy_workload("builtin:cpu-mix|t=0.7|max=48|eos=natural")
    assert correctness_gate(rows, None) == []


def _store_run(tmp_path: Path, *, allow_unsafe: bool) -> tuple[Store, str]:
    run = StoredRun(tmp_path / f"s{allow_unsafe}.db", config={"allow_unsafe": allow_unsafe})
    speeds = {"baseline": 100, "broken": 200}  # the broken setting is much faster: it would win
    for name in speeds:
        run.setting(name, status="done", command=("llama-server", "--alias", name))
        texts = TEXTS if name == "baseline" else _altered(5)
        reqs = [
            RequestRecord(p, 0, 1000 * MS, 100 * MS, completion_tokens=speeds[name] // 10, output_text=t)
            for p, t in texts.items()
        ]
        run.repeats(name, 1, [reqs, reqs], workload="code@greedy")
    return run.store, run.run_id


def test_an_unsafe_setting_is_left_out_of_recommendations_unless_allowed(tmp_path: Path) -> None:
    store, run_id = _store_run(tmp_path, allow_unsafe=False)
    data = load_run(store, run_id)
    assert data.unsafe == {"broken"}
    assert [r.setting for r in recommend(data)] == ["baseline"]
    store, run_id = _store_run(tmp_path, allow_unsafe=True)
    assert [r.setting for r in recommend(load_run(store, run_id))] == ["broken"]


def test_an_output_the_baseline_itself_produced_is_not_held_against_the_setting() -> None:
    other = _altered(2)  # batching gave the baseline other text for p0 and p1 in one of its repeats
    rows = [
        _row("baseline", "w@greedy", 4, 0, TEXTS),
        _row("baseline", "w@greedy", 4, 1, TEXTS),
        _row("baseline", "w@greedy", 4, 2, other),
        _row("ngram", "w@greedy", 4, 0, other),
    ]
    (result,) = correctness_gate(rows, "baseline", 0.0)
    assert (result.diverged, result.compared, result.unsafe) == (0, 10, False)
    assert (result.baseline_diverged, result.baseline_compared) == (2, 30)  # the noise floor, reported


def test_the_baseline_against_itself_sets_the_noise_floor() -> None:
    """An engine whose greedy output moves with the batch (vLLM's CPU backend): the baseline differs from
    its own most common output on 3 of 10 requests at C=4, so a setting that meets new variants at about
    that rate is not unsafe; one that differs on most requests still is."""
    noisy = _altered(3)
    rows = [
        _row("baseline", "w@greedy", 4, 0, TEXTS),
        _row("baseline", "w@greedy", 4, 1, TEXTS),
        _row("baseline", "w@greedy", 4, 2, noisy),
        _row("ngram", "w@greedy", 4, 0, {**TEXTS, **{p: t + " (batch variant)" for p, t in list(TEXTS.items())[3:5]}}),
        _row("broken", "w@greedy", 4, 0, {p: t + " wrong" for p, t in TEXTS.items()}),
    ]
    results = {r.setting: r for r in correctness_gate(rows, "baseline", 0.1)}
    ngram, broken = results["ngram"], results["broken"]
    assert ngram.baseline_rate == 0.1 and ngram.threshold == 0.2  # 3 of 30 baseline requests: the floor
    assert (ngram.diverged, ngram.diverged_prompts, ngram.divergence_rate) == (2, 2, 0.2)
    assert not ngram.unsafe  # 20%: above the tolerance alone (10%), not above tolerance + floor
    assert broken.unsafe and broken.divergence_rate == 1.0
