"""Fixtures for tests that open reports in a real headless Chromium (marked `browser`).

Debian's /usr/bin/chromium (scripts/install.sh --dev installs it) driven by Playwright: Playwright's own
browser download is never used. A missing browser is a failure with the fix, not a skip, so CI cannot
pass without running these tests. One browser per test module; a fresh context per test.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, sync_playwright

CHROMIUM = Path(os.environ.get("SPECFRONTIER_CHROMIUM", "/usr/bin/chromium"))


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    if not CHROMIUM.is_file():
        pytest.fail(f"{CHROMIUM} missing; fix: run scripts/install.sh --dev as root, or apt-get install chromium")
    with sync_playwright() as p:
        # --no-sandbox: CI runs as root, where Chromium refuses its sandbox; the page has no script anyway.
        b = p.chromium.launch(executable_path=str(CHROMIUM), args=["--no-sandbox"])
        try:
            yield b
        finally:
            b.close()
