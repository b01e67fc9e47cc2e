"""Fixtures shared by every kind of test here (unit, fault matrix, integration); the unit tests' own are in
tests/unit/conftest.py, helpers that are not fixtures in tests/builders.py."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture
def writable_again(tmp_path: Path) -> Iterator[None]:
    """Give write permission back after a test took it away (chmod of a store or its folder), so that pytest
    can clean tmp_path."""
    yield
    for p in [tmp_path, *tmp_path.rglob("*")]:
        p.chmod(0o755 if p.is_dir() else 0o644)
