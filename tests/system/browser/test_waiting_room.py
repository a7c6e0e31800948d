"""The waiting room's queue page in real headless Chromium, against gunicorn with several workers.

Twelve browser contexts (each its own cookie jar, so its own visitor) queue
at a room of 4; each page, left alone, updates its place in its aria-live
region without loading again and moves to the guarded page by itself, in the
order the visitors arrived. A browser without JavaScript gets there too, by
the page's own refresh (which its script cancels), and so does one whose script
is not served. The queue page's screenshot is
docs/waiting-room.png (copied from test-artifacts/waiting-room.png).
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from django_semaphore import get_semaphore
from django_semaphore.core.visits import figures
from django_semaphore.ops import pausing

from ..conftest import RoomSite
from .conftest import ARTIFACTS

pytestmark = pytest.mark.processes

WELCOME = "Welcome, you are in"


def _problems(page: Any) -> list[str]:
    """Console errors and uncaught exceptions, but the 503s of the queue page and its polls and the favicon."""
    problems: list[str] = []

    def on_console(message: Any) -> None:
        where = message.location.get("url", "")
        if message.type == "error" and "status of 503" not in message.text and not where.endswith("/favicon.ico"):
            problems.append(f"{message.text} at {where}")

    page.on("console", on_console)
    page.on("pageerror", lambda error: problems.append(str(error)))
    return problems


class Watch:
    """Reads the room's count inside from the server every 20 ms while the browsers move."""

    def __init__(self) -> None:
        self.seen: list[int] = []
        self._on = threading.Event()
        self._thread = threading.Thread(target=self._run)

    def _run(self) -> None:
        room = get_semaphore("room")
        while self._on.is_set():
            self.seen.append(room.status().used)
            time.sleep(0.02)

    def __enter__(self) -> Watch:
        self._on.set()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._on.clear()
        self._thread.join()


LIMIT = 4  # the twelve browsers' room: let in four at a time


def test_twelve_browsers_wait_in_line_and_are_let_in_by_themselves_in_order(browser: Any, room_site: RoomSite) -> None:
    from playwright.sync_api import expect

    # The line moves as visits end: the site ends each visit once its page shows (as a checkout's last step
    # would), in the order of arrival, so four are let in at once and then one per visit ended. The abandon
    # time is how long a page may go without asking before it loses its place, in line or let in while away
    # (its claim to come): 30 s, since the line takes 20 to 40 s to form on a loaded machine (twelve pages,
    # one browser) and CI's busiest moments held a page's polls back for more than the 12 s this once was.
    base = room_site(limit=LIMIT, lease=1.0, refresh=1.0, abandon=30.0)
    room = get_semaphore("room")
    pausing.pause(room)  # the operator's pause: every visitor queues, so the line forms in a known order
    contexts = [browser.new_context(viewport={"width": 900, "height": 700}) for _ in range(12)]
    try:
        pages, problems = [], []
        for index, context in enumerate(contexts):  # one after another: the order of arrival
            page = context.new_page()
            problems.append(_problems(page))
            response = page.goto(base + "/room/welcome/")
            assert response is not None and response.status == 503
            assert response.headers["retry-after"] == "1"
            expect(page.locator("h1")).to_have_text("You are in line")
            expect(page.locator('[data-room="position"]')).to_have_text(str(index + 1))
            page.evaluate("window.stillTheSamePage = true")  # gone if the page loads again
            pages.append(page)
        status = pages[-1].locator("[aria-live]")
        assert status.get_attribute("aria-live") == "polite" and status.get_attribute("role") == "status"
        expect(pages[-1].locator('[data-room="paused"]')).to_be_visible(timeout=5000)
        assert room.status().waiting == 12

        def come_in(page: Any) -> None:
            """The page moves by itself (nothing is clicked or reloaded), then the site ends its visit."""
            expect(page.locator("h1")).to_have_text(WELCOME, timeout=60000)
            ended = page.context.request.post(base + "/room/done/")
            assert ended.ok and ended.json()["ended"] is True

        with Watch() as watch:
            pausing.resume(room)
            for page in pages[:4]:  # the first four, let in at once
                come_in(page)
            last = pages[-1]
            # In place, by the script: the place goes down and the estimate appears (after 2 admissions).
            expect(last.locator('[data-room="position"]')).not_to_have_text("12", timeout=15000)
            expect(last.locator('[data-room="eta"]')).not_to_have_text("unknown", timeout=45000)
            expect(last.locator('[data-room="paused"]')).to_be_hidden()
            assert last.evaluate("window.stillTheSamePage") is True
            assert last.locator("h1").inner_text() == "You are in line"
            last.screenshot(path=str(ARTIFACTS / "waiting-room.png"))
            for page in pages[4:]:
                come_in(page)
        fences = [int(page.locator("#fence").inner_text()) for page in pages]
        # A page whose polls a loaded machine held back past the abandon time lost its place, as it should,
        # and came back at the end of the line (abandoned), or lost the visit it was let in to while away and
        # walked in again later (admitted twice): the order is then not the order of arrival.
        done = figures(room)
        assert done.abandoned == 0 and done.admitted == 12, "a page's polls were held back past the abandon time"
        assert fences == sorted(fences) and len(set(fences)) == 12  # let in in the order they came
        assert max(watch.seen) <= LIMIT and len(watch.seen) > 50  # never more inside than the limit
        assert problems == [[] for _ in pages]  # no CSP violation, no script error
    finally:
        for context in contexts:
            context.close()


def test_without_javascript_the_page_asks_again_by_itself_and_lets_the_visitor_in(
    browser: Any, room_site: RoomSite
) -> None:
    from playwright.sync_api import expect

    base = room_site(limit=1, lease=1.0, refresh=1.0, abandon=4.0)
    room = get_semaphore("room")
    pausing.pause(room)
    context = browser.new_context(java_script_enabled=False)
    try:
        page = context.new_page()
        response = page.goto(base + "/room/welcome/")
        assert response is not None and response.status == 503
        expect(page.locator('[data-room="position"]')).to_have_text("1")
        expect(page.get_by_role("link", name="Check now")).to_be_visible()
        assert "every 1 second" in page.locator("main").inner_text()
        time.sleep(2.5)  # the <noscript> refresh asks again while it waits: the place is kept
        assert room.status().waiting == 1
        pausing.resume(room)
        expect(page.locator("h1")).to_have_text(WELCOME, timeout=15000)
    finally:
        context.close()


def test_a_page_whose_script_is_not_served_still_lets_the_visitor_in(browser: Any, room_site: RoomSite) -> None:
    """The review's strand: DEBUG = False, static files not served, waiting_room.js a 404. The page asks again
    by its own refresh (which the script cancels when it runs), so the visitor gets in all the same."""
    from playwright.sync_api import expect

    base = room_site(limit=1, lease=1.0, refresh=1.0, abandon=4.0)
    room = get_semaphore("room")
    pausing.pause(room)
    context = browser.new_context()
    try:
        page = context.new_page()
        missing = []
        page.route("**/waiting_room.js", lambda route: (missing.append(route.request.url), route.fulfill(status=404)))
        response = page.goto(base + "/room/welcome/")
        assert response is not None and response.status == 503
        expect(page.locator('[data-room="position"]')).to_have_text("1")
        page.wait_for_timeout(2500)  # the page asked again by itself meanwhile: the place is kept
        assert len(missing) >= 2 and room.status().waiting == 1
        pausing.resume(room)
        expect(page.locator("h1")).to_have_text(WELCOME, timeout=15000)
    finally:
        context.close()


def test_with_a_proof_of_work_the_page_solves_it_and_the_visitor_joins(browser: Any, room_site: RoomSite) -> None:
    """The default difficulty, in real Chromium: each visitor's page solves its challenge and lets it in. The
    times to join are printed (docs/performance.md reports their median), not asserted."""
    import statistics

    from playwright.sync_api import expect

    from django_semaphore.core.room_options import DEFAULT_WORK_BITS

    # Visits of 600 s: every one is still inside at the end (30 s ran out for the first of ten joins that a
    # loaded machine spread over more than that).
    base = room_site(limit=20, lease=600.0, refresh=1.0, abandon=10.0, proof=DEFAULT_WORK_BITS)
    joined = []
    for _ in range(10):
        context = browser.new_context()
        try:
            page = context.new_page()
            problems = _problems(page)
            started = time.monotonic()
            response = page.goto(base + "/room/welcome/")
            assert response is not None and response.status == 503  # a challenge, no place yet
            expect(page.locator("h1")).to_have_text(WELCOME, timeout=30000)
            joined.append(time.monotonic() - started)
            assert problems == []
        finally:
            context.close()
    assert get_semaphore("room").status().used == 10
    print(f"joined at {DEFAULT_WORK_BITS} bits: median {statistics.median(joined):.2f} s, {sorted(joined)}")
