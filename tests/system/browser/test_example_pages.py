"""The example shop's landing page and 503 page in real Chromium, under a strict CSP."""

from __future__ import annotations

from typing import Any

import pytest

from django_semaphore import get_semaphore
from example_project import settings as example

from .conftest import ARTIFACTS


@pytest.fixture
def shop(settings) -> None:
    # The live server's middleware was built at start-up (the suite's, with its strict CSP);
    # URLs, templates, static files and semaphores follow these overrides.
    settings.INSTALLED_APPS = [*example.INSTALLED_APPS]
    settings.ROOT_URLCONF = example.ROOT_URLCONF
    settings.SEMAPHORES = example.SEMAPHORES


@pytest.mark.usefixtures("shop")
def test_landing_page_and_busy_page_render_with_static_css_only(page: Any, live_server: Any) -> None:
    from playwright.sync_api import expect

    page.goto(live_server.url + "/")
    expect(page.locator("h1")).to_have_text("django-semaphore example shop")
    accent = page.locator("header").evaluate("element => getComputedStyle(element).backgroundColor")
    assert accent == "rgb(11, 110, 79)"  # site.css was allowed and applied
    assert page.locator("ul.demos li").count() == 9
    page.screenshot(path=str(ARTIFACTS / "example-home.png"), full_page=True)

    reports = get_semaphore("reports")
    held = [reports.acquire(auto_renew=False) for _ in range(reports.config.limit)]
    try:
        response = page.goto(live_server.url + "/reports/export/")
        assert response is not None and response.status == 503
        expect(page.locator("h1")).to_have_text("Too busy right now")
        assert int(response.headers["retry-after"]) >= 1
    finally:
        for permit in held:
            permit.release()
    # The browser reports the 503 itself as a console error; anything else (a CSP violation) fails.
    assert [problem for problem in page.problems if "status of 503" not in problem] == []
