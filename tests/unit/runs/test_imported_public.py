"""Every public table in benchmarks/public imports with `specfrontier import` as it is (issue 38): a file that
stops importing, or a table added without a row in benchmarks/public/README.md, fails here."""

from __future__ import annotations

from pathlib import Path

import pytest

from builders import BENCHMARKS, Cli
from specfrontier.store import Store

PUBLIC = BENCHMARKS / "public"
TABLES = sorted(p for p in PUBLIC.iterdir() if p.suffix in (".csv", ".json"))


def test_the_public_folder_holds_tables() -> None:
    assert len(TABLES) >= 9, [p.name for p in TABLES]


@pytest.mark.parametrize("path", TABLES, ids=[p.name for p in TABLES])
def test_each_public_table_imports_and_is_cited(path: Path, tmp_path: Path, cli: Cli) -> None:
    store = tmp_path / "public.db"
    code, out, err = cli("import", str(path), "--store", str(store))
    assert code == 0, err
    run_id = out.split(" as run ", 1)[1].split()[0]
    cells = Store(store).imported_cells(run_id)
    assert len(cells) >= 7 and len({c.concurrency for c in cells}) >= 3  # a table across loads
    assert f"`{path.name}`" in (PUBLIC / "README.md").read_text(encoding="utf-8")
