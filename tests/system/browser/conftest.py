"""Real headless Chromium (Debian's ``/usr/bin/chromium``) driven by Playwright.

Skipped locally when Chromium or Playwright is missing; with ``CI=true`` a
missing browser fails the run instead, so CI can never pass without them.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = "/usr/bin/chromium"
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
ARTIFACTS = Path(__file__).resolve().parents[3] / "test-artifacts"


def _unavailable(reason: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(f"{reason}; CI must run the browser tests.")
    pytest.skip(reason)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """One Chromium per test module; module-scoped so Playwright's event loop is gone before other tests run."""
    if not Path(CHROMIUM).exists():
        _unavailable(f"{CHROMIUM} is not installed (Debian/Ubuntu: apt-get install chromium; see docs/development.md)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _unavailable("playwright is not installed (pip install -e '.[test]')")
    # Playwright's sync API keeps an event loop running in this thread, so
    # Django refuses ORM calls here unless told they are safe (they are: the
    # test's own calls stay synchronous).
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
        playwright = sync_playwright().start()
        try:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
            try:
                yield browser
            finally:
                browser.close()
        finally:
            playwright.stop()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    """A fresh page that records console errors and uncaught exceptions in ``page.problems``."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    problems: list[str] = []

    def on_console(message: Any) -> None:
        where = message.location.get("url", "")
        if message.type == "error" and not where.endswith("/favicon.ico"):  # the browser's own request
            problems.append(f"{message.text} at {where}")

    page.on("console", on_console)
    page.on("pageerror", lambda error: problems.append(str(error)))
    page.problems = problems
    ARTIFACTS.mkdir(exist_ok=True)
    try:
        yield page
    finally:
        context.close()
