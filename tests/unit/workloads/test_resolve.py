"""Workload entries -> prompts: selection, mixes, length control, modes, sampling and keys."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
from pydantic import ValidationError

from specfrontier.config.workloads import WorkloadSpec
from specfrontier.errors import ConfigError
from specfrontier.workloads.resolve import resolve_workload
from specfrontier.workloads.synthetic import CHARS_PER_TOKEN, synthetic_prompts


def _spec(**kw: object) -> WorkloadSpec:
    return WorkloadSpec.model_validate(kw)


def test_synthetic_greedy_is_the_seeds_best_case_with_fixed_lengths() -> None:
    wl = resolve_workload(_spec(source="synthetic-greedy", prompts=5, input_tokens=64, max_tokens=32))
    assert wl.key == "synthetic-greedy@greedy"
    assert wl.sampling.temperature == 0.0 and wl.sampling.ignore_eos and wl.greedy
    assert len(wl.prompts) == 5 and all(p.max_tokens == 32 and p.api == "completion" for p in wl.prompts)
    for p in wl.prompts:  # ~64 tokens at chars/4, never more than one word over
        assert 64 * CHARS_PER_TOKEN <= len(p.text) < 64 * CHARS_PER_TOKEN + 12
    assert synthetic_prompts(3, 10, seed=1) == synthetic_prompts(3, 10, seed=1)
    assert synthetic_prompts(3, 10, seed=1) != synthetic_prompts(3, 10, seed=2)


def test_max_input_tokens_drops_long_prompts() -> None:
    everything = resolve_workload(_spec(source="ifbench"))
    short = resolve_workload(_spec(source="ifbench", max_input_tokens=40))
    assert len(short.prompts) < len(everything.prompts)
    assert all(sum(len(c) for _, c in p.messages) <= 40 * CHARS_PER_TOKEN for p in short.prompts)
    with pytest.raises(ConfigError, match=r"workloads\[\]\.max_input_tokens = 1: .*fix: raise it"):
        resolve_workload(_spec(source="ifbench", max_input_tokens=1))


def test_selection_is_seeded_and_stable() -> None:
    a = resolve_workload(_spec(source="gsm8k", prompts=7, seed=3))
    b = resolve_workload(_spec(source="gsm8k", prompts=7, seed=3))
    c = resolve_workload(_spec(source="gsm8k", prompts=7, seed=4))
    assert [p.prompt_id for p in a.prompts] == [p.prompt_id for p in b.prompts]
    assert [p.prompt_id for p in a.prompts] != [p.prompt_id for p in c.prompts]


def test_a_mix_follows_its_weights_and_interleaves_sources() -> None:
    wl = resolve_workload(_spec(source={"humaneval": 2, "ifbench": 1}, prompts=9))
    assert wl.key == "humaneval+ifbench@greedy"
    cats = [p.category for p in wl.prompts]
    assert cats.count("code") == 6 and cats.count("chat") == 3
    assert "chat" in cats[:3]  # interleaved, not 6 code prompts then 3 chat
    by_cat = {p.category: p.api for p in wl.prompts}
    assert by_cat == {"code": "completion", "chat": "chat"}  # each source keeps its natural mode


def test_mode_overrides_the_sources_natural_one() -> None:
    chat = resolve_workload(_spec(source="humaneval", mode="chat", prompts=2))
    assert all(p.api == "chat" and "Complete this Python function" in p.messages[0][1] for p in chat.prompts)
    raw = resolve_workload(_spec(source="gsm8k", mode="completion", prompts=2))
    assert all(p.api == "completion" and p.text for p in raw.prompts)


def test_sampling_profiles_send_natural_eos_top_p_and_a_stable_seed_per_request() -> None:
    wl = resolve_workload(_spec(source="truthfulqa", sampling="t0.6", prompts=4))
    assert wl.key == "truthfulqa@t0.6" and not wl.greedy
    assert (wl.sampling.temperature, wl.sampling.top_p, wl.sampling.ignore_eos) == (0.6, 0.95, False)
    seeds = [p.seed for p in wl.prompts]
    assert all(s is not None for s in seeds) and len(set(seeds)) == 4
    assert seeds == [p.seed for p in resolve_workload(_spec(source="truthfulqa", sampling="t0.6", prompts=4)).prompts]
    hot = resolve_workload(_spec(source="truthfulqa", sampling="t1.0", prompts=1))
    assert (hot.sampling.temperature, hot.sampling.top_p) == (1.0, 0.95)
    assert resolve_workload(_spec(source="truthfulqa", prompts=1)).prompts[0].seed is None  # greedy: no seed


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"source": "nope"}, "unknown source; fix: use one of humaneval"),
        ({"source": "synthetic-greedy", "sampling": "t0.6"}, "greedy best case"),
        ({"source": "humaneval", "input_tokens": 10}, "fix: use max_input_tokens"),
        ({"source": {"synthetic-greedy": 1, "gsm8k": 1}}, "cannot be mixed"),
        ({"source": "gsm8k", "sessions": True}, "only the agentic source has sessions"),
        ({"source": "gsm8k", "samplin": "greedy"}, "Extra inputs"),
    ],
)
def test_bad_entries_are_refused_with_the_fix(entry: dict[str, object], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        WorkloadSpec.model_validate(entry)


def test_a_prompts_own_seed_is_sent_instead_of_the_cells() -> None:
    from specfrontier.load.client import build_request_body
    from specfrontier.records import Prompt, Sampling

    body = build_request_body(Prompt("p", "c", "completion", 8, text="x", seed=7), Sampling(0.6, seed=1), None)
    assert body["seed"] == 7
    assert build_request_body(Prompt("p", "c", "completion", 8, text="x"), Sampling(0.6, seed=1), None)["seed"] == 1


def test_sessions_grow_the_recorded_context_turn_by_turn() -> None:
    wl = resolve_workload(_spec(source="agentic", sessions=True, max_input_tokens=3000, max_turns=3, prompts=3))
    assert len(wl.sessions) == 3 and wl.prompts == tuple(p for s in wl.sessions for p in s)
    for turns in wl.sessions:
        assert 1 <= len(turns) <= 3
        sizes = [len(t.messages) for t in turns]
        assert sizes == sorted(sizes) and all(t.messages[-1][0] == "user" for t in turns)
        assert [t.prompt_id.rsplit("#t", 1)[1] for t in turns] == [f"{i:02d}" for i in range(1, len(turns) + 1)]
        assert all(sum(len(c) for _, c in t.messages) <= 3000 * CHARS_PER_TOKEN for t in turns)
        assert all(t.messages[: len(a.messages)] == a.messages for a, t in itertools.pairwise(turns))
    with pytest.raises(ConfigError, match=r"max_input_tokens = 10: no session's first turn is that short"):
        resolve_workload(_spec(source="agentic", sessions=True, max_input_tokens=10))


def test_sessions_are_refused_with_open_loop_load() -> None:
    from specfrontier.config.load import parse_config

    with pytest.raises(ConfigError, match="sessions are replayed closed loop"):
        parse_config(
            {
                "workloads": [{"source": "agentic", "sessions": True}],
                "load": {"mode": "open", "rates": [1.0], "requests": 4},
                "settings": [{"name": "baseline"}],
            },
            source="c.yaml",
        )


def test_a_non_utf8_prompts_file_names_the_entry_the_file_and_the_byte(tmp_path: Path) -> None:
    path = tmp_path / "p.jsonl"
    path.write_bytes('{"id": "a", "prompt": "ok"}\n{"id": "b", "prompt": "caf\xe9"}\n'.encode("latin-1"))
    with pytest.raises(ConfigError) as exc:
        resolve_workload(WorkloadSpec(source=str(path)), where="workloads[1]")
    assert str(exc.value) == (
        f"workloads[1].source = '{path}': not UTF-8 text (byte 0xe9 at offset 54, line 2); fix: save it as UTF-8"
    )


def test_a_missing_prompts_file_says_what_to_use_instead(tmp_path: Path) -> None:
    path = tmp_path / "absent.jsonl"
    with pytest.raises(ConfigError, match=r"^workloads\[0\]\.source = .*cannot read it .*builtin:cpu-mix$"):
        resolve_workload(WorkloadSpec(source=str(path)), where="workloads[0]")


def test_a_prompts_file_of_blank_lines_names_the_entry(tmp_path: Path) -> None:
    path = tmp_path / "blank.jsonl"
    path.write_text("\n  \n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"^workloads\[2\]\.source = '.*blank\.jsonl': no prompts; fix: add"):
        resolve_workload(WorkloadSpec(source=str(path)), where="workloads[2]")
