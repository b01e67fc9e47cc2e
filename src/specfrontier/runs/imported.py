"""`specfrontier import FILE`: a table of measurements made elsewhere -> a run in the store.

So users can fit the model (`plan`) to their earlier results. Accepted files:

1. CSV with a header row, one row per (setting, concurrency);
2. JSON: a list of row objects, or `{"engine": ..., "model": {"experts": E, "experts_per_token": k},
   "cells": [rows]}`;
3. the seed's table shape (shared/data/seed_frontier.json): `{"parameter": "speculative-num-steps",
   "per_request_tok_s": {value: {C: tok/s}}, "aggregate_tok_s": {...}, "max_running_requests": {value: n},
   "deployment": {"engine": "SGLang, --speculative-algorithm EAGLE3, ..."}}`; the engine and the fixed
   `--speculative-*` flags are read from `deployment.engine`.

Row keys (CSV columns): `engine`, `setting` (a name; default: derived from the parameters), setting
parameters as the engines spell them (`algorithm`, `method`, `spec_type`, `num_steps`,
`num_speculative_tokens`, `draft_n_max`, `steps`, `eagle_topk`, `topk`, `num_draft_tokens`,
`max_running_requests`), `concurrency` or `batch_size`, `aggregate_tok_s` and/or `per_request_tok_s`,
optional `capacity` (the engine's read-back max running requests), `acceptance_length` (tau incl. the
bonus token) and `acceptance_per_position` (P(position i accepted) per verify step; a JSON list, or
numbers separated by `;` in CSV), and `adaptive` (a speculative setting whose engine sizes the verified draft
per step, e.g. vLLM's `enable_adaptive_verification`: the mode's name, kept in the setting's parameters so a
fit can tell the policy from a static setting of the same maximum depth). Problems are one ConfigError,
raised before anything is written, that lists every problem of the file (up to MAX_LISTED_PROBLEMS), each
naming the row, the field and the fix.
"""

from __future__ import annotations

import csv
import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import specfrontier
from specfrontier.engines.registry import engine_names, vocabulary
from specfrontier.errors import ConfigError
from specfrontier.perfmodel.cells import setting_params
from specfrontier.store import ImportedCellRow, Store
from specfrontier.textfiles import MAX_DATA_BYTES, load_json, read_text_utf8

PARAM_KEYS = (*vocabulary().table_keys, "max_running_requests")
"""Setting parameters a row may carry, as the registered engines spell them (and the model's own names)."""
_INT_PARAMS = (vocabulary().integer_keys & set(PARAM_KEYS)) | {"max_running_requests"}
ADAPTIVE_KEY = "adaptive"
"""A setting run by an adaptive policy of its engine (the value names it): stored with its parameters."""
FIGURE_KEYS = ("per_request_tok_s", "aggregate_tok_s", "capacity", "acceptance_length", "acceptance_per_position")
SPEEDUP_KEYS = ("speedup", "speedup_of", "baseline_tok_s")
"""A speed-up table's row: `speedup` x the baseline's `speedup_of` figure (per_request_tok_s by default) at the
same concurrency; the baseline is `baseline_tok_s` on the row, else the file's row without speculation."""
ROW_KEYS = ("engine", "setting", "concurrency", "batch_size", *PARAM_KEYS, ADAPTIVE_KEY, *FIGURE_KEYS, *SPEEDUP_KEYS)
_TOK_S = ("per_request_tok_s", "aggregate_tok_s")
_NAME = re.compile(r"^[A-Za-z0-9_.:+=-]+$")
_ENGINE = re.compile(r"^[a-z][a-z0-9_-]*$")


@dataclass(frozen=True, slots=True)
class _Speedup:
    """A row given as a speed-up, resolved once every row (and so the baseline's) is read."""

    ratio: float
    metric: str
    baseline_tok_s: float | None


@dataclass(frozen=True, slots=True)
class ImportedSetting:
    name: str
    params: dict[str, Any]
    capacity: int | None
    speculative: bool


@dataclass(frozen=True, slots=True)
class ImportTable:
    """A validated table: nothing is stored until every row passed."""

    source: str
    engine: str
    settings: tuple[ImportedSetting, ...]
    cells: tuple[ImportedCellRow, ...]
    metadata: dict[str, Any] = field(default_factory=dict)


def _fail(where: str, what: str, fix: str) -> ConfigError:
    return ConfigError(f"{where}: {what}; fix: {fix}")


def _blank(value: Any) -> bool:
    return value is None or (isinstance(value, str) and value.strip() == "")


def _number(value: Any, where: str, key: str) -> float:
    if isinstance(value, str):
        try:
            value = float(value.strip())
        except ValueError:
            raise _fail(where, f"{key} = {value!r}: not a number", f"write {key} as a number") from None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise _fail(where, f"{key} = {value!r}: not a finite number", f"write {key} as a number")
    return float(value)


def _positive(value: Any, where: str, key: str) -> float | None:
    if _blank(value):
        return None
    number = _number(value, where, key)
    if number <= 0:
        raise _fail(where, f"{key} = {value!r}: must be > 0", f"correct {key} or leave it empty")
    return number


def _whole(value: Any, where: str, key: str, *, minimum: int) -> int | None:
    if _blank(value):
        return None
    number = _number(value, where, key)
    if number != int(number) or number < minimum:
        raise _fail(where, f"{key} = {value!r}: must be a whole number >= {minimum}", f"correct {key}")
    return int(number)


def _positions(value: Any, where: str) -> tuple[float, ...]:
    if _blank(value):
        return ()
    items: list[Any]
    if isinstance(value, str):
        items = [v for v in value.replace(",", ";").split(";") if v.strip()]
    elif isinstance(value, list):
        items = value
    else:
        raise _fail(where, f"acceptance_per_position = {value!r}: not a list", "write a list (JSON) or 0.9;0.8 (CSV)")
    rates = tuple(_number(v, where, "acceptance_per_position") for v in items)
    if any(not 0 <= r <= 1 for r in rates):
        raise _fail(where, f"acceptance_per_position = {value!r}: rates must lie in [0, 1]", "write fractions")
    return rates


def _engine(value: Any, where: str) -> str:
    engine = str(value).strip().lower()
    if not _ENGINE.match(engine):
        raise _fail(where, f"engine = {value!r}: not an engine name", f"write one such as {', '.join(engine_names())}")
    return engine


def _default_name(params: Mapping[str, Any]) -> str:
    sp = setting_params(params)
    return "no-spec" if not sp.speculative else sp.label.replace(" ", "-")


def _speedup(row: Mapping[str, Any], where: str, speculative: bool) -> _Speedup | None:
    ratio = _positive(row.get("speedup"), where, "speedup")
    if ratio is None:
        for key in ("speedup_of", "baseline_tok_s"):
            if not _blank(row.get(key)):
                raise _fail(where, f"{key} without speedup", f"add speedup, or drop {key}")
        return None
    if not speculative:
        raise _fail(where, f"speedup = {ratio:g} on the setting without speculation", "give the baseline's tok/s")
    metric = "per_request_tok_s" if _blank(row.get("speedup_of")) else str(row["speedup_of"]).strip()
    if metric not in _TOK_S:
        raise _fail(where, f"speedup_of = {row['speedup_of']!r}: not a figure", f"use one of {', '.join(_TOK_S)}")
    if not _blank(row.get(metric)):
        raise _fail(where, f"{metric} and speedup both given", f"give one of {metric} and speedup")
    return _Speedup(ratio, metric, _positive(row.get("baseline_tok_s"), where, "baseline_tok_s"))


def _row_parts(
    row: Mapping[str, Any], where: str, default_engine: str | None
) -> tuple[str, str, dict[str, Any], int, ImportedCellRow, int | None, _Speedup | None]:
    unknown = [k for k in row if k not in ROW_KEYS]
    if unknown:
        raise _fail(where, f"{unknown[0]} = {row[unknown[0]]!r}: unknown column", f"use only {', '.join(ROW_KEYS)}")
    engine_raw = row.get("engine")
    if _blank(engine_raw):
        if default_engine is None:
            raise _fail(where, "engine is missing", 'add an "engine" column/key or pass --engine NAME')
        engine = default_engine
    else:
        engine = _engine(engine_raw, where)
    params: dict[str, Any] = {}
    for key in PARAM_KEYS:
        if _blank(row.get(key)):
            continue
        value = row[key]
        params[key] = _whole(value, where, key, minimum=0) if key in _INT_PARAMS else str(value).strip()
    sp = setting_params(params, where=where)
    if not _blank(row.get(ADAPTIVE_KEY)):
        if not sp.speculative:
            raise _fail(where, f"{ADAPTIVE_KEY} = {row[ADAPTIVE_KEY]!r} on a setting without speculation", "drop it")
        params[ADAPTIVE_KEY] = str(row[ADAPTIVE_KEY]).strip()
    c = _whole(row.get("concurrency"), where, "concurrency", minimum=1)
    b = _whole(row.get("batch_size"), where, "batch_size", minimum=1)
    if c is not None and b is not None and c != b:
        raise _fail(where, f"concurrency = {c} and batch_size = {b} disagree", "give one of them")
    level = c if c is not None else b
    if level is None:
        raise _fail(where, "concurrency is missing", 'add "concurrency" (clients) or "batch_size" (running requests)')
    per_request = _positive(row.get("per_request_tok_s"), where, "per_request_tok_s")
    aggregate = _positive(row.get("aggregate_tok_s"), where, "aggregate_tok_s")
    speedup = _speedup(row, where, sp.speculative)
    if per_request is None and aggregate is None and speedup is None:
        raise _fail(
            where, "no figure: aggregate_tok_s, per_request_tok_s and speedup are all empty", "add aggregate_tok_s"
        )
    # A running request's decode rate may exceed the aggregate at one user (TTFT and client gaps count in the
    # aggregate only); with two or more it cannot: above it, the columns are swapped.
    if per_request is not None and aggregate is not None and level >= 2 and per_request > aggregate * 1.0001:
        raise _fail(
            where,
            f"per_request_tok_s = {per_request:g} exceeds aggregate_tok_s = {aggregate:g}",
            "check the columns (aggregate is the sum over all requests)",
        )
    tau = _positive(row.get("acceptance_length"), where, "acceptance_length")
    if tau is not None and (tau < 1 or (sp.speculative and sp.topk == 1 and tau > sp.steps + 1 + 1e-9)):
        limit = sp.steps + 1 if sp.speculative else 1
        raise _fail(
            where,
            f"acceptance_length = {tau:g}: must lie in [1, {limit}] for this setting (incl. the bonus token)",
            "give tau = tokens per verification step, or fix the draft depth",
        )
    positions = _positions(row.get("acceptance_per_position"), where)
    if positions and sp.speculative and len(positions) > sp.steps:
        raise _fail(
            where,
            f"acceptance_per_position has {len(positions)} rates for a depth of {sp.steps}",
            "give one rate per draft position",
        )
    capacity = _whole(row.get("capacity"), where, "capacity", minimum=1)
    name = str(row["setting"]).strip() if not _blank(row.get("setting")) else _default_name(params)
    if not _NAME.match(name):
        raise _fail(where, f"setting = {name!r}: letters, digits and _.:+=- only", "rename the setting")
    cell = ImportedCellRow(name, level, per_request, aggregate, tau, positions, where)
    return engine, name, params, level, cell, capacity, speedup


MAX_LISTED_PROBLEMS = 50
"""An import error lists at most this many problems (then how many more): enough to fix a file in one go."""


def _problems(source: str, problems: list[str]) -> ConfigError:
    """One error listing every problem of the file, each with its row, field and fix."""
    listed = [f"- {p.removeprefix(source + ': ')}" for p in problems[:MAX_LISTED_PROBLEMS]]
    more = len(problems) - len(listed)
    tail = [f"- ... and {more} more"] if more > 0 else []
    return ConfigError("\n".join([f"{source}: {len(problems)} problem(s), nothing imported:", *listed, *tail]))


def parse_rows(rows: list[Mapping[str, Any]], source: str, *, engine: str | None) -> ImportTable:
    """Validate rows (from CSV or JSON) into a table. A ConfigError lists every problem of the file, each
    naming its row, field and fix (a single problem reads as before: `FILE: row N: ...; fix: ...`)."""
    if not rows:
        raise _fail(source, "no rows", "add one row per (setting, concurrency)")
    engines: set[str] = set()
    settings: dict[str, tuple[dict[str, Any], int | None, str]] = {}
    seen: dict[tuple[str, int], str] = {}
    cells = []
    problems: list[str] = []
    for i, row in enumerate(rows):
        where = f"{source}: row {i + 1}"
        try:
            if not isinstance(row, Mapping):
                raise _fail(where, f"{row!r}: not an object", "write one object per row")
            eng, name, params, level, cell, capacity, speedup = _row_parts(row, where, engine)
            _check_consistent(settings, seen, where, name, params, level, capacity)
        except ConfigError as exc:
            problems.append(str(exc))
            continue
        engines.add(eng)
        if name in settings:
            _, known_cap, first = settings[name]
            settings[name] = (params, known_cap if capacity is None else capacity, first)
        else:
            settings[name] = (params, capacity, where)
        seen[(name, level)] = where
        cells.append((cell, speedup))
    resolved = []
    for cell, speedup in cells:
        try:
            resolved.append(cell if speedup is None else _resolve_speedup(cell, speedup, cells, settings))
        except ConfigError as exc:
            problems.append(str(exc))
    if len(engines) > 1:
        several = f"engine: several engines ({', '.join(sorted(engines))})"
        problems.append(str(_fail(source, several, "import one engine per file")))
    if len(problems) == 1:
        raise ConfigError(problems[0])
    if problems:
        raise _problems(source, problems)
    imported = tuple(ImportedSetting(n, p, cap, setting_params(p).speculative) for n, (p, cap, _) in settings.items())
    return ImportTable(source, engines.pop(), imported, tuple(resolved))


def _resolve_speedup(
    cell: ImportedCellRow,
    speedup: _Speedup,
    cells: list[tuple[ImportedCellRow, _Speedup | None]],
    settings: dict[str, tuple[dict[str, Any], int | None, str]],
) -> ImportedCellRow:
    """The row's figure: its speed-up times the stated baseline (its own baseline_tok_s, else the figure of
    the file's row without speculation at the same concurrency); the source says which."""
    base, stated = speedup.baseline_tok_s, "baseline_tok_s on the row"
    if base is None:
        for other, other_speedup in cells:
            spec = setting_params(settings[other.setting_id][0]).speculative
            if not spec and other_speedup is None and other.concurrency == cell.concurrency:
                base = getattr(other, speedup.metric)
                stated = f"{other.setting_id} at concurrency {other.concurrency} ({other.source})"
                break
    if base is None:
        raise _fail(
            cell.source,
            f"speedup = {speedup.ratio:g}: no baseline {speedup.metric} at concurrency {cell.concurrency}",
            f"add the row without speculation at concurrency {cell.concurrency} with {speedup.metric}, "
            "or baseline_tok_s on this row",
        )
    figure = speedup.ratio * base
    source = f"{cell.source} ({speedup.metric} = speedup {speedup.ratio:g} x {base:g} tok/s of {stated})"
    if speedup.metric == "aggregate_tok_s":
        return replace(cell, aggregate_tok_s=figure, source=source)
    return replace(cell, per_request_tok_s=figure, source=source)


def _check_consistent(
    settings: dict[str, tuple[dict[str, Any], int | None, str]],
    seen: dict[tuple[str, int], str],
    where: str,
    name: str,
    params: dict[str, Any],
    level: int,
    capacity: int | None,
) -> None:
    """A row against the rows before it: same setting name, same parameters and capacity; one row per level."""
    if name in settings:
        known_params, known_cap, first = settings[name]
        if known_params != params:
            raise _fail(where, f"setting {name!r} has other parameters than in {first}", "rename one of them")
        if capacity is not None and known_cap is not None and capacity != known_cap:
            raise _fail(where, f"capacity = {capacity} but {first} says {known_cap} for {name!r}", "make them agree")
    if (name, level) in seen:
        raise _fail(where, f"setting {name!r} at concurrency {level} repeats {seen[(name, level)]}", "keep one")


_FLAG = re.compile(r"--speculative-([a-z-]+)[ =]([^\s,()]+)")


def _seed_rows(data: dict[str, Any], source: str, engine: str | None) -> tuple[list[dict[str, Any]], str | None]:
    """Rows of the seed's table shape, and the engine named by deployment.engine (if any)."""
    parameter = data.get("parameter")
    if not isinstance(parameter, str) or not parameter.strip():
        raise _fail(source, "parameter is missing", 'add "parameter": the swept flag, e.g. "speculative-num-steps"')
    key = parameter.strip().removeprefix("--").removeprefix("speculative-").replace("-", "_")
    if key not in PARAM_KEYS:
        raise _fail(
            source, f"parameter = {parameter!r}: not a setting parameter", f"use one of {', '.join(PARAM_KEYS)}"
        )
    fixed: dict[str, Any] = {}
    deployment = data.get("deployment")
    found_engine = None
    if isinstance(deployment, dict) and isinstance(deployment.get("engine"), str):
        text = deployment["engine"]
        found_engine = text.split(",")[0].strip().lower() or None
        for flag, value in _FLAG.findall(text):
            name = flag.replace("-", "_")
            if name in PARAM_KEYS and name != key:
                fixed[name] = value
    if "eagle_topk" in fixed:
        fixed["eagle_topk"] = _whole(fixed["eagle_topk"], f"{source}: deployment.engine", "eagle_topk", minimum=1)
    figures: dict[tuple[str, str], dict[str, Any]] = {}
    for metric in ("per_request_tok_s", "aggregate_tok_s"):
        table = data.get(metric, {})
        if not isinstance(table, dict):
            raise _fail(source, f"{metric}: not an object", "map each parameter value to {concurrency: tok/s}")
        for value, by_c in table.items():
            if not isinstance(by_c, dict):
                raise _fail(f"{source}: {metric}[{value}]", f"{by_c!r}: not an object", "map concurrency to tok/s")
            for c, figure in by_c.items():
                figures.setdefault((value, c), {})[metric] = figure
    capacities = data.get("max_running_requests", {})
    if not isinstance(capacities, dict):
        raise _fail(source, "max_running_requests: not an object", "map each parameter value to a number")
    rows = []
    for (value, c), figs in sorted(figures.items(), key=lambda kv: (_sort_key(kv[0][0]), _sort_key(kv[0][1]))):
        short = "steps" if key in vocabulary().depth else key
        rows.append(
            {
                "setting": f"{short}{value}",
                key: value,
                **fixed,
                "concurrency": c,
                "capacity": capacities.get(value),
                **figs,
            }
        )
    return rows, (engine or found_engine)


def _sort_key(text: str) -> tuple[float, str]:
    try:
        return float(text), text
    except ValueError:
        return math.inf, text


def _seed_metadata(data: dict[str, Any]) -> dict[str, Any]:
    return {k: data[k] for k in ("deployment", "notes", "source", "parameter") if k in data}


def load_table(path: Path, *, engine: str | None = None) -> ImportTable:
    """Read and validate an import file (CSV by extension, else JSON)."""
    source = str(path)
    text = read_text_utf8(path, "import: path", max_bytes=MAX_DATA_BYTES, too_big_fix="split the table")
    default_engine = _engine(engine, f"{source}: --engine") if engine else None
    if path.suffix.lower() == ".csv":
        reader = csv.DictReader(text.splitlines())
        if not reader.fieldnames:
            raise _fail(source, "no header row", "start the CSV with the column names")
        unknown = [k for k in reader.fieldnames if k not in ROW_KEYS]
        if unknown:
            raise _fail(source, f"column {unknown[0]!r}: unknown", f"use only {', '.join(ROW_KEYS)}")
        rows: list[Mapping[str, Any]] = [dict(r) for r in reader]
        return parse_rows(rows, source, engine=default_engine)
    try:
        data = load_json(text)
    except json.JSONDecodeError as exc:
        raise _fail(
            source, f"not valid JSON ({exc.msg}, line {exc.lineno})", "correct the JSON, or name a .csv"
        ) from exc
    metadata: dict[str, Any] = {}
    if isinstance(data, dict) and any(isinstance(data.get(k), dict) for k in ("per_request_tok_s", "aggregate_tok_s")):
        seed_rows, seed_engine = _seed_rows(data, source, default_engine)
        table = parse_rows(list(seed_rows), source, engine=seed_engine)
        metadata = _seed_metadata(data)
    elif isinstance(data, dict) and isinstance(data.get("cells"), list):
        top = data.get("engine")
        table = parse_rows(data["cells"], source, engine=default_engine or (_engine(top, source) if top else None))
        metadata = {k: v for k, v in data.items() if k != "cells"}
    elif isinstance(data, list):
        table = parse_rows(data, source, engine=default_engine)
    else:
        raise _fail(
            source,
            f"top level = {type(data).__name__}: not a list of rows, {{'cells': [...]}} or the seed table shape",
            'write a list of row objects ([{"engine": "sglang", "num_steps": 3, "concurrency": 16, '
            '"aggregate_tok_s": 1733}, ...]), {"engine": ..., "cells": [rows]}, or the seed table shape '
            "(docs/model.md, `specfrontier import FILE`)",
        )
    _check_model(metadata, source)
    return ImportTable(table.source, table.engine, table.settings, table.cells, metadata)


def _check_model(metadata: dict[str, Any], source: str) -> None:
    model = metadata.get("model")
    if model is None:
        return
    if not isinstance(model, dict):
        raise _fail(source, f"model = {model!r}: not an object", 'write {"experts": E, "experts_per_token": k}')
    experts = _whole(model.get("experts"), f"{source}: model", "experts", minimum=1)
    per_token = _whole(model.get("experts_per_token"), f"{source}: model", "experts_per_token", minimum=1)
    if (experts is None) != (per_token is None) or (experts and per_token and per_token > experts):
        raise _fail(source, "model: experts and experts_per_token must both be given, k <= E", "correct them")


def store_table(store: Store, table: ImportTable) -> str:
    """Write the validated table as a finished run; returns its id."""
    run_id = store.create_run(
        engine=table.engine,
        config={"imported": True, "source": table.source, **table.metadata},
        environment={
            "specfrontier": specfrontier.__version__,
            "imported_from": table.source,
            "imported": True,
            "note": "figures measured elsewhere and imported as given; no requests are stored",
        },
    )
    for position, s in enumerate(table.settings):
        store.add_setting(
            run_id, setting_id=s.name, position=position, name=s.name, params=s.params, speculative=s.speculative
        )
        fields: dict[str, Any] = {"status": "done"}
        if s.capacity is not None:
            fields.update(capacity=s.capacity, capacity_source=f"imported from {table.source}")
        store.update_setting(run_id, s.name, **fields)
    store.record_imported_cells(run_id, table.cells)
    store.set_run_status(run_id, "done")
    return run_id


__all__ = [
    "FIGURE_KEYS",
    "PARAM_KEYS",
    "ROW_KEYS",
    "ImportTable",
    "ImportedSetting",
    "load_table",
    "parse_rows",
    "store_table",
]
