"""Config validation: every bad input becomes one ConfigError line naming the field and the fix."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from specfrontier.config.load import default_config, load_config, parse_config
from specfrontier.errors import ConfigError

BASELINE = {"name": "baseline"}


def _config(**overrides: Any) -> dict[str, Any]:
    data: dict[str, Any] = {"settings": [BASELINE, {"name": "ng", "spec_type": "ngram-simple", "ngram_size_n": 3}]}
    data.update(overrides)
    return data


def test_default_config_is_the_embedded_cpu_sweep() -> None:
    cfg = default_config()
    assert cfg.engine.name == "llamacpp"
    assert cfg.engine.model == "smollm2"
    assert cfg.concurrency == (1, 2, 4)
    assert cfg.repeats == 3
    speculative = [s for s in cfg.settings if s.speculative]
    assert [s.name for s in cfg.settings if not s.speculative] == ["baseline"]
    assert 2 <= len(speculative) <= 4
    assert all(s.spec_type.startswith("ngram") for s in speculative)


def test_valid_config_parses_and_sorts_concurrency() -> None:
    cfg = parse_config(_config(concurrency=[4, 1, 2]))
    assert cfg.concurrency == (1, 2, 4)
    with pytest.raises(ConfigError, match=r"concurrency = \[4, 1, 2, 2\]: 2 is listed twice; fix: list each"):
        parse_config(_config(concurrency=[4, 1, 2, 2]))  # issue 39: it was dropped without a word
    assert cfg.settings[1].parameters() == {"spec_type": "ngram-simple", "ngram_size_n": 3}


def test_missing_settings_means_the_default_settings() -> None:
    cfg = parse_config({"concurrency": [1]})
    assert [s.name for s in cfg.settings] == [s.name for s in default_config().settings]


@pytest.mark.parametrize(
    ("data", "field", "fix"),
    [
        ({"engine": {"name": "exllamav2"}}, "engine.name = 'exllamav2'", "fix: use one of"),
        ({"concurrency": [0, 2]}, "concurrency[0] = 0", "fix: use a larger value"),
        ({"repeats": 0}, "repeats = 0", "fix: use a larger value"),
        ({"bogus_key": 1}, "bogus_key = 1", "fix: remove this key"),
        ({"engine": {"threds": 2}}, "engine.threds", "fix: remove this key"),
        (
            {"settings": [BASELINE, {"name": "x", "spec_type": "ngram-magic"}]},
            "settings[1].spec_type",
            "fix: use one of",
        ),
        (
            {"settings": [{"name": "x", "spec_type": "ngram-mod"}]},
            "no setting with spec_type 'none'",
            "fix: add a baseline",
        ),
        ({"settings": [BASELINE, BASELINE]}, "name = 'baseline' appears twice", "fix: give every setting"),
        ({"settings": [BASELINE, {"name": "d", "spec_type": "draft-simple"}]}, "engine.draft_model", "fix: set engine"),
        (
            {"settings": [BASELINE, {"name": "m", "spec_type": "ngram-mod", "ngram_size_n": 3}]},
            "settings[m]: ngram_size_n",
            "fix: remove them",
        ),
        ({"settings": [{"name": "b", "draft_n_max": 4}]}, "settings[b]: draft_n_max", "fix: set spec_type"),
        (
            {"settings": [BASELINE, {"name": "n", "spec_type": "draft-simple", "draft_n_min": 5, "draft_n_max": 2}]},
            "draft_n_min = 5 > draft_n_max = 2",
            "fix: make draft_n_min",
        ),
        (  # llama.cpp reads draft_n_max only for a draft model (common/speculative.cpp common_speculative_n_max)
            {"settings": [BASELINE, {"name": "n", "spec_type": "ngram-simple", "draft_n_max": 8}]},
            "settings[n]: draft_n_max = 8 with spec_type 'ngram-simple'",
            "fix: remove draft_n_max and set ngram-simple's draft length with ngram_size_m",
        ),
        (
            {"settings": [BASELINE, {"name": "c", "spec_type": "ngram-cache", "draft_n_max": 8}]},
            "settings[c]: draft_n_max = 8 with spec_type 'ngram-cache'",
            "fix: remove draft_n_max; ngram-cache always drafts up to 8 tokens",
        ),
        ({"settings": [{"name": "has space"}]}, "settings[0].name", "fix: use letters"),
        ({"workload": {"max_tokens": 0}}, "workload.max_tokens = 0", "fix: use a larger value"),
        ({"engine": {"name": "sglang"}}, "engine.model_path: missing", "fix: add this key"),
        ({"executor": {"kind": "slurm"}}, "executor.kind = 'slurm'", "fix: use one of"),
        ({"executor": {"kind": "ray", "resources": {"GPU": 0}}}, "executor.resources.GPU = 0", "fix: drop it"),
        ({"executor": {"kind": "ray", "max_attempts": 0}}, "executor.max_attempts = 0", "fix: use a larger value"),
        ({"executor": {"kind": "ray"}, "verify_schedule": True}, "with verify_schedule = true", "fix: run it"),
    ],
)
def test_invalid_config_names_field_and_fix(data: dict[str, Any], field: str, fix: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(data)
    message = str(info.value)
    assert field in message
    assert fix in message
    assert "\n" not in message


def test_load_config_reads_yaml(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("concurrency: [1, 8]\nrepeats: 2\nsettings:\n  - name: baseline\n")
    cfg = load_config(path)
    assert cfg.concurrency == (1, 8)
    assert cfg.repeats == 2


def test_load_config_errors_name_the_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"--config = .*cannot read.*fix: pass an existing file"):
        load_config(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("concurrency: [1, 2\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(bad)
    listing = tmp_path / "list.yaml"
    listing.write_text("- 1\n- 2\n")
    with pytest.raises(ConfigError, match="must be a mapping"):
        load_config(listing)
    wrong = tmp_path / "wrong.yaml"
    wrong.write_text("concurrency: [0]\n")
    with pytest.raises(ConfigError, match=str(wrong)):
        load_config(wrong)


def test_a_config_that_is_not_utf8_names_the_file_and_the_byte(tmp_path: Path) -> None:
    path = tmp_path / "latin1.yaml"
    path.write_bytes("# r\xe9glages\nrepeats: 2\n".encode("latin-1"))
    with pytest.raises(ConfigError) as exc:
        load_config(path)
    assert str(exc.value) == (
        f"--config = '{path}': not UTF-8 text (byte 0xe9 at offset 3, line 1); fix: save it as UTF-8"
    )


def test_load_defaults_to_closed_loop_and_existing_configs_are_unchanged() -> None:
    cfg = parse_config(_config())
    assert cfg.load.mode == "closed" and cfg.load.rates == ()


def test_open_loop_load_parses_and_sorts_rates() -> None:
    cfg = parse_config(_config(load={"mode": "open", "rates": [4, 1.5], "duration_s": 20, "burstiness": 0.5}))
    assert cfg.load.rates == (1.5, 4.0) and cfg.load.burstiness == 0.5
    with pytest.raises(ConfigError, match=r"load\.rates = \[4\.0, 1\.5, 4\.0\]: 4 is listed twice"):
        parse_config(_config(load={"mode": "open", "rates": [4, 1.5, 4], "duration_s": 20}))


@pytest.mark.parametrize(
    ("load", "match"),
    [
        ({"mode": "open", "duration_s": 10}, r"load\.rates: missing.*fix: add"),
        ({"mode": "open", "rates": [1]}, "exactly one of duration_s or requests"),
        ({"mode": "open", "rates": [1], "duration_s": 10, "requests": 5}, "exactly one of duration_s or requests"),
        ({"rates": [1]}, "fix: set load.mode: open"),
        ({"mode": "open", "rates": [1], "duration_s": 10, "warmup_s": 6, "cooldown_s": 4}, "leaves nothing"),
        ({"mode": "open", "rates": [0], "duration_s": 10}, r"load\.rates\[0\] = 0"),
        ({"mode": "poisson"}, r"load\.mode = 'poisson'.*fix: use one of the allowed values"),
        ({"mode": "open", "rates": [100001], "duration_s": 10}, r"load\.rates\[0\] = 100001.*fix: use a smaller"),
        ({"mode": "open", "rates": [1], "duration_s": 10, "max_in_flight": 4097}, r"load\.max_in_flight = 4097"),
    ],
)
def test_bad_load_names_the_field_and_the_fix(load: dict[str, Any], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        parse_config(_config(load=load))


LISTEN_MESSAGE = "specfrontier launches every server on 127.0.0.1 and a free port of its own; fix: remove "
SIM_HTTP = {"name": "sim", "face": "http"}
SGLANG = {"name": "sglang", "model_path": "m"}


@pytest.mark.parametrize(
    ("data", "where", "arg"),
    [
        (_config(settings=[{"name": "baseline", "extra_args": ["--host", "0.0.0.0"]}]), "settings[baseline]", "--host"),
        (_config(engine={"extra_args": ["--port", "80"]}), "engine", "--port"),
        (_config(engine={"extra_args": ["--host=0.0.0.0"]}), "engine", "--host=0.0.0.0"),
        ({"engine": SIM_HTTP, "settings": [{"name": "b", "extra_args": ["--allow-remote"]}]}, "settings[b]", None),
        ({"engine": SIM_HTTP, "settings": [{"name": "b", "extra_args": ["--ho", "0.0.0.0"]}]}, "settings[b]", "--ho"),
        ({"engine": {**SGLANG, "extra_args": ["--port=1"]}, "settings": [{"name": "b"}]}, "engine", "--port=1"),
        ({"engine": SGLANG, "settings": [{"name": "b", "extra_args": ["--host", "::"]}]}, "settings[b]", "--host"),
    ],
)
def test_extra_args_cannot_move_the_server_off_loopback(data: dict[str, Any], where: str, arg: str | None) -> None:
    with pytest.raises(ConfigError) as exc:
        parse_config(data)
    fix = {"--host": "--host (and its value)", "--port": "--port (and its value)", "--ho": "--ho (and its value)"}
    shown = arg or "--allow-remote"
    expected = f"config: {where}.extra_args: {shown}: {LISTEN_MESSAGE}{fix.get(shown, shown)}"
    assert str(exc.value).startswith(expected), str(exc.value)


def test_other_extra_args_pass_verbatim() -> None:
    args = ["--api-key", "secret", "--port-range", "1", "--hostname-alias", "x", "-h", "--flash-attn", "on"]
    cfg = parse_config(_config(engine={"extra_args": args}, settings=[{"name": "baseline", "extra_args": args}]))
    assert list(cfg.engine.extra_args) == args
    assert list(cfg.settings[0].extra_args) == args


def test_a_long_setting_name_is_refused_in_a_new_config_but_resumes_from_a_stored_one() -> None:
    """The 64-character limit came after runs were stored: `tune --resume` of such a run still parses."""
    data = _config(settings=[BASELINE, {"name": "n" * 65, "spec_type": "ngram-simple"}])
    with pytest.raises(ConfigError, match=r"settings\[1\]\.name = 'n{65}': longer than 64 characters"):
        parse_config(data)
    assert parse_config(data, stored=True).settings[1].name == "n" * 65
    assert parse_config(_config(settings=[BASELINE, {"name": "n" * 64, "spec_type": "ngram-simple"}]))


def test_values_are_quoted_cut_and_a_yaml_error_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(_config(client_workers="w" * 5000))
    assert str(info.value) == (
        f"config: client_workers = '{'w' * 79}… (5000 characters): not a worker count; "
        "fix: use a whole number from 1 to 256, or 'auto'"
    )
    bad = tmp_path / "bad.yaml"
    bad.write_text("repeats: 2\nsettings:\n  - name: baseline\n\tx: 1\n")
    with pytest.raises(ConfigError) as info:
        load_config(bad)
    assert "\n" not in str(info.value)
    assert str(info.value).startswith(f"{bad}:4:1: not valid YAML: found character '\\t' that cannot start any token")
