"""The result store: SQLite, one transaction per finished cell, schema-versioned."""

from specfrontier.store.schema import SCHEMA_VERSION
from specfrontier.store.sqlite import (
    ENGINE_WARNINGS_KEY,
    FINAL_STATUSES,
    LAUNCH_ENVIRONMENT_KEY,
    RUN_STATUSES,
    CellRow,
    ImportedCellRow,
    RunRow,
    SettingRow,
    Store,
)

__all__ = [
    "ENGINE_WARNINGS_KEY",
    "FINAL_STATUSES",
    "LAUNCH_ENVIRONMENT_KEY",
    "RUN_STATUSES",
    "SCHEMA_VERSION",
    "CellRow",
    "ImportedCellRow",
    "RunRow",
    "SettingRow",
    "Store",
]
