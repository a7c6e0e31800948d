"""The dashboard in real Chromium against a live server with real permits held."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.urls import reverse

from django_semaphore import get_semaphore
from django_semaphore.core.tally import tally
from django_semaphore.dashboard import views

from .conftest import ARTIFACTS

WAIT_MS = 15_000


@pytest.fixture
def operator(transactional_db: None) -> User:
    user = User.objects.create_user("operator", password="correct horse", is_staff=True)
    codenames = ("view_semaphore_dashboard", "release_semaphore_permit")
    user.user_permissions.add(*Permission.objects.filter(codename__in=codenames))
    return user


@pytest.fixture
def viewer(transactional_db: None) -> User:
    user = User.objects.create_user("viewer", password="correct horse", is_staff=True)
    user.user_permissions.add(*Permission.objects.filter(codename="view_semaphore_dashboard"))
    return user


@pytest.fixture
def permits() -> Any:
    # Held, not renewed, for as long as the test may take on a loaded machine (the settings' 10 s lease of
    # "search" ran out while the browser logged in, and the busiest key changed under the test).
    lease = 600
    reports = get_semaphore("reports")
    held = [
        reports.acquire(label="nightly-export", auto_renew=False, lease=lease),
        reports.acquire(label="invoice-pdf", auto_renew=False, lease=lease),
    ]
    tally.flush()  # an earlier test's counts are not this one's
    reports.attempt(weight=2)  # turned away: shows in the counts every process writes (core/tally.py)
    tally.flush()
    search = [
        get_semaphore("search", key=user).acquire(auto_renew=False, lease=lease) for user in ("alice", "alice", "bob")
    ]
    get_semaphore("weighted").acquire(weight=4, label="batch", auto_renew=False, lease=lease)
    yield held
    for name in ("reports", "weighted"):
        get_semaphore(name).force_release_all()
    for permit in search:
        permit.release()


def expect_text(page: Any, selector: str, text: str | re.Pattern[str]) -> None:
    from playwright.sync_api import expect

    expect(page.locator(selector)).to_have_text(text, timeout=WAIT_MS)


def log_in(page: Any, live_server: Any, username: str) -> None:
    """Through the admin's own login form."""
    page.goto(live_server.url + reverse("admin:index"))
    page.fill("#id_username", username)
    page.fill("#id_password", "correct horse")
    page.click("input[type=submit]")
    page.wait_for_url(f"**{reverse('admin:index')}")


def test_operator_finds_and_frees_a_stuck_permit(page: Any, live_server: Any, operator: User, permits: Any) -> None:
    log_in(page, live_server, "operator")

    # The index links the dashboard under the app.
    dashboard = reverse("admin:django_semaphore_semaphoredashboard_changelist")
    page.locator(f"#content-main a[href='{dashboard}']").first.click()
    page.wait_for_url(f"**{dashboard}")
    reports = '[data-semaphore="reports"]'
    expect_text(page, f'{reports} [data-field="used"]', "2")
    expect_text(page, f'{reports} [data-field="activity.totals.rejected"]', "1")
    assert page.locator(f"{reports} [data-chart-used]").get_attribute("points")
    assert page.locator(f"{reports} [data-chart-limit]").get_attribute("points")
    expect_text(page, '[data-semaphore="search"] [data-busiest] li:first-child [data-cell="key_shown"]', "alice")
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


def detail_url(live_server: Any, name: str) -> str:
    return live_server.url + reverse("admin:django_semaphore_semaphoredashboard_detail", args=[name])


def test_limits_are_set_and_cleared_only_after_confirming(
    page: Any, live_server: Any, operator: User, permits: Any
) -> None:
    log_in(page, live_server, "operator")
    page.goto(detail_url(live_server, "reports"))
    page.evaluate("window.notReloaded = true")
    sent: list[str] = []
    page.on("request", lambda request: sent.append(request.post_data or "") if request.method == "POST" else None)
    clear = page.locator("form:has(input[name=clear])")
    assert clear.is_hidden()  # no override yet

    # Dismissed: nothing is sent.
    page.fill("#id_limit", "6")
    asked: list[str] = []
    page.once("dialog", lambda dialog: (asked.append(dialog.message), dialog.dismiss()))
    page.click(".sem-limit-form button")
    # Accepted: sent once, with confirm=yes; the numbers and the clear form follow without a reload.
    page.once("dialog", lambda dialog: (asked.append(dialog.message), dialog.accept()))
    page.click(".sem-limit-form button")
    expect_text(page, "[data-flash] li", "The limit of reports is now 6.")
    expect_text(page, '.sem-usage [data-field="limit"]', "6")
    page.wait_for_selector("form:has(input[name=clear]):not([hidden])")
    assert len(sent) == 1 and "confirm" in sent[0]
    assert get_semaphore("reports").status().override == 6

    page.once("dialog", lambda dialog: (asked.append(dialog.message), dialog.accept()))
    clear.locator("button").click()
    expect_text(page, "[data-flash] li", "Override cleared; the limit of reports is 3 again.")
    page.wait_for_selector("form:has(input[name=clear])[hidden]", state="attached")
    assert get_semaphore("reports").status().override is None
    assert len(sent) == 2 and len(asked) == 3 and all(asked)
    assert page.evaluate("window.notReloaded") is True
    assert page.problems == []


def test_pause_and_resume_only_after_confirming_and_the_page_says_paused(
    page: Any, live_server: Any, operator: User, permits: Any
) -> None:
    log_in(page, live_server, "operator")
    page.goto(detail_url(live_server, "reports"))
    page.evaluate("window.notReloaded = true")
    note, pause, resume = ".sem-paused-note", "form:has(input[name=pause])", "form:has(input[name=resume])"
    assert page.locator(note).is_hidden() and page.locator(resume).is_hidden()

    asked: list[str] = []
    page.once("dialog", lambda dialog: (asked.append(dialog.message), dialog.dismiss()))
    page.click(f"{pause} button")
    page.once("dialog", lambda dialog: (asked.append(dialog.message), dialog.accept()))
    page.click(f"{pause} button")
    expect_text(page, "[data-flash] li", "reports is paused: nothing new is granted until it is resumed.")
    page.wait_for_selector(f"{note}:not([hidden])")
    page.wait_for_selector(f"{resume}:not([hidden])")
    page.wait_for_selector(f"{pause}[hidden]", state="attached")
    page.wait_for_selector(".sem-usage [data-bar].level-paused", state="attached")
    assert get_semaphore("reports").status().override == 0
    page.screenshot(path=str(ARTIFACTS / "detail-paused.png"), full_page=True)

    page.once("dialog", lambda dialog: (asked.append(dialog.message), dialog.accept()))
    page.click(f"{resume} button")
    expect_text(page, "[data-flash] li", "reports is resumed; its limit is 3 again.")
    page.wait_for_selector(f"{note}[hidden]", state="attached")
    assert get_semaphore("reports").status().override is None
    assert len(asked) == 3 and "Pause this semaphore?" in asked[0] and "Resume" in asked[2]
    assert page.evaluate("window.notReloaded") is True
    assert page.problems == []


def test_the_dashboard_refuses_to_be_framed(page: Any, live_server: Any, operator: User, permits: Any) -> None:
    """Even by a page of its own origin: X-Frame-Options DENY, enforced by the browser."""
    from urllib.parse import quote

    log_in(page, live_server, "operator")
    framer = live_server.url + "/surface/framer/?src="
    page.goto(framer + quote("/surface/health/"))  # the set-up can frame an ordinary page
    page.frame_locator("iframe").locator("body").get_by_text("ok").wait_for(timeout=WAIT_MS)
    for address in (detail_url(live_server, "reports"), detail_url(live_server, "reports") + "status.json"):
        refused = page.expect_console_message(lambda message: "X-Frame-Options" in message.text, timeout=WAIT_MS)
        with refused as message:
            page.goto(framer + quote(address))
        assert "'deny'" in message.value.text
        assert page.frame_locator("iframe").locator("[data-semaphore]").count() == 0
        page.problems.clear()  # the refusal, reported as a console error, is the point here


def test_view_only_staff_see_token_prefixes_also_after_a_live_refresh(
    page: Any, live_server: Any, viewer: User, permits: Any
) -> None:
    log_in(page, live_server, "viewer")
    page.goto(detail_url(live_server, "reports"))
    page.wait_for_selector("[data-live-status]:not(.sem-stale)")
    expect_text(page, '[data-field="holders"]', "2")
    expect_text(page, "[data-live-status]", re.compile(r"^Updated"))  # the script has rebuilt the rows from JSON
    html = page.content()
    assert all(permit.token not in html for permit in permits)
    shown = page.locator("tbody[data-holders] tr").evaluate_all("rows => rows.map(row => row.dataset.token)")
    assert sorted(shown) == sorted(permit.token[:8] for permit in permits)
    assert page.locator("button.sem-release").count() == 0
    assert page.problems == []


# Wraps the page's fetch before its own script runs: each poll of the page's
# JSON answers 2.5 s late (longer than the poll interval set below), and the
# page records how many were in flight at once.
SLOW_POLLS = """
window.polls = {started: 0, inFlight: 0, most: 0};
const realFetch = window.fetch.bind(window);
window.fetch = async (url, options) => {
    const live = document.getElementById("semaphore-live");
    if (!live || String(url) !== live.dataset.pollUrl) {
        return realFetch(url, options);
    }
    window.polls.started += 1;
    window.polls.inFlight += 1;
    window.polls.most = Math.max(window.polls.most, window.polls.inFlight);
    try {
        await new Promise((resolve) => setTimeout(resolve, 2500));
        return await realFetch(url, options);
    } finally {
        window.polls.inFlight -= 1;
    }
};
"""


def test_a_slow_poll_is_never_overlapped_by_the_next(
    page: Any, live_server: Any, operator: User, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(views, "POLL_SECONDS", 1)  # the live server runs in this process
    page.add_init_script(SLOW_POLLS)
    page.goto(live_server.url + reverse("admin:login"))
    page.fill("#id_username", "operator")
    page.fill("#id_password", "correct horse")
    page.click("input[type=submit]")
    page.goto(live_server.url + reverse("admin:django_semaphore_semaphoredashboard_changelist"))
    # 1 s wait, 2.5 s answer, 1 s wait: the second poll starts at about 4.5 s
    # (waited for from here: wait_for_function would need the 'unsafe-eval' the CSP refuses).
    for _ in range(WAIT_MS // 100):
        if page.evaluate("window.polls.started") >= 2:
            break
        page.wait_for_timeout(100)
    polls = page.evaluate("window.polls")
    assert polls["started"] >= 2 and polls["most"] == 1, polls
    page.wait_for_selector("[data-live-status]:not(.sem-stale)")
    assert page.problems == []
