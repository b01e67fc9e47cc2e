"""The HTML report in a real headless Chromium: loads offline with no console error and no request,
every plot draws, hostile model text stays text, and a laptop screen needs no sideways scrolling."""

from __future__ import annotations

import io
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from PIL import Image
from playwright.sync_api import Browser, ConsoleMessage, Page, Request

from html_runs import SCRIPT_TEXT, build_run

pytestmark = pytest.mark.browser


@dataclass
class Loaded:
    page: Page
    console: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)


@pytest.fixture(scope="module")
def report_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Rendered by the real CLI in its own process, as a user would."""
    folder = tmp_path_factory.mktemp("browser")
    store, run_id = build_run(folder / "s.db")
    store.close()
    target = folder / "report.html"
    cli = [
        sys.executable,
        "-c",
        "from specfrontier.cli import main; main()",
        "report",
        run_id,
        "--store",
        str(folder / "s.db"),
    ]
    done = subprocess.run([*cli, "--format", "html", "-o", str(target)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return target


def _open(browser: Browser, path: Path, width: int = 1366, height: int = 768) -> Iterator[Loaded]:
    context = browser.new_context(viewport={"width": width, "height": height})
    page = context.new_page()
    loaded = Loaded(page)

    def on_console(msg: ConsoleMessage) -> None:
        loaded.console.append(f"{msg.type}: {msg.text}")

    def on_request(req: Request) -> None:
        loaded.requests.append(req.url)

    page.on("console", on_console)
    page.on("pageerror", lambda exc: loaded.errors.append(str(exc)))
    page.on("request", on_request)
    page.goto(path.as_uri(), wait_until="load")
    try:
        yield loaded
    finally:
        context.close()


@pytest.fixture
def loaded(browser: Browser, report_file: Path) -> Iterator[Loaded]:
    yield from _open(browser, report_file)


def test_loads_with_no_console_message_and_no_network_request(loaded: Loaded, report_file: Path) -> None:
    # a CSP violation (a blocked style, image or script) would be a console error here
    assert loaded.console == [] and loaded.errors == []
    external = [u for u in loaded.requests if not u.startswith(("data:", report_file.as_uri()))]
    assert external == []
    assert loaded.requests[0] == report_file.as_uri()


def test_every_plot_renders(loaded: Loaded) -> None:
    plots = loaded.page.locator("img[data-plot]")
    assert plots.count() == 6
    for i in range(plots.count()):
        img = plots.nth(i)
        assert img.evaluate("el => el.complete && el.naturalWidth > 100 && el.naturalHeight > 50"), i
        img.scroll_into_view_if_needed()
        shot = Image.open(io.BytesIO(img.screenshot())).convert("L")
        dark, light = shot.getextrema()
        histogram = shot.histogram()
        inked = sum(histogram[:200])  # pixels clearly darker than the white background
        assert dark < 100 and light > 200, (img.get_attribute("data-plot"), shot.getextrema())
        assert inked > 0.01 * shot.width * shot.height, img.get_attribute("data-plot")


def test_model_text_is_shown_as_text_and_never_runs(loaded: Loaded) -> None:
    page = loaded.page
    assert page.evaluate("typeof window.pwned") == "undefined"
    assert page.title() != "PWNED" and "specfrontier run" in page.title()
    assert page.evaluate("document.querySelectorAll('script').length") == 0
    assert page.locator("img[src='x']").count() == 0
    samples = page.locator("pre.model-text").all_inner_texts()
    assert samples and all(s == SCRIPT_TEXT for s in samples)
    assert "server said <script>alert(1)</script>" in page.locator("#startup").inner_text()
    assert page.locator("b").count() == 0  # the setting named ngram<b>bold</b> is not markup


@pytest.mark.parametrize(("width", "height"), [(1366, 768), (1280, 800)])
def test_a_laptop_screen_needs_no_sideways_scrolling(
    browser: Browser, report_file: Path, width: int, height: int
) -> None:
    for loaded in _open(browser, report_file, width, height):
        overflow = loaded.page.evaluate("document.documentElement.scrollWidth - document.documentElement.clientWidth")
        assert overflow <= 0
        assert loaded.page.locator("#recommendation pre.command").first.is_visible()
