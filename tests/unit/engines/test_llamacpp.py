"""llama.cpp adapter: setting -> argv with probed spellings, checks before launch, counter parsing."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from specfrontier.config.common import describe_validation_error
from specfrontier.config.space import expand_space
from specfrontier.engines.llamacpp import (
    LlamaCppAdapter,
    LlamaCppEngine,
    LlamaCppSetting,
    flags_in_help,
)
from specfrontier.engines.prometheus import counters_from_metrics
from specfrontier.errors import ConfigError
from specfrontier.records import RequestSpecStats, SpecCounters

# Excerpts in the shape of `llama-server --help` (b11434 style, and an older build before the renames).
NEW_HELP = """
-t,    --threads N                      number of CPU threads to use during generation (default: -1)
-c,    --ctx-size N                     size of the prompt context (default: 4096, 0 = loaded from model)
-np,   --parallel N                     number of server slots (default: -1, -1 = auto)
-md,   --model-draft, --spec-draft-model FNAME   draft model for speculative decoding (default: unused)
--spec-type [none|draft-simple|ngram-simple|ngram-map-k|ngram-map-k4v|ngram-mod|ngram-cache]
--spec-draft-n-max N                    number of tokens to draft (default: 3)
--spec-draft-n-min N                    minimum number of draft tokens (default: 0)
--spec-draft-p-min, --draft-p-min P     minimum speculative decoding probability (default: 0.00)
--spec-ngram-simple-size-n N            ngram size N (default: 12)
--spec-ngram-simple-size-m N            ngram size M (default: 48)
--spec-ngram-simple-min-hits N          min hits (default: 1)
--spec-ngram-mod-n-min N  --spec-ngram-mod-n-max N  --spec-ngram-mod-n-match N
--host HOST   --port PORT   --metrics
"""
OLD_HELP = """
-t,    --threads N
-c,    --ctx-size N
-np,   --parallel N
-md,   --model-draft FNAME
--draft-max, --draft, --draft-n N       number of tokens to draft (default: 16)
--draft-min, --draft-n-min N
--draft-p-min P
--host HOST   --port PORT   --metrics
"""


def _adapter(tmp_path: Path, help_text: str = NEW_HELP, **engine: object) -> LlamaCppAdapter:
    binary = tmp_path / "llama-server"
    binary.write_text("#!/bin/sh\n")
    model = tmp_path / "target.gguf"
    model.write_bytes(b"GGUF")
    draft = tmp_path / "draft.gguf"
    draft.write_bytes(b"GGUF")
    cfg = LlamaCppEngine(binary=binary, model=str(model), draft_model=draft, **engine)  # type: ignore[arg-type]
    return LlamaCppAdapter(cfg, help_text=help_text)


def _pairs(argv: list[str]) -> dict[str, str]:
    """Flag -> value for every `--flag value` pair (flags without a value map to '')."""
    out: dict[str, str] = {}
    i = 0
    while i < len(argv):
        if argv[i].startswith("-"):
            nxt = argv[i + 1] if i + 1 < len(argv) else ""
            has_value = nxt and not nxt.startswith("--")
            out[argv[i]] = nxt if has_value else ""
            i += 2 if has_value else 1
        else:
            i += 1
    return out


def test_baseline_command_binds_loopback_with_metrics_and_slots(tmp_path: Path) -> None:
    adapter = _adapter(tmp_path, threads=2, ctx_size=4096)
    baseline = LlamaCppSetting(name="baseline")
    adapter.prepare((baseline,))
    argv = adapter.command(baseline, port=18080, max_concurrency=4)
    assert argv[0] == str(tmp_path / "llama-server")
    flags = _pairs(argv[1:])
    assert flags["--host"] == "127.0.0.1"
    assert flags["--port"] == "18080"
    assert flags["-m"] == str(tmp_path / "target.gguf")
    assert "--metrics" in flags
    assert (flags["--threads"], flags["--ctx-size"], flags["--parallel"]) == ("2", "4096", "4")
    assert not any(a.startswith("--spec") for a in argv)


def test_ngram_simple_renders_type_and_sizes(tmp_path: Path) -> None:
    adapter = _adapter(tmp_path)
    s = LlamaCppSetting(name="ng", spec_type="ngram-simple", ngram_size_n=3, ngram_size_m=8, ngram_min_hits=2)
    adapter.prepare((s,))
    flags = _pairs(adapter.command(s, port=1, max_concurrency=1)[1:])
    assert flags["--spec-type"] == "ngram-simple"
    assert flags["--spec-ngram-simple-size-n"] == "3"
    assert flags["--spec-ngram-simple-size-m"] == "8"
    assert flags["--spec-ngram-simple-min-hits"] == "2"


def test_draft_simple_needs_explicit_type_and_uses_new_spellings(tmp_path: Path) -> None:
    adapter = _adapter(tmp_path)
    s = LlamaCppSetting(name="d", spec_type="draft-simple", draft_n_max=8, draft_n_min=1, draft_p_min=0.5)
    adapter.prepare((s,))
    flags = _pairs(adapter.command(s, port=1, max_concurrency=1)[1:])
    assert flags["--spec-draft-model"] == str(tmp_path / "draft.gguf")
    assert flags["--spec-type"] == "draft-simple"  # -md alone would load the draft but never use it
    assert (flags["--spec-draft-n-max"], flags["--spec-draft-n-min"], flags["--spec-draft-p-min"]) == ("8", "1", "0.5")


def test_old_build_gets_old_spellings_for_draft_model(tmp_path: Path) -> None:
    adapter = _adapter(tmp_path, OLD_HELP)
    s = LlamaCppSetting(name="d", spec_type="draft-simple", draft_n_max=8, draft_n_min=2)
    adapter.prepare((s,))
    argv = adapter.command(s, port=1, max_concurrency=1)
    flags = _pairs(argv[1:])
    assert flags["--model-draft"] == str(tmp_path / "draft.gguf")
    assert flags["--draft-max"] == "8" and flags["--draft-min"] == "2"
    assert "--spec-type" not in argv


def test_setting_the_installed_version_cannot_express_is_refused_before_launch(tmp_path: Path) -> None:
    adapter = _adapter(tmp_path, OLD_HELP)
    s = LlamaCppSetting(name="ng", spec_type="ngram-mod")
    with pytest.raises(ConfigError, match=r"settings\[ng\]\.spec_type: .*--spec-type.*fix: install"):
        adapter.prepare((s,))


@pytest.mark.parametrize(
    ("spec_type", "given", "fix"),
    [
        (
            "ngram-simple",
            {"draft_n_max": 8},
            "fix: remove draft_n_max and set ngram-simple's draft length with ngram_size_m (default 48)",
        ),
        (
            "ngram-map-k",
            {"draft_n_max": 8},
            "fix: remove draft_n_max and set ngram-map-k's draft length with ngram_size_m",
        ),
        ("ngram-map-k4v", {"draft_n_min": 2}, "fix: remove draft_n_min; ngram-map-k4v has no minimum draft length"),
        (
            "ngram-mod",
            {"draft_n_max": 8},
            "fix: remove draft_n_max and set ngram-mod's draft length with ngram_mod_n_max (default 64)",
        ),
        (
            "ngram-mod",
            {"draft_n_min": 2},
            "fix: remove draft_n_min and set ngram-mod's minimum draft length with ngram_mod_n_min",
        ),
        ("ngram-cache", {"draft_n_max": 8}, "fix: remove draft_n_max; ngram-cache always drafts up to 8 tokens"),
        ("ngram-cache", {"draft_p_min": 0.5}, "fix: remove draft_p_min; an n-gram drafter has no draft probability"),
    ],
)
def test_draft_model_knobs_on_an_ngram_type_are_refused_naming_the_types_own(
    spec_type: str, given: dict[str, object], fix: str
) -> None:
    """llama.cpp b11434 reads draft.n_max/n_min/p_min only for the draft-model types: `common_speculative_n_max`
    (common/speculative.cpp:2396-2430) takes `draft.n_max` for DRAFT_SIMPLE/EAGLE3/MTP/DFLASH/DSPARK,
    `size_m` for NGRAM_SIMPLE/MAP_K/MAP_K4V, `ngram_mod.n_max` for NGRAM_MOD and 8 for NGRAM_CACHE
    (`create_state_ngram_cache`, line 2272); only the draft implementations (lines 218, 514, 982, 1390) are
    built from `params.draft`, the n-gram ones (1831, 1876, 1930, 2105) are not. (The per-request
    `speculative.n_max/n_min/p_min` of tools/server/server-schema.cpp:200-208 would set `draft.*` too, and
    sit inside `#if 0` there.) So an n-gram setting with them runs the same server under another name."""
    ((field, value),) = given.items()
    with pytest.raises(ValidationError) as caught:
        LlamaCppSetting.model_validate({"name": "ng", "spec_type": spec_type, **given})
    message = describe_validation_error(caught.value, "config")
    assert message.startswith(f"config: settings[ng]: {field} = {value} with spec_type {spec_type!r}: "), message
    assert "only for a draft-model type (draft-simple)" in message and "common_speculative_n_max" in message
    assert fix in message, message


def test_draft_model_knobs_on_no_speculation_are_refused() -> None:
    with pytest.raises(ValidationError, match=r"need a draft-model spec_type; fix: set spec_type: draft-simple"):
        LlamaCppSetting(name="b", draft_p_min=0.5)


def test_a_space_crossing_spec_type_with_draft_knobs_keeps_one_ngram_setting_per_own_knob() -> None:
    """The engine runs an n-gram type the same whatever draft_n_max says, so those combinations collapse
    (`EngineSetting.space_point`) instead of being refused: the n-gram settings survive, once each."""
    space = {"spec_type": ["draft-simple", "ngram-simple"], "draft_n_max": [4, 8], "ngram_size_m": [None, 16]}
    expansion = expand_space(space, LlamaCppSetting)
    names = [s["name"] for s in expansion.settings]
    assert names == ["baseline", "draft-simple-d4", "draft-simple-d8", "ngram-simple", "ngram-simple-m16"], names
    assert all("draft_n_max" not in s for s in expansion.settings if str(s["name"]).startswith("ngram"))
    assert "an n-gram spec_type ignores draft_n_max/draft_n_min/draft_p_min" in expansion.summary()


def test_missing_model_file_names_the_field(tmp_path: Path) -> None:
    adapter = _adapter(tmp_path)
    adapter.engine = adapter.engine.model_copy(update={"model": str(tmp_path / "missing.gguf")})
    with pytest.raises(ConfigError, match=r"engine\.model = .*missing\.gguf.*not found; fix:"):
        adapter.prepare((LlamaCppSetting(name="baseline"),))


def test_missing_binary_names_the_field(tmp_path: Path) -> None:
    adapter = _adapter(tmp_path)
    adapter.engine = adapter.engine.model_copy(update={"binary": tmp_path / "nope"})
    with pytest.raises(ConfigError, match=r"engine\.binary = .*not found; fix:"):
        adapter.prepare((LlamaCppSetting(name="baseline"),))


def test_extra_args_are_passed_verbatim_as_separate_arguments(tmp_path: Path) -> None:
    adapter = _adapter(tmp_path, extra_args=("--seed", "7"))
    s = LlamaCppSetting(name="b", extra_args=("--flash-attn", "off; rm -rf /"))
    adapter.prepare((s,))
    argv = adapter.command(s, port=1, max_concurrency=1)
    assert argv[-4:] == ["--seed", "7", "--flash-attn", "off; rm -rf /"]  # no shell: stays one argument


def test_flags_in_help_ignores_numbers_and_prose() -> None:
    flags = flags_in_help("-np,   --parallel N   (default: -1, -1 = auto) see e.g. --metrics")
    assert flags == {"-np", "--parallel", "--metrics"}


METRICS = """# HELP llamacpp:prompt_tokens_total Number of prompt tokens processed.
# TYPE llamacpp:prompt_tokens_total counter
llamacpp:prompt_tokens_total 1200
llamacpp:spec_decode_num_draft_tokens_total 400
llamacpp:spec_decode_num_accepted_tokens_total 300
llamacpp:spec_decode_num_drafts_total 50
llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="0"} 48
llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="2"} 40
llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="1"} 45
"""


def test_counters_from_metrics_reads_totals_and_positions_in_order() -> None:
    c = counters_from_metrics(METRICS, "llamacpp:")
    assert c == SpecCounters(400, 300, 50, (48, 45, 40))
    before = SpecCounters(100, 90, 20, (20, 19))
    window = c.minus(before)
    assert window == SpecCounters(300, 210, 30, (28, 26, 40))


def test_counters_absent_in_old_builds_give_none() -> None:
    assert counters_from_metrics("llamacpp:prompt_tokens_total 5\n", "llamacpp:") is None


def test_request_spec_stats_from_final_chunk_timings(tmp_path: Path) -> None:
    adapter = _adapter(tmp_path)
    assert adapter.request_spec_stats({"timings": {"draft_n": 12, "draft_n_accepted": 9}}) == RequestSpecStats(12, 9)
    assert adapter.request_spec_stats({"timings": {"predicted_n": 5}}) == RequestSpecStats(0, 0)
    assert adapter.request_spec_stats({"choices": []}) is None


def test_removed_options_listed_in_help_are_not_used() -> None:
    text = (
        "--spec-draft-n-max N                    number of tokens to draft (default: 3)\n"
        "--draft, --draft-n, --draft-max N       the argument has been removed. use --spec-draft-n-max or\n"
        "                                        --spec-ngram-mod-n-max\n"
        "--metrics                               enable prometheus\n"
    )
    assert flags_in_help(text) == {"--spec-draft-n-max", "--metrics"}


def test_requests_disable_the_prompt_cache_so_repeats_agree(tmp_path: Path) -> None:
    assert _adapter(tmp_path).request_extras() == {"cache_prompt": False}


def test_slots_default_to_the_highest_concurrency_unless_the_setting_sets_them(tmp_path: Path) -> None:
    adapter = _adapter(tmp_path)
    default, fixed = LlamaCppSetting(name="a"), LlamaCppSetting(name="b", slots=2)
    adapter.prepare((default, fixed))
    assert _pairs(adapter.command(default, port=1, max_concurrency=8)[1:])["--parallel"] == "8"
    assert _pairs(adapter.command(fixed, port=1, max_concurrency=8)[1:])["--parallel"] == "2"
