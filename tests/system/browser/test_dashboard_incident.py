"""The dashboard for an incident, in real Chromium: rates, percentiles, both charts' axes and legends, the adaptive
card, and one time zone (the site's) even for a browser elsewhere."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from django.contrib.auth.models import User
from django.urls import reverse

from django_semaphore import get_semaphore
from django_semaphore.core.connection import get_client
from django_semaphore.core.tally import RESULTS, SLOT_MS, recent_key, tally
from django_semaphore.dashboard import views

from ...support.dashboard import staff
from ...support.polling import answered
from .conftest import ARTIFACTS
from .test_dashboard import expect_text

ZONE = "Asia/Kolkata"  # the site's; the browser is put in Los Angeles, 13.5 hours away
BROWSER_ZONE = "America/Los_Angeles"
ADAPTIVE = {"min": 2, "max": 6, "initial": 6, "target": 0.05, "window": 0.1, "backoff": 0.5}


@pytest.fixture
def incident(settings: Any) -> Iterator[None]:
    """A site in Kolkata with an adaptive limit cut once, and a minute of admitted, rejected and timed out."""
    settings.TIME_ZONE = ZONE
    settings.SEMAPHORES = {**settings.SEMAPHORES, "tuned": {"limit": {"adaptive": ADAPTIVE}, "lease": 30}}
    tally.flush()
    tuned = get_semaphore("tuned")
    for hold in (0.0, 0.07):  # the second window's hold is above the 50 ms target: the limit is cut
        permit = tuned.acquire()
        assert permit is not None
        time.sleep(hold)
        permit.release()
        time.sleep(0.12)
    single = get_semaphore("single")
    held = single.acquire(auto_renew=False)
    assert held is not None
    # A wait that times out (0.5 s: on a loaded machine a shorter one's deadline passed in its own clean-up).
    assert single.acquire(wait=0) is None and answered(lambda: single.acquire(wait=0.5)) is None
    held.release()
    tally.flush()
    seconds, _micros = get_client().time()
    # 30 rejected two slots ago, as lua/tally.lua writes them: 3 per second on the chart.
    get_client().hset(recent_key("single"), f"{int(seconds) * 1000 // SLOT_MS - 2}|c{RESULTS.index('rejected')}", 30)
    yield
    tally.flush()


@pytest.fixture
def viewer(transactional_db: None) -> User:
    return staff("viewer", "view_semaphore_dashboard")


def log_in(page: Any, live_server: Any) -> None:
    page.goto(live_server.url + reverse("admin:login"))
    page.fill("#id_username", "viewer")
    page.fill("#id_password", "pw")
    page.click("input[type=submit]")
    page.wait_for_url(f"**{reverse('admin:index')}")


@pytest.fixture
def away(browser: Any) -> Iterator[Any]:
    """A page in a browser whose own clock is in another zone; console errors collected in ``page.problems``."""
    context = browser.new_context(viewport={"width": 1280, "height": 900}, timezone_id=BROWSER_ZONE)
    page = context.new_page()
    page.problems = []
    page.on(
        "console",
        lambda m: (
            page.problems.append(m.text)
            if m.type == "error" and not m.location.get("url", "").endswith("/favicon.ico")  # the browser's own request
            else None
        ),
    )
    page.on("pageerror", lambda error: page.problems.append(str(error)))
    try:
        yield page
    finally:
        context.close()


def visible_texts(page: Any, selector: str) -> list[str]:
    found = page.locator(selector)
    assert found.count() > 0, selector
    assert all(found.nth(i).is_visible() for i in range(found.count())), selector
    return [text.strip() for text in found.all_inner_texts()]


def test_an_operator_reads_the_incident_off_the_dashboard(
    away: Any, live_server: Any, viewer: User, incident: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(views, "POLL_SECONDS", 1)
    page = away
    log_in(page, live_server)
    page.goto(live_server.url + reverse("admin:django_semaphore_semaphoredashboard_changelist"))
    single = '[data-semaphore="single"]'

    # The rates of the last minute and the totals since counting began.
    expect_text(page, f'{single} [data-field="activity.totals.acquired"]', "1")
    expect_text(page, f'{single} [data-field="activity.totals.rejected"]', "1")
    expect_text(page, f'{single} [data-field="activity.totals.timed_out"]', "1")
    rejected = float(page.locator(f'{single} [data-field="activity.per_second_shown.rejected"]').inner_text())
    assert rejected > 0.4  # 31 rejected in 60 to 70 s
    since = page.locator(f'{single} [data-field="activity.since_shown"]').inner_text()
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d", since)
    # Wait and hold percentiles, from the metrics' buckets.
    for field in ("wait.p50_shown", "wait.p95_shown", "hold.p50_shown", "hold.p95_shown"):
        assert re.fullmatch(r"[\d.]+ m?s", page.locator(f'{single} [data-field="activity.{field}"]').inner_text())

    # Both charts: a scale on each axis and a legend, visible.
    assert visible_texts(page, f"{single} [data-outcomes-chart] ~ [data-x-axis] span")[0]
    outcomes_scale = visible_texts(page, f'{single} [data-y-axis] [data-field^="activity.chart.y_axis"]')
    assert outcomes_scale == ["5", "2.5", "0"]  # 3 per second at the busiest slot: a round scale above it
    assert visible_texts(page, f'{single} [data-y-axis] [data-field^="chart.y_axis"]') == ["1", "0.5", "0"]
    legends = " ".join(visible_texts(page, f"{single} [data-legend] li"))
    for entry in ("peak in use", "waiting", "limit in force", "admitted", "rejected", "timed out"):
        assert entry in legends
    assert "samples)" not in page.locator(single).inner_text()
    rejected_line = page.locator(f'{single} [data-outcome-line="rejected"]').get_attribute("points")
    assert any(point.endswith(",24.0") for point in rejected_line.split())  # 3 of 5: a step to 3/5 of the height

    # The adaptive card says what it is, its bounds, target and why it last moved.
    tuned = page.locator('[data-semaphore="tuned"]')
    assert tuned.locator(".sem-adaptive-tag").is_visible()
    card = tuned.locator("[data-adaptive]").inner_text()
    assert re.search(r"Adaptive limit 3 \(bounds 2\u20136,\s+target 50 ms\)", card), card
    assert "> target 50ms" in card

    # One zone: the site's, named; "Updated" after a live refresh is the server's time there, not the browser's.
    assert visible_texts(page, "[data-time-zone]") == [f"Times in {ZONE} (the server's clock)"]
    expect_text(page, "[data-live-status]", re.compile(r"^Updated \d\d:\d\d:\d\d$"))
    shown = page.locator("[data-live-status]").inner_text().split()[-1]
    site_now = datetime.now(ZoneInfo(ZONE))
    assert any((site_now - timedelta(seconds=s)).strftime("%H:%M:%S") == shown for s in range(0, 30)), (
        f"{shown} is not the time in {ZONE}"
    )
    browser_time = page.evaluate("new Date().toLocaleTimeString('en-GB')")
    assert browser_time[:2] != shown[:2]  # the browser's own clock reads other hours
    # The refresh kept the charts' axes and lines.
    assert visible_texts(page, f'{single} [data-y-axis] [data-field^="activity.chart.y_axis"]') == ["5", "2.5", "0"]
    refreshed = page.locator(f'{single} [data-outcome-line="rejected"]').get_attribute("points")
    assert any(point.endswith(",24.0") for point in refreshed.split())

    page.screenshot(path=str(ARTIFACTS / "dashboard-incident.png"), full_page=True)
    assert page.problems == []


def test_the_detail_page_keeps_the_fencing_counter_in_its_details_row(
    away: Any, live_server: Any, viewer: User, incident: None
) -> None:
    page = away
    log_in(page, live_server)
    page.goto(live_server.url + reverse("admin:django_semaphore_semaphoredashboard_detail", args=["tuned"]))
    headline = page.locator(".sem-facts").first.inner_text()
    assert "Fencing counter" not in headline and "Holders" in headline
    assert "Fencing counter" in page.locator("[data-details]").inner_text()
    assert "Adaptive limit" in page.locator("[data-adaptive]").inner_text()
    expect_text(page, "[data-live-status]", re.compile(r"^Updated \d\d:\d\d:\d\d$"))
    assert page.problems == []
