"""The result store: SQLite, one transaction per finished cell, schema-versioned."""

from specfrontier.store.schema import SCHEMA_VERSION
from specfrontier.store.sqlite import (
    DRIFT_REFERENCE_KEY,
    ENGINE_WARNINGS_KEY,
    FINAL_STATUSES,
    LAUNCH_ENVIRONMENT_KEY,
    REFERENCE_REPEAT,
    RUN_STATUSES,
    CellRow,
    ImportedCellRow,
    RunRow,
    SettingRow,
    Store,
)

__all__ = [
    "DRIFT_REFERENCE_KEY",
    "ENGINE_WARNINGS_KEY",
    "FINAL_STATUSES",
    "LAUNCH_ENVIRONMENT_KEY",
    "REFERENCE_REPEAT",
    "RUN_STATUSES",
    "SCHEMA_VERSION",
    "CellRow",
    "ImportedCellRow",
    "RunRow",
    "SettingRow",
    "Store",
]
