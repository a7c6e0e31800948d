"""The example shop's landing page and 503 page in real Chromium, under a strict CSP."""

from __future__ import annotations

import re
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
    assert page.locator("ul.demos li").count() == 12
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


@pytest.mark.processes
def test_the_live_page_opens_three_sockets_and_the_fourth_is_closed_with_1013(
    page: Any, redis_server: Any, settings: Any, key_prefix: str, tmp_path: Any
) -> None:
    """The WebSocket page as ``make demo`` serves it: uvicorn, the example's ASGI application, real Chromium."""
    from playwright.sync_api import expect

    from ...support.polling import wait_until
    from ...support.uvicorn import Uvicorn

    settings.SEMAPHORES = example.SEMAPHORES
    env = {
        "DJANGO_SETTINGS_MODULE": "tests.support.example_asgi_settings",
        "SEMAPHORE_KEY_PREFIX": key_prefix,
        "REDIS_URL": redis_server.url,
        "DEMO_DB": str(tmp_path / "db.sqlite3"),
    }
    live = get_semaphore("live", "ip:127.0.0.1")  # signed out: keyed by address
    with Uvicorn("example_project.asgi:application", env=env) as site:
        page.goto(site.base_url + "/live/")
        for _ in range(4):
            page.locator("#open-socket").click()
            expect(page.locator(f"#socket-{page.locator('li.socket').count()}")).to_have_attribute(
                "data-state", re.compile("open|closed")
            )
        for number in (1, 2, 3):
            expect(page.locator(f"#socket-{number}")).to_have_attribute("data-state", "open")
        refused = page.locator("#socket-4")
        expect(refused).to_have_attribute("data-code", "1013")
        expect(refused.locator(".state")).to_contain_text("closed with 1013")
        assert live.status().used == 3
        page.screenshot(path=str(ARTIFACTS / "example-live.png"), full_page=True)
        page.locator("#socket-1 button").click()  # one closed: its permit comes back
        expect(page.locator("#socket-1")).to_have_attribute("data-state", "closed")
        wait_until(lambda: live.status().used == 2)
        page.locator("#open-socket").click()
        expect(page.locator("#socket-5")).to_have_attribute("data-state", "open")
        page.close()  # the browser's sockets close with their page
        wait_until(lambda: live.status().used == 0)
    assert page.problems == []  # a refusal is a close with its code, not an error
