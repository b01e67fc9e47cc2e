"""SGLang settings accepted and refused exactly where sglang 0.5.23 accepts and refuses them.

The rules are restated from SGLang's source in tests/engine_rules.py, each with its file and line; the
validator (`engines/sglang_rules.py`) must agree with them over a grid, and every refusal names the rule
and what SGLang would accept.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
from pydantic import ValidationError

from engine_rules import (
    SGLANG_ALIASES,
    SGLANG_BUILTINS,
    Rewritten,
    SGLangShape,
    sglang_dflash,
    sglang_eagle_family,
    sglang_from_string,
    sglang_ngram,
)
from specfrontier.config.load import load_config, parse_config
from specfrontier.engines.sglang import SGLangAdapter, SGLangEngine, SGLangSetting, setting_args
from specfrontier.engines.sglang_rules import DOCUMENTED_ALGORITHMS, algorithms_from_help
from specfrontier.errors import ConfigError

ROOT = Path(__file__).resolve().parents[3]
DOCUMENTED = [("EAGLE3", 3, 4, 16), ("EAGLE3", 5, 8, 64), ("EAGLE", 3, 2, 8), ("NEXTN", 3, 1, 4)]
"""SGLang's documented examples (docs/advanced_features/speculative_decoding.md: EAGLE-2 with
`--speculative-num-steps 5 --speculative-eagle-topk 8 --speculative-num-draft-tokens 64`, its OOM advice's
"conservative" 3 / 4 / 16, MTP 3 / 1 / 4) and a narrow tree (3, 2, 8)."""
OLD_HELP = """usage: launch_server [-h] --model-path MODEL_PATH [--host HOST] [--port PORT]
  --speculative-algorithm {EAGLE,EAGLE3,NEXTN,STANDALONE,NGRAM}
                        Speculative algorithm.
  --speculative-num-steps N --speculative-eagle-topk K --speculative-num-draft-tokens D
  --max-running-requests MAX_RUNNING_REQUESTS
"""
HELP_0_5_23 = """usage: launch_server [-h] --model-path MODEL_PATH [--speculative-algorithm SPECULATIVE_ALGORITHM]
                     [--uno-lora-path UNO_LORA_PATH] [--host HOST] [--port PORT]
  --speculative-algorithm SPECULATIVE_ALGORITHM
                        Speculative algorithm. Builtins: EAGLE, EAGLE3, NEXTN,
                        STANDALONE, NGRAM, DFLASH, DSPARK, UNO. Or any name
                        registered via `SpeculativeAlgorithm.register`.
  --uno-lora-path UNO_LORA_PATH
  --speculative-num-steps N --speculative-eagle-topk K --speculative-num-draft-tokens D
  --speculative-dflash-block-size B --speculative-draft-window-size W
  --max-running-requests MAX_RUNNING_REQUESTS
"""
ENGINE = SGLangEngine(model_path="target", draft_model_path="draft")


def _accepts(**fields: object) -> bool:
    try:
        SGLangSetting.model_validate({"name": "s", **fields})
    except ValidationError:
        return False
    return True


def _refusal(**fields: object) -> str:
    with pytest.raises(ValidationError) as info:
        SGLangSetting.model_validate({"name": "s", **fields})
    return str(info.value)


@pytest.mark.parametrize(("algorithm", "steps", "topk", "draft"), DOCUMENTED)
def test_sglang_documented_examples_load(algorithm: str, steps: int, topk: int, draft: int) -> None:
    """Refused before (by `num_draft_tokens <= steps * topk + 1`); SGLang runs them as given."""
    config = parse_config(
        {
            "engine": {"name": "sglang", "model_path": "target", "draft_model_path": "draft"},
            "settings": [
                {"name": "baseline"},
                {
                    "name": "tree",
                    "algorithm": algorithm,
                    "num_steps": steps,
                    "eagle_topk": topk,
                    "num_draft_tokens": draft,
                },
            ],
        }
    )
    argv = setting_args(config.settings[1])
    assert argv == [
        "--speculative-algorithm", algorithm, "--speculative-num-steps", str(steps),
        "--speculative-eagle-topk", str(topk), "--speculative-num-draft-tokens", str(draft),
    ]  # fmt: skip


def test_tree_rule_matches_sglang_over_a_grid() -> None:
    """eagle_utils.py:110 (torch.topk over the scored candidates), speculative_hook.py:1159-1163 (assert) and
    1256-1266 (the topk-1 rewrite): accepted exactly where SGLang starts and runs the setting as given."""
    checked = 0
    for steps, topk, draft in itertools.product([None, *range(1, 8)], [None, *range(1, 9)], [None, *range(2, 90)]):
        try:
            sglang_eagle_family(SGLangShape(steps, topk, draft))
            sglang_runs_it = True
        except (AssertionError, Rewritten, TypeError, RuntimeError):
            sglang_runs_it = False
        fields = {"algorithm": "EAGLE3", "num_steps": steps, "eagle_topk": topk, "num_draft_tokens": draft}
        assert _accepts(**fields) == sglang_runs_it, fields
        checked += 1
    assert checked == 8 * 9 * 89


def test_a_refused_tree_names_the_bound_and_what_sglang_accepts() -> None:
    message = _refusal(algorithm="EAGLE3", num_steps=3, eagle_topk=4, num_draft_tokens=38)
    assert "num_draft_tokens = 38 > eagle_topk + (num_steps - 1) * eagle_topk^2 + 1 = 37" in message
    assert "organize_draft_results" in message and "fix: set num_draft_tokens <= 37" in message
    assert _accepts(algorithm="EAGLE3", num_steps=3, eagle_topk=4, num_draft_tokens=37)  # equality: SGLang's topk fits


def test_a_topk1_chain_must_verify_steps_plus_one() -> None:
    """speculative_hook.py:1256-1266 rewrites it; refused with the value SGLang would use."""
    message = _refusal(algorithm="NEXTN", num_steps=3, eagle_topk=1, num_draft_tokens=8)
    assert "SGLang rewrites it to num_steps + 1 = 4" in message and "fix: set num_draft_tokens to 4" in message


@pytest.mark.parametrize("name", [*SGLANG_BUILTINS, *SGLANG_ALIASES, "eagle3", "Medusa", "LOOKAHEAD"])
def test_algorithm_names_as_sglang_reads_them(name: str) -> None:
    """spec_info.py:50-65 (upper-cased; a member or the NEXTN alias, else Unknown ...)."""
    try:
        expected: str | None = sglang_from_string(name)
    except ValueError:
        expected = None
    fields: dict[str, object] = {"algorithm": name}
    if name.upper() == "DFLASH":
        fields["num_draft_tokens"] = 16
    if expected is None:
        assert "has no such speculative algorithm" in _refusal(**fields)
    else:
        assert SGLangSetting.model_validate({"name": "s", **fields}).algorithm == expected
    assert set(DOCUMENTED_ALGORITHMS) == set(SGLANG_BUILTINS) | set(SGLANG_ALIASES)


def test_ngram_breadth_replaces_eagle_topk() -> None:
    """speculative_hook.py:1309-1313; its knobs are passed under their own flags (fields/spec.py:252-271)."""
    with pytest.raises(Rewritten):
        sglang_ngram(4)
    assert "replaces it by ngram_max_bfs_breadth" in _refusal(algorithm="NGRAM", eagle_topk=4, num_draft_tokens=8)
    setting = SGLangSetting(name="n", algorithm="NGRAM", num_draft_tokens=16, ngram_max_bfs_breadth=4)
    assert setting_args(setting) == [
        "--speculative-algorithm", "NGRAM", "--speculative-num-draft-tokens", "16",
        "--speculative-ngram-max-bfs-breadth", "4",
    ]  # fmt: skip
    assert SGLangSetting(name="n", algorithm="NGRAM").resolved_draft_tokens == 12  # speculative_hook.py:1314-1318
    assert "apply to algorithm NGRAM only" in _refusal(algorithm="EAGLE3", num_steps=2, ngram_max_bfs_breadth=4)


@pytest.mark.parametrize(
    ("fields", "needle"),
    [
        ({"num_steps": 3}, "SGLang overrides it to 1"),
        ({"eagle_topk": 4}, "SGLang overrides it to 1"),
        ({"num_draft_tokens": 16, "dflash_block_size": 8}, "must match"),
        ({"dflash_block_size": 16, "draft_window_size": 8}, "draft_window_size = 8 < the block size 16"),
    ],
)
def test_dflash_rules(fields: dict[str, int], needle: str) -> None:
    """speculative_hook.py _handle_dflash: 334-365 (steps/topk overridden), 374-382, 427-434."""
    with pytest.raises((Rewritten, ValueError)):
        sglang_dflash(
            fields.get("num_steps"),
            fields.get("eagle_topk"),
            fields.get("num_draft_tokens"),
            fields.get("dflash_block_size"),
            fields.get("draft_window_size"),
        )
    assert needle in _refusal(algorithm="DFLASH", **fields)


def test_dflash_needs_a_draft_model() -> None:
    """speculative_hook.py:324-327: refused at config load, before any launch."""
    data = {
        "engine": {"name": "sglang", "model_path": "target"},
        "settings": [{"name": "b"}, {"name": "df", "algorithm": "DFLASH", "dflash_block_size": 16}],
    }
    with pytest.raises(ConfigError, match=r"DFLASH needs a draft model.*fix: set engine.draft_model_path"):
        parse_config(data)
    data["engine"] = {"name": "sglang", "model_path": "target", "draft_model_path": "z-lab/dflash"}
    setting = parse_config(data).settings[1]
    assert setting_args(setting) == ["--speculative-algorithm", "DFLASH", "--speculative-dflash-block-size", "16"]


def test_algorithms_probed_from_the_installed_help() -> None:
    """Argparse choices (older releases) are the list; 0.5.23's help names its builtins (the enum also
    takes FROZEN_KV_MTP and the NEXTN alias); a help naming neither falls back to the documented list."""
    assert algorithms_from_help(OLD_HELP) == ("EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM")
    probed = algorithms_from_help(HELP_0_5_23)
    assert probed is not None and {"DFLASH", "DSPARK", "UNO", "FROZEN_KV_MTP"} <= set(probed)
    assert algorithms_from_help("usage: server --port PORT") is None


def test_an_algorithm_the_installed_sglang_lacks_is_refused_before_launch() -> None:
    dflash = SGLangSetting(name="df", algorithm="DFLASH", num_draft_tokens=16)
    with pytest.raises(
        ConfigError, match=r"algorithm = 'DFLASH'.*fix: use one of EAGLE, EAGLE3, NEXTN, STANDALONE, NGRAM"
    ):
        SGLangAdapter(ENGINE, help_text=OLD_HELP).prepare((SGLangSetting(name="b"), dflash))
    SGLangAdapter(ENGINE, help_text=HELP_0_5_23).prepare((SGLangSetting(name="b"), dflash))


def test_a_knob_flag_the_installed_sglang_lacks_is_refused_before_launch() -> None:
    ngram = SGLangSetting(name="ng", algorithm="NGRAM", ngram_max_bfs_breadth=4)
    with pytest.raises(ConfigError, match=r"--speculative-ngram-max-bfs-breadth"):
        SGLangAdapter(ENGINE, help_text=OLD_HELP).prepare((SGLangSetting(name="b"), ngram))


def test_example_tree_space_loads() -> None:
    config = load_config(ROOT / "examples" / "sglang-tree-space.yaml")
    names = {s.name for s in config.settings}
    assert {"baseline", "eagle3-s3-k4-d16", "eagle3-s5-k8-d64", "eagle3-s3-k2-d8", "eagle3-s3-k1-d4"} <= names
    assert config.settings_summary is not None and "pruned" in config.settings_summary
