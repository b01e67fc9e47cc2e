"""`specfrontier import`: the seed table, CSV and JSON rows become a run; bad rows fail before any write,
naming the file, the row, the field and the fix."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from builders import DATA
from specfrontier.engines import registry
from specfrontier.errors import ConfigError
from specfrontier.runs.imported import load_table, store_table
from specfrontier.store import Store

SEED = DATA / "seed_frontier.json"


def test_seed_table_imports_with_engine_flags_and_capacities(tmp_path: Path) -> None:
    table = load_table(SEED)
    assert table.engine == "sglang"
    assert [s.name for s in table.settings] == ["steps1", "steps2", "steps3", "steps4"]
    assert table.settings[0].params == {"algorithm": "EAGLE3", "num_steps": 1, "eagle_topk": 1}
    assert [s.capacity for s in table.settings] == [26, 21, 17, None]
    assert len(table.cells) == 14
    store = Store(tmp_path / "s.db")
    run_id = store_table(store, table)
    run = store.run(run_id)
    assert run.status == "done" and run.environment["imported"] is True
    cells = {(c.setting_id, c.concurrency): c for c in store.imported_cells(run_id)}
    assert cells[("steps3", 32)].aggregate_tok_s == 1979 and cells[("steps3", 32)].per_request_tok_s is None
    assert cells[("steps4", 1)].per_request_tok_s == 277
    assert {s.name: s.capacity for s in store.settings(run_id)}["steps2"] == 21


def test_csv_rows_with_acceptance_and_batch_size(tmp_path: Path) -> None:
    path = tmp_path / "m.csv"
    path.write_text(
        "setting,spec_type,draft_n_max,batch_size,aggregate_tok_s,per_request_tok_s,capacity,"
        "acceptance_length,acceptance_per_position\n"
        "base,none,,1,50,50,4,,\n"
        "d8,draft-simple,8,1,70.5,70.5,4,2.5,0.8;0.5;0.2\n"
        "d8,draft-simple,8,4,150,40,4,2.4,\n",
        encoding="utf-8",
    )
    table = load_table(path, engine="llamacpp")
    assert table.engine == "llamacpp"
    assert [(s.name, s.speculative) for s in table.settings] == [("base", False), ("d8", True)]
    first = table.cells[1]
    assert first.acceptance_per_position == (0.8, 0.5, 0.2) and first.acceptance_length == 2.5
    store = Store(tmp_path / "s.db")
    run_id = store_table(store, table)
    back = store.imported_cells(run_id)
    assert sorted((c.setting_id, c.concurrency) for c in back) == [("base", 1), ("d8", 1), ("d8", 4)]
    assert next(c for c in back if c.setting_id == "d8" and c.concurrency == 1).acceptance_per_position == (
        0.8,
        0.5,
        0.2,
    )


def test_json_cells_object_with_model_shape(tmp_path: Path) -> None:
    path = tmp_path / "m.json"
    rows = [
        {"method": "eagle3", "num_speculative_tokens": 2, "concurrency": 8, "aggregate_tok_s": 900},
        {"method": "eagle3", "num_speculative_tokens": 3, "concurrency": 8, "aggregate_tok_s": 950},
    ]
    path.write_text(
        json.dumps({"engine": "vllm", "model": {"experts": 128, "experts_per_token": 8}, "cells": rows}),
        encoding="utf-8",
    )
    table = load_table(path)
    assert table.engine == "vllm" and table.metadata["model"]["experts"] == 128
    assert [s.name for s in table.settings] == ["eagle3-s2", "eagle3-s3"]


def _rows(tmp_path: Path, rows: list[dict[str, object]], engine: str | None = "sglang") -> Path:
    path = tmp_path / "bad.json"
    path.write_text(json.dumps({"engine": engine, "cells": rows} if engine else rows), encoding="utf-8")
    return path


GOOD = {"algorithm": "EAGLE3", "num_steps": 2, "concurrency": 4, "aggregate_tok_s": 500.0}


@pytest.mark.parametrize(
    ("rows", "message"),
    [
        ([{**GOOD, "tokps": 3}], r"row 1: tokps = 3: unknown column; fix: use only"),
        ([{k: v for k, v in GOOD.items() if k != "concurrency"}], r"row 1: concurrency is missing; fix: add"),
        ([{**GOOD, "aggregate_tok_s": -5}], r"row 1: aggregate_tok_s = -5: must be > 0"),
        ([{**GOOD, "aggregate_tok_s": None}], r"row 1: no figure"),
        ([GOOD, GOOD], r"row 2: setting 'EAGLE3-s2' at concurrency 4 repeats .*row 1; fix: keep one"),
        ([{**GOOD, "acceptance_length": 3.5}], r"row 1: acceptance_length = 3.5: must lie in \[1, 3\]"),
        ([{**GOOD, "per_request_tok_s": 600}], r"row 1: per_request_tok_s = 600 exceeds aggregate_tok_s = 500"),
        ([{**GOOD, "concurrency": 2.5}], r"row 1: concurrency = 2.5: must be a whole number >= 1"),
        ([{**GOOD, "concurrency": 4, "batch_size": 8}], r"concurrency = 4 and batch_size = 8 disagree"),
        (
            [{**GOOD, "setting": "a"}, {**GOOD, "setting": "a", "num_steps": 3, "concurrency": 8}],
            r"row 2: setting 'a' has other parameters than in .*row 1",
        ),
        ([{**GOOD, "acceptance_per_position": [0.9, 1.5]}], r"acceptance_per_position = .*\[0, 1\]"),
        ([{**GOOD, "algorithm": "EAGLE3", "num_steps": None}], r"no draft depth; fix: add one of num_steps"),
    ],
)
def test_bad_rows_name_row_field_and_fix(tmp_path: Path, rows: list[dict[str, object]], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_table(_rows(tmp_path, rows))


def test_an_engine_that_is_no_name_is_refused_with_the_registered_names(tmp_path: Path) -> None:
    names = ", ".join(registry.engine_names())
    with pytest.raises(ConfigError) as info:
        load_table(_rows(tmp_path, [GOOD], engine="vLLM 0.11!"))
    assert str(info.value).endswith(f"engine = 'vLLM 0.11!': not an engine name; fix: write one such as {names}")


def test_missing_engine_and_unreadable_files(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"engine is missing; fix: .*--engine"):
        load_table(_rows(tmp_path, [GOOD], engine=None))
    bad = tmp_path / "x.json"
    bad.write_text("{nope", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"not valid JSON .*line 1"):
        load_table(bad)
    with pytest.raises(ConfigError, match=r"cannot read it"):
        load_table(tmp_path / "absent.csv")
    csv_path = tmp_path / "y.csv"
    csv_path.write_text("engine,steps,concurrency,aggregate,\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"column 'aggregate': unknown"):
        load_table(csv_path)


def test_a_non_utf8_csv_names_the_file_and_the_byte(tmp_path: Path) -> None:
    path = tmp_path / "excel.csv"
    path.write_bytes("engine,setting,concurrency,aggregate_tok_s\nsglang,caf\xe9,1,10\n".encode("cp1252"))
    with pytest.raises(ConfigError) as exc:
        load_table(path)
    assert str(exc.value) == (
        f"import: path = '{path}': not UTF-8 text (byte 0xe9 at offset 53, line 2); fix: save it as UTF-8"
    )


def test_a_csv_saved_with_a_byte_order_mark_imports(tmp_path: Path) -> None:
    path = tmp_path / "bom.csv"
    path.write_bytes("\ufeffengine,setting,concurrency,aggregate_tok_s\nsglang,base,1,10\n".encode())
    assert load_table(path).settings[0].name == "base"


def test_every_problem_of_a_file_is_listed_at_once(tmp_path: Path) -> None:
    rows = [
        {**GOOD, "tokps": 3},
        GOOD,
        {**GOOD, "aggregate_tok_s": -5, "concurrency": 8},
        {**GOOD, "concurrency": 4},
    ]
    with pytest.raises(ConfigError) as info:
        load_table(_rows(tmp_path, rows))
    text = str(info.value)
    assert text.splitlines()[0].endswith("3 problem(s), nothing imported:")
    assert "- row 1: tokps = 3: unknown column" in text
    assert "- row 3: aggregate_tok_s = -5: must be > 0" in text
    assert "- row 4: setting 'EAGLE3-s2' at concurrency 4 repeats" in text and text.count("fix:") == 3


def test_a_speedup_table_imports_against_its_stated_baseline(tmp_path: Path) -> None:
    rows = [
        {"algorithm": None, "concurrency": 1, "per_request_tok_s": 100.0, "aggregate_tok_s": 100.0},
        {"algorithm": "EAGLE3", "num_steps": 3, "concurrency": 1, "speedup": 2.5},
        {"algorithm": "EAGLE3", "num_steps": 3, "concurrency": 8, "speedup": 1.5, "speedup_of": "aggregate_tok_s",
         "baseline_tok_s": 600},
    ]  # fmt: skip
    table = load_table(_rows(tmp_path, rows))
    by_level = {c.concurrency: c for c in table.cells if c.setting_id == "EAGLE3-s3"}
    assert by_level[1].per_request_tok_s == pytest.approx(250.0) and by_level[1].aggregate_tok_s is None
    assert "speedup 2.5 x 100 tok/s of no-spec at concurrency 1" in by_level[1].source
    assert by_level[8].aggregate_tok_s == pytest.approx(900.0) and "baseline_tok_s on the row" in by_level[8].source
    no_base = [{"algorithm": "EAGLE3", "num_steps": 3, "concurrency": 4, "speedup": 2.0}]
    with pytest.raises(ConfigError, match=r"speedup = 2: no baseline per_request_tok_s at concurrency 4; fix: add the"):
        load_table(_rows(tmp_path, no_base))
    on_baseline = [{"algorithm": None, "concurrency": 1, "speedup": 1.0}]
    with pytest.raises(ConfigError, match=r"speedup = 1 on the setting without speculation"):
        load_table(_rows(tmp_path, on_baseline))


def test_a_decode_rate_above_the_aggregate_is_accepted_at_one_user_only(tmp_path: Path) -> None:
    """At C = 1 a running request's decode rate exceeds the aggregate (TTFT and client gaps count in the
    aggregate only: GuideLLM's 1/ITL against its window throughput); at C >= 2 it means swapped columns."""
    one = {**GOOD, "concurrency": 1, "aggregate_tok_s": 247.49, "per_request_tok_s": 262.76}
    table = load_table(_rows(tmp_path, [one]))
    assert table.cells[0].per_request_tok_s == 262.76
    with pytest.raises(ConfigError, match=r"per_request_tok_s = 262.76 exceeds aggregate_tok_s = 247.49"):
        load_table(_rows(tmp_path, [{**one, "concurrency": 2}]))


def test_an_adaptive_setting_keeps_its_mode_in_its_parameters(tmp_path: Path) -> None:
    """vLLM's adaptive verification at num_speculative_tokens 7 is not the static k = 7: the mode is stored
    with the setting's parameters, so a fit can tell the two apart."""
    rows = [
        {"setting": "k7", "method": "dspark", "num_speculative_tokens": 7, "concurrency": 1, "aggregate_tok_s": 251.2},
        {
            "setting": "k7-adaptive",
            "method": "dspark",
            "num_speculative_tokens": 7,
            "adaptive": "enable_adaptive_verification",
            "concurrency": 1,
            "aggregate_tok_s": 269.0,
        },
    ]
    table = load_table(_rows(tmp_path, rows, engine="vllm"))
    params = {s.name: s.params for s in table.settings}
    assert params["k7"] == {"method": "dspark", "num_speculative_tokens": 7}
    assert params["k7-adaptive"] == {**params["k7"], "adaptive": "enable_adaptive_verification"}
    store = Store(tmp_path / "s.db")
    run_id = store_table(store, table)
    assert {s.name: s.params for s in store.settings(run_id)}["k7-adaptive"][
        "adaptive"
    ] == "enable_adaptive_verification"
    baseline = {"setting": "base", "adaptive": "on", "concurrency": 1, "aggregate_tok_s": 100.0}
    with pytest.raises(ConfigError, match=r"row 1: adaptive = 'on' on a setting without speculation; fix: drop it"):
        load_table(_rows(tmp_path, [baseline], engine="vllm"))
