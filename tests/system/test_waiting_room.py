"""A waiting room served by gunicorn with several worker processes, visited over HTTP by visitors with their
own cookie jars: order, places, tickets and bypass hold across processes.

The room runs with a refresh and a lease of about a second (tests/support/room_settings.py
reads them from the environment), so a line of 50 moves in seconds. Whatever
is counted inside is read from the server (the semaphore's status, the
visits' fences), never from the visitors' clocks.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from http.cookiejar import Cookie, CookieJar
from pathlib import Path
from typing import Any

import pytest

from django_semaphore import get_semaphore
from django_semaphore.core import visits

from ..support.gunicorn import ROOT
from .conftest import RoomSite

pytestmark = pytest.mark.processes

COOKIE = "semaphore_room_room"


class Visitor:
    """One browser: its own cookie jar, asking the site over real HTTP."""

    def __init__(self, base: str, jar: CookieJar | None = None) -> None:
        self.base = base
        self.jar = jar if jar is not None else CookieJar()
        self.opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(self.jar))

    def get(self, path: str = "/room/", *, json_only: bool = False, poll: bool = False, method: str = "GET") -> Any:
        headers = {"Accept": "application/json"} if json_only or poll else {"Accept": "text/html"}
        if poll:
            headers["Semaphore-Room"] = "poll"
        request = urllib.request.Request(self.base + path, headers=headers, method=method)
        try:
            with self.opener.open(request, timeout=30) as response:
                return response.status, response.read(), response.headers
        except urllib.error.HTTPError as error:
            return error.code, error.read(), error.headers

    def position(self) -> int:
        status, body, _ = self.get(json_only=True)
        assert status == 503, (status, body[:200])
        return int(json.loads(body)["position"])

    def ticket(self) -> str:
        return next(cookie.value for cookie in self.jar if cookie.name == COOKIE and cookie.value is not None)

    def copy(self) -> Visitor:
        """Another tab or device with this visitor's ticket."""
        jar = CookieJar()
        for cookie in self.jar:
            jar.set_cookie(cookie)
        return Visitor(self.base, jar)

    def with_ticket(self, value: str) -> Visitor:
        jar = CookieJar()
        jar.set_cookie(_cookie(COOKIE, value))
        return Visitor(self.base, jar)


def _cookie(name: str, value: str) -> Cookie:
    return Cookie(0, name, value, None, False, "127.0.0.1", False, False, "/", True, False, None, False, None, None, {})


def _in_threads(work: list[Callable[[], None]]) -> None:
    errors: list[BaseException] = []

    def run(job: Callable[[], None]) -> None:
        try:
            job()
        except BaseException as error:  # reported by the test, not lost in a thread
            errors.append(error)

    threads = [threading.Thread(target=run, args=(job,)) for job in work]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not any(thread.is_alive() for thread in threads), "a visitor never finished"
    if errors:
        raise errors[0]


def test_fifty_visitors_are_let_in_in_the_order_they_came_and_never_more_than_the_limit(room_site: RoomSite) -> None:
    # Order and the limit are the point, not lapses (the tests below have theirs): every visit ends with
    # /room/done/ and every waiter polls, so a lease and an abandon time no loaded machine outlasts (the 50
    # first requests and 45 position reads come one after another) change nothing the test counts.
    base = room_site(limit=5, lease=60.0, refresh=1.0, abandon=60.0)
    room = get_semaphore("room")
    visitors = [Visitor(base) for _ in range(50)]
    first = [v.get() for v in visitors]  # their first requests, in this order: the order of arrival
    assert [status for status, _, _ in first] == [200] * 5 + [503] * 45
    assert [v.position() for v in visitors[5:]] == list(range(1, 46))
    fences: dict[int, int] = {}
    seen_inside: list[int] = []
    watching = threading.Event()
    watching.set()

    def watch() -> None:
        while watching.is_set():
            seen_inside.append(room.status().used)
            time.sleep(0.01)

    def visit(index: int, visitor: Visitor) -> None:
        rng = random.Random(index)
        if index >= 5:
            while True:  # politely, faster than the page's refresh: the server decides, not the client
                status, _, _ = visitor.get(poll=True)
                if status == 204:
                    break
                assert status == 503
                time.sleep(0.3)
        status, body, _ = visitor.get()
        assert status == 200, body[:200]
        inside = json.loads(body)
        fences[index] = inside["fence"]
        seen_inside.append(inside["used"])
        time.sleep(rng.uniform(0.05, 0.3))
        status, body, _ = visitor.get("/room/done/", method="POST")
        assert status == 200 and json.loads(body)["ended"] is True

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        _in_threads([lambda i=i, v=v: visit(i, v) for i, v in enumerate(visitors)])
    finally:
        watching.clear()
        watcher.join()
    let_in_order = sorted(fences, key=lambda index: fences[index])
    assert let_in_order == list(range(50))  # each visit's fence is minted when it is let in
    assert max(seen_inside) == 5 and len(seen_inside) > 100
    figures = visits.figures(room)
    assert figures.used == 0 and figures.waiting == 0 and figures.admitted == 50 and figures.abandoned == 0


def test_refresh_second_tab_and_a_short_disconnect_keep_the_place(room_site: RoomSite) -> None:
    # An abandon time no loaded machine outlasts between two of a waiting visitor's requests here (with 3 s,
    # `a` was abandoned before the loop below asked for it): a disconnect shorter than it keeps the place.
    base = room_site(limit=1, lease=30.0, refresh=1.0, abandon=10.0)
    inside, a, b, c = (Visitor(base) for _ in range(4))
    assert inside.get()[0] == 200
    assert [v.position() for v in (a, b, c)] == [1, 2, 3]
    assert b.get()[0] == 503 and b.position() == 2  # a refresh, as HTML and as JSON
    tab = b.copy()
    assert tab.position() == 2 and get_semaphore("room").status().waiting == 3  # one visitor, one place
    silent_until = time.monotonic() + 1.5  # b's browser offline for a while, well within its abandon time
    while time.monotonic() < silent_until:
        a.position()
        c.position()
        time.sleep(0.3)
    assert b.position() == 2


def test_a_silent_visitor_loses_its_place_and_never_stalls_the_line(room_site: RoomSite) -> None:
    base = room_site(limit=1, lease=30.0, refresh=1.0, abandon=3.0)
    inside, silent, b, c = (Visitor(base) for _ in range(4))
    assert inside.get()[0] == 200
    assert [v.position() for v in (silent, b, c)] == [1, 2, 3]
    until = time.monotonic() + 3.6  # the head says nothing for longer than its abandon time
    while time.monotonic() < until:
        b.position()
        c.position()
        time.sleep(0.5)
    assert (b.position(), c.position()) == (1, 2)
    assert visits.figures(get_semaphore("room")).abandoned == 1
    assert inside.get("/room/done/", method="POST")[0] == 200  # a place frees
    assert b.get(poll=True)[0] == 204  # b's very next poll (one refresh interval at most) lets it in
    assert silent.position() == 2  # back, behind c


def test_a_silent_head_given_a_place_holds_it_only_until_its_abandon_time(room_site: RoomSite) -> None:
    base = room_site(limit=1, lease=30.0, refresh=1.0, abandon=3.0)
    inside, silent, b = (Visitor(base) for _ in range(3))
    assert inside.get()[0] == 200
    assert silent.position() == 1
    last_heard = time.monotonic()
    assert b.position() == 2
    assert inside.get("/room/done/", method="POST")[0] == 200  # the place goes to the head, silent since last_heard
    polls = []
    while True:
        status = b.get(poll=True)[0]
        polls.append((time.monotonic() - last_heard, status))
        if status == 204:
            break
        time.sleep(0.5)
    waited, _ = polls[-1]
    assert waited > 2.5  # not before the head's place would have gone anyway (3 s, less the round trips)
    late = [at for at, status in polls if status == 503 and at > 3.0 + 0.5]
    assert late == []  # and at b's first poll after it: never a refresh interval later


def test_forged_edited_and_copied_tickets_across_workers(room_site: RoomSite) -> None:
    base = room_site(limit=1, lease=30.0, refresh=1.0, abandon=10.0)
    assert Visitor(base).get()[0] == 200
    honest = Visitor(base)
    assert honest.position() == 1
    ticket = honest.ticket()
    visitor_id, signature = ticket.split(":", 1)
    edited = ("0" if visitor_id[0] != "0" else "1") + visitor_id[1:] + ":" + signature
    for value in (edited, "f" * 32 + ":" + signature, "not-a-ticket"):
        forged = honest.with_ticket(value)
        assert forged.position() == get_semaphore("room").status().waiting  # a new visitor, at the back
        assert forged.ticket() != value
    copies = [honest.copy() for _ in range(12)]
    positions: list[int] = []
    _in_threads([lambda copy=copy: positions.append(copy.position()) for copy in copies])  # every worker at once
    assert positions == [1] * 12
    assert get_semaphore("room").status().waiting == 4  # the honest visitor and the three new ones


def test_static_files_paths_methods_staff_and_the_permission_pass_uncounted(
    room_site: RoomSite, tmp_path: Path
) -> None:
    base = room_site(limit=1, lease=30.0, refresh=1.0, abandon=10.0)
    sessions = _users(tmp_path)
    assert Visitor(base).get("/m/page/")[0] == 200
    assert Visitor(base).get("/m/page/")[0] == 503
    before = get_semaphore("site").status()
    assert Visitor(base).get("/static/django_semaphore/js/waiting_room.js")[0] == 200
    assert Visitor(base).get("/m/health/")[0] == 200
    assert Visitor(base).get("/m/page/", method="OPTIONS")[0] == 200  # passed the room
    for user in ("staff", "allowed"):
        visitor = Visitor(base).with_ticket("")
        visitor.jar.set_cookie(_cookie("sessionid", sessions[user]))
        status, _, _ = visitor.get("/m/page/")
        assert status == 200, user
    plain = Visitor(base)
    plain.jar.set_cookie(_cookie("sessionid", sessions["plain"]))
    assert plain.get("/m/page/")[0] == 503
    after = get_semaphore("site").status()
    assert (after.used, after.waiting) == (before.used, before.waiting + 1)  # only the plain user was counted


def _users(tmp_path: Path) -> dict[str, str]:
    result = subprocess.run(
        [sys.executable, "-m", "tests.support.room_users"],
        cwd=ROOT,
        env={"ROOM_DB": str(tmp_path / "room.sqlite3"), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    sessions: dict[str, str] = json.loads(result.stdout.strip().splitlines()[-1])
    return sessions
