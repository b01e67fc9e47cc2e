"""A config's `space:` (lists per knob) expands to named settings plus a baseline; combinations the engine
refuses are pruned by rule, ones it runs identically collapse; nothing here names an engine's rules."""

from __future__ import annotations

from pathlib import Path

import pytest

from builders import run_cli
from specfrontier.config.load import parse_config
from specfrontier.config.space import expand_space, setting_name
from specfrontier.engines.sglang import SGLangSetting
from specfrontier.engines.vllm import VllmSetting
from specfrontier.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]
SGLANG = {"name": "sglang", "model_path": "target", "draft_model_path": "head"}
BENCH_SPECULATIVE = {
    "algorithm": "EAGLE3",
    "num_steps": [1, 2, 3, 4, 5, 6],
    "eagle_topk": [1, 2, 4, 8],
    "num_draft_tokens": [2, 4, 8, 16, 32, 64],
}


def test_a_tree_space_expands_prunes_by_the_bound_and_collapses_chains() -> None:
    config = parse_config({"engine": SGLANG, "space": BENCH_SPECULATIVE})
    names = [s.name for s in config.settings]
    assert names[0] == "baseline" and not config.settings[0].speculative
    # 6 x 4 x 6 = 144: 6 x 6 chains collapse to 6, trees over SGLang's bound are pruned
    chains = [n for n in names if "-k1-" in n]
    assert chains == [f"eagle3-s{s}-k1-d{s + 1}" for s in range(1, 7)]
    assert "eagle3-s3-k4-d16" in names and "eagle3-s5-k8-d64" in names and "eagle3-s3-k2-d8" in names
    assert "eagle3-s1-k2-d4" not in names  # 2 + 0 * 4 + 1 = 3 < 4: SGLang cannot score 3 candidates
    summary = config.settings_summary or ""
    assert "pruned 30 of 144 combinations" in summary
    assert "num_draft_tokens > eagle_topk + (num_steps - 1) * eagle_topk^2 + 1" in summary
    assert "collapsed 30" in summary and "num_draft_tokens = num_steps + 1" in summary
    assert len(names) == 1 + 144 - 30 - 30
    assert len(set(names)) == len(names)


def test_names_do_not_depend_on_the_order_of_the_knobs() -> None:
    reordered = dict(reversed(list(BENCH_SPECULATIVE.items())))
    a = expand_space(BENCH_SPECULATIVE, SGLangSetting)
    b = expand_space(reordered, SGLangSetting)
    assert [s["name"] for s in a.settings] == [s["name"] for s in b.settings]


def test_a_single_valued_number_is_not_in_the_names_but_reaches_the_baseline() -> None:
    expansion = expand_space({**BENCH_SPECULATIVE, "max_running_requests": 64}, SGLangSetting)
    assert expansion.settings[0] == {"name": "baseline", "max_running_requests": 64}
    assert {"name": "eagle3-s3-k4-d16", "algorithm": "EAGLE3", "num_steps": 3, "eagle_topk": 4} | {
        "num_draft_tokens": 16,
        "max_running_requests": 64,
    } in expansion.settings


def test_a_vllm_space_expands_with_the_same_code() -> None:
    expansion = expand_space({"method": ["ngram", "suffix"], "num_speculative_tokens": [2, 4, 8]}, VllmSetting)
    names = [s["name"] for s in expansion.settings]
    assert names == ["baseline", "ngram-k2", "ngram-k4", "ngram-k8", "suffix-k2", "suffix-k4", "suffix-k8"]
    assert not expansion.pruned and not expansion.collapsed


def test_listed_settings_stay_and_a_listed_baseline_is_the_baseline() -> None:
    config = parse_config(
        {
            "engine": SGLANG,
            "settings": [{"name": "no-spec"}, {"name": "mine", "algorithm": "EAGLE3", "num_steps": 7}],
            "space": {"algorithm": "EAGLE3", "num_steps": [2, 3]},
        }
    )
    assert [s.name for s in config.settings] == ["no-spec", "mine", "eagle3-s2", "eagle3-s3"]


@pytest.mark.parametrize(
    ("space", "needle"),
    [
        ({"num_stepz": [1, 2]}, "space.num_stepz: not a knob of this engine's settings; fix: use one of"),
        ({"num_steps": []}, "space.num_steps = []: no values; fix:"),
        ({"algorithm": "EAGLE3", "adaptive_config": [{1: [3]}]}, "space.adaptive_config = {1: [3]}"),
        ({"algorithm": "EAGLE3", "num_steps": 2, "eagle_topk": 4, "num_draft_tokens": [40, 64]}, "every one of"),
        ([1, 2], "must be a mapping"),
    ],
)
def test_a_bad_space_is_one_line_with_the_fix(space: object, needle: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_config({"engine": SGLANG, "space": space})
    message = str(info.value)
    assert needle in message and "fix:" in message and "\n" not in message


def test_generated_names_are_valid_setting_names() -> None:
    assert (
        setting_name({"algorithm": "EAGLE3", "num_steps": 3, "eagle_topk": 4}, {"num_steps": "s"})
        == "eagle3-s3-eagle_topk4"
    )
    assert setting_name({"x": "a b/c", "y": 0.5}, {}) == "a_b_c-y0.5"


def test_tune_dry_run_lists_the_space_and_launches_nothing(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    monkeypatch.chdir(tmp_path)
    code, out, err = run_cli(
        monkeypatch, capsys, "tune", "--config", str(ROOT / "examples/sglang-tree-space.yaml"), "--dry-run"
    )
    assert code == 0, err
    assert "pruned 30 of 144 combinations" in err and "config valid: engine sglang, 85 setting(s)" in out
    assert "eagle3-s3-k4-d16: algorithm=EAGLE3, num_steps=3, eagle_topk=4, num_draft_tokens=16" in out
    assert not list(tmp_path.iterdir())  # no store written


def test_tune_dry_run_refuses_a_tree_over_sglangs_bound_with_exit_2(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    config = tmp_path / "c.yaml"
    config.write_text(
        "engine: {name: sglang, model_path: m}\nsettings:\n  - {name: b}\n"
        "  - {name: t, algorithm: EAGLE3, num_steps: 3, eagle_topk: 4, num_draft_tokens: 38}\n"
    )
    code, _, err = run_cli(monkeypatch, capsys, "tune", "--config", str(config), "--dry-run")
    assert code == 2 and "fix: set num_draft_tokens <= 37" in err
