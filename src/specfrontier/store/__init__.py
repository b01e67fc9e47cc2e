"""The result store: SQLite, one transaction per finished cell, schema-versioned."""

from specfrontier.store.schema import SCHEMA_VERSION
from specfrontier.store.sqlite import CellRow, RunRow, SettingRow, Store

__all__ = ["SCHEMA_VERSION", "CellRow", "RunRow", "SettingRow", "Store"]
