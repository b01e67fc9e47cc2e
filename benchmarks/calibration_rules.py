"""How wide the model's stated error must be to cover its held-out errors: candidate rules compared on the
public tables (issue 38 item 4; the rule chosen is `perfmodel.calibration.HeldOutErrors.bound`).

Run: `.venv/bin/python benchmarks/calibration_rules.py [--tables FILE ...] [--json-out FILE]`
(default: every table in benchmarks/public that `benchmarks/model_public.py` fits; ~10 min on 2 shared cores).

The folds are those of `benchmarks/model_public.py`: per table, each setting, then each level, left out; the
model fitted on the rest (`fit_model`, which itself holds out each of ITS settings and levels and files those
errors by kind of prediction) predicts what was left out. Each held-out figure is then judged by the bound
each candidate rule gives from its fold model's own held-out errors of that kind (the same fallbacks as the
model: an interpolation with too few groups takes its extrapolation's bound; an unmeasured setting at an
unmeasured level adds its two parts). Printed per rule: the share of held-out figures inside the bound
(pooled; target >= 90 %), per table, and the median and mean stated error (narrower is more useful).
Tables whose cells contradict the model's premises are left out, as `model_public.py` leaves them out.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from specfrontier.errors import SpecFrontierError
from specfrontier.perfmodel.calibration import (
    AT_UNMEASURED_LEVEL,
    BEYOND,
    LEVEL_EXTRAPOLATED,
    LEVEL_INTERPOLATED,
    MIN_GROUPS,
    SMALL_SAMPLE,
    UNMEASURED_CHAIN,
    UNMEASURED_TREE,
    Z95,
)
from specfrontier.perfmodel.consistency import contradictions
from specfrontier.perfmodel.types import ModelCell
from specfrontier.store import Store

sys.path.insert(0, str(Path(__file__).resolve().parent))
import model_public  # a sibling script: the folds and the table reading are its own

Rule = Callable[[float, int, float], float]
"""(RMS of a kind's held-out errors, its held-out groups, its largest |error|) -> stated half-width."""


def _floored(k: float) -> Rule:
    return lambda rms, n, worst: (
        max(k * rms * math.sqrt(1 + 1 / n), worst) if n < SMALL_SAMPLE else k * rms * math.sqrt(1 + 1 / n)
    )


_T95 = (6.314, 2.920, 2.353, 2.132, 2.015, 1.943, 1.895, 1.860, 1.833, 1.812)


def _t_floored(rms: float, n: int, worst: float) -> float:
    t = _T95[n - 2] if n - 1 <= len(_T95) else 1.645 + 2.1 / (n - 1)
    return _floored(t)(rms, n, worst)


RULES: dict[str, Rule] = {
    "2 x RMS": lambda rms, n, worst: 2 * rms,
    "1.645 x RMS x sqrt(1+1/n), floored": _floored(1.645),
    f"{Z95} x RMS x sqrt(1+1/n), floored (chosen)": _floored(Z95),
    "t(0.95, n-1) x RMS x sqrt(1+1/n), floored": _t_floored,
    "largest held-out error": lambda rms, n, worst: worst,
}


@dataclass(frozen=True, slots=True)
class Figure:
    table: str
    scheme: str
    setting: str
    concurrency: int
    kind: str
    error_class: str
    error: float
    inner: dict[str, tuple[tuple[float, ...], int]]
    """The fold model's held-out errors per kind: (errors, groups)."""


def collect(paths: Sequence[Path]) -> list[Figure]:
    """Every held-out figure of every table with its fold model's own held-out errors."""
    out = []
    for path in paths:
        with tempfile.TemporaryDirectory() as tmp:
            table = model_public.read_table(path, Store(Path(tmp) / "p.db"))
        if contradictions(table.cells, table.noise):
            continue
        schemes: tuple[tuple[str, Callable[[ModelCell], object]], ...] = (
            ("loso", lambda c: c.setting),
            ("lolo", lambda c: c.concurrency),
        )
        for scheme, key in schemes:
            for group in dict.fromkeys(key(c) for c in table.cells):
                train = [c for c in table.cells if key(c) != group]
                try:
                    model = model_public._fit(table, train)
                except SpecFrontierError:
                    continue
                inner = {k: (v.errors, v.groups) for k, v in model.calibration.errors.items()}
                for cell in (c for c in table.cells if key(c) == group):
                    if model.refusal(cell.params) is not None or model.halfwidth(cell.params, cell.concurrency) is None:
                        continue  # the model refuses it, or states no error for it: no claim to judge
                    p = model.predict(cell.params, cell.concurrency)
                    for kind in model_public.KINDS:
                        measured = getattr(cell, kind)
                        if measured is None:
                            continue
                        value = p.aggregate_tok_s if kind == "aggregate_tok_s" else p.per_request_tok_s
                        error = value / measured - 1
                        out.append(
                            Figure(path.name, scheme, cell.setting, cell.concurrency, kind, p.error_class, error, inner)
                        )
        print(f"collected {path.name}: {len(out)} figures so far", file=sys.stderr, flush=True)
    return out


def _fallback(error_class: str) -> str | None:
    if error_class == LEVEL_INTERPOLATED:
        return LEVEL_EXTRAPOLATED
    if error_class in (UNMEASURED_CHAIN, UNMEASURED_TREE):
        return error_class + BEYOND
    return None


def halfwidth(rule: Rule, inner: Mapping[str, tuple[Sequence[float], int]], error_class: str) -> float | None:
    """The rule's bound for `error_class` from the fold's held-out errors, with the model's fallbacks."""

    def own(name: str) -> float | None:
        held = inner.get(name)
        if held is not None and held[1] >= MIN_GROUPS and held[0]:
            errors, groups = held
            rms = math.sqrt(sum(e * e for e in errors) / len(errors))
            return rule(rms, groups, max(abs(e) for e in errors))
        fallback = _fallback(name)
        return None if fallback is None else own(fallback)

    found = own(error_class)
    if found is not None or not error_class.endswith(AT_UNMEASURED_LEVEL):
        return found
    setting, level = own(error_class.removesuffix(AT_UNMEASURED_LEVEL)), own(LEVEL_INTERPOLATED)
    return None if setting is None or level is None else setting + level


def report(figures: Sequence[Figure]) -> list[str]:
    lines = [f"{len(figures)} held-out figures from {len({f.table for f in figures})} tables"]
    for name, rule in RULES.items():
        judged = [(f, h) for f in figures if (h := halfwidth(rule, f.inner, f.error_class)) is not None]
        covered = [abs(f.error) <= h for f, h in judged]
        widths = [h for _, h in judged]
        per_table: dict[str, list[bool]] = {}
        for (f, _), ok in zip(judged, covered, strict=True):
            per_table.setdefault(f.table, []).append(ok)
        lines.append(
            f"{name}: coverage {sum(covered)}/{len(covered)} ({100 * sum(covered) / len(covered):.1f} %), "
            f"median stated error {100 * statistics.median(widths):.1f} %, mean {100 * statistics.mean(widths):.1f} %"
        )
        lines.append("  per table: " + "; ".join(f"{t} {sum(v)}/{len(v)}" for t, v in sorted(per_table.items())))
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tables", nargs="*", default=[], help="table files (default: all of benchmarks/public)")
    parser.add_argument("--json-out", help="also write every held-out figure with its fold's errors as JSON")
    args = parser.parse_args()
    figures = collect(model_public.tables(args.tables))
    if args.json_out:
        Path(args.json_out).write_text(json.dumps([asdict(f) for f in figures]), encoding="utf-8")
    print("\n".join(report(figures)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
