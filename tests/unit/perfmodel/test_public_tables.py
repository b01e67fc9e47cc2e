"""The model on a public table nobody here made: SGLang PR #22246's EAGLE chains, steps 1-6 x batch size 1-64
(benchmarks/public/README.md cites it). Fitted on steps 1-3 as `plan --fit-only` does, it must predict
steps 4-6 as docs/model.md reports (held-out mean 1.9 %, max 5.0 %); the figures pin the result, whatever it
is, so a change to the model that moves them shows here."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from builders import run_cli

TABLE = Path(__file__).resolve().parents[3] / "benchmarks" / "public" / "sglang_pr22246_eagle_chains.csv"


def test_sglang_pr22246_chains_fitted_on_steps_1_to_3_predict_steps_4_to_6(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    store = str(tmp_path / "public.db")
    code, out, err = run_cli(monkeypatch, capsys, "import", str(TABLE), "--store", store)
    assert code == 0, err
    run_id = out.split(" as run ", 1)[1].split()[0]
    code, out, err = run_cli(
        monkeypatch, capsys, "plan", run_id, "--store", store, "--fit-only", "steps1,steps2,steps3", "--format", "json"
    )
    assert code == 0, err
    plan = json.loads(out)
    held = [c for c in plan["cells"] if not c["in_fit"]]
    assert {c["setting"] for c in held} == {"steps4", "steps5", "steps6"} and len(held) == 21
    errors = [abs(c["error_pct"]) for c in held]
    assert sum(errors) / len(errors) <= 2.0 and max(errors) <= 5.5  # measured: 1.9 % mean, 5.0 % max
    measured = {(c["setting"], c["concurrency"]): c["measured"] for c in plan["cells"]}
    for level in plan["frontier"]:
        c, pick = level["concurrency"], level["best_aggregate"]["setting"]
        best = max(v for (s, cc), v in measured.items() if cc == c)
        assert measured[(pick, c)] >= 0.975 * best, (c, pick)  # regret at most 2.0 % (C = 1: steps3 vs steps4/5)
