"""The result store: SQLite, one transaction per finished cell, schema-versioned."""

from specfrontier.store.schema import SCHEMA_VERSION
from specfrontier.store.sqlite import (
    FINAL_STATUSES,
    RUN_STATUSES,
    CellRow,
    ImportedCellRow,
    RunRow,
    SettingRow,
    Store,
)

__all__ = [
    "FINAL_STATUSES",
    "RUN_STATUSES",
    "SCHEMA_VERSION",
    "CellRow",
    "ImportedCellRow",
    "RunRow",
    "SettingRow",
    "Store",
]
