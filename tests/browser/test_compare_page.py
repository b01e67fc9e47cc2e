"""The comparison page in a real headless Chromium: no console message, no request, its plot draws."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from PIL import Image
from playwright.sync_api import Browser

from html_runs import build_run
from specfrontier.analysis import load_run
from specfrontier.analysis.compare import compare_runs
from specfrontier.report.compare_html import compare_html

pytestmark = pytest.mark.browser


def test_compare_page_loads_clean_and_its_plot_renders(browser: Browser, tmp_path: Path) -> None:
    store, run_a = build_run(tmp_path / "s.db")
    store.close()
    store, run_b = build_run(tmp_path / "s.db")
    page_file = tmp_path / "c.html"
    page_file.write_text(compare_html(compare_runs(load_run(store, run_a), load_run(store, run_b))), encoding="utf-8")
    store.close()

    context = browser.new_context(viewport={"width": 1366, "height": 768})
    context.set_default_timeout(60_000)  # generous on a loaded machine; a real failure still fails
    page = context.new_page()
    console: list[str] = []
    requests: list[str] = []
    page.on("console", lambda msg: console.append(msg.text))
    page.on("request", lambda req: requests.append(req.url))
    page.goto(page_file.as_uri(), wait_until="load")
    try:
        assert console == [] and requests == [page_file.as_uri()]
        assert page.evaluate("document.documentElement.scrollWidth <= document.documentElement.clientWidth")
        img = page.locator("img[data-plot='ratio']")
        assert img.evaluate("el => el.complete && el.naturalWidth > 100")
        shot = Image.open(io.BytesIO(img.screenshot())).convert("L")
        dark, light = shot.getextrema()
        assert dark < 100 and light > 200
        assert page.evaluate("document.querySelectorAll('script').length") == 0
    finally:
        context.close()
