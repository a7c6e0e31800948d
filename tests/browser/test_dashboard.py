"""The dashboard in real Chromium against a live server with real permits held."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.urls import reverse

from django_semaphore import get_semaphore

from .conftest import ARTIFACTS

WAIT_MS = 15_000


@pytest.fixture
def operator(transactional_db: None) -> User:
    user = User.objects.create_user("operator", password="correct horse", is_staff=True)
    codenames = ("view_semaphore_dashboard", "release_semaphore_permit")
    user.user_permissions.add(*Permission.objects.filter(codename__in=codenames))
    return user


@pytest.fixture
def permits() -> Any:
    reports = get_semaphore("reports")
    held = [
        reports.acquire(label="nightly-export", auto_renew=False),
        reports.acquire(label="invoice-pdf", auto_renew=False),
    ]
    reports.attempt(weight=2)  # turned away: shows in the counters
    search = [get_semaphore("search", key=user).acquire(auto_renew=False) for user in ("alice", "alice", "bob")]
    get_semaphore("weighted").acquire(weight=4, label="batch", auto_renew=False)
    yield held
    for name in ("reports", "weighted"):
        get_semaphore(name).force_release_all()
    for permit in search:
        permit.release()


def expect_text(page: Any, selector: str, text: str) -> None:
    from playwright.sync_api import expect

    expect(page.locator(selector)).to_have_text(text, timeout=WAIT_MS)


def test_operator_finds_and_frees_a_stuck_permit(page: Any, live_server: Any, operator: User, permits: Any) -> None:
    # Log in through the admin's own form.
    page.goto(live_server.url + reverse("admin:index"))
    page.fill("#id_username", "operator")
    page.fill("#id_password", "correct horse")
    page.click("input[type=submit]")

    # The index links the dashboard under the app.
    dashboard = reverse("admin:django_semaphore_semaphoredashboard_changelist")
    page.locator(f"#content-main a[href='{dashboard}']").first.click()
    page.wait_for_url(f"**{dashboard}")
    reports = '[data-semaphore="reports"]'
    expect_text(page, f'{reports} [data-field="used"]', "2")
    expect_text(page, f'{reports} [data-field="counters.rejected"]', "1")
    assert page.locator(f"{reports} [data-chart-used]").get_attribute("points")
    expect_text(page, '[data-semaphore="search"] [data-busiest] li:first-child [data-cell="key"]', "alice")
    page.wait_for_selector("[data-live-status]:not(.sem-stale)")
    expect_text(page, '[data-semaphore="weighted"] [data-field="used"]', "4")
    page.screenshot(path=str(ARTIFACTS / "dashboard.png"), full_page=True)
    page.emulate_media(color_scheme="dark")
    page.screenshot(path=str(ARTIFACTS / "dashboard-dark.png"), full_page=True)
    page.emulate_media(color_scheme="light")

    # The detail page lists the holders; release one after confirming.
    page.click(f"{reports} h2 a")
    expect_text(page, '[data-field="holders"]', "2")
    assert page.locator("tbody[data-holders] tr").count() == 2
    page.evaluate("window.notReloaded = true")
    page.once("dialog", lambda dialog: dialog.accept())
    victim = permits[0].token
    page.locator(f'tr[data-token="{victim}"] button.sem-release').click()

    # The numbers drop without a reload.
    expect_text(page, '[data-field="holders"]', "1")
    expect_text(page, '[data-field="used"]', "1")
    expect_text(page, "[data-flash] li", f"Released {victim[:8]} of reports.")
    assert page.locator("tbody[data-holders] tr").count() == 1
    assert page.evaluate("window.notReloaded") is True
    page.screenshot(path=str(ARTIFACTS / "detail.png"), full_page=True)

    assert [h.token for h in get_semaphore("reports").status().holders] == [permits[1].token]
    assert permits[0].release() is False
    assert page.problems == []
