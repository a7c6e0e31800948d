"""What one anonymous client can hold in a waiting room, and what it costs: the review's attacks, as tests.

The review found that one client could take a room and keep it (a cheap poll
per place per lease kept each visit, and no visit had a maximum length), and
could hold as many places in line as it sent cookieless requests. Each test
here is one of those attacks; each failed before the room had a ``session``,
polls that renew nothing and per-client bounds (docs/security.md's room
section writes down what one client can hold and what it costs).

Django's test client against the session's real server; each ``Client`` is
one browser, and ``REMOTE_ADDR`` its client address.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from typing import Any

import pytest
from django.test import Client

from django_semaphore import get_semaphore, outcomes

JSON = {"HTTP_ACCEPT": "application/json"}
POLL = {"HTTP_ACCEPT": "application/json", "HTTP_SEMAPHORE_ROOM": "poll"}
ATTACKER, ALICE, BOB = "203.0.113.66", "198.51.100.1", "198.51.100.2"


def declare(settings: Any, limit: int, lease: float = 30, **room: Any) -> None:
    spec = {"refresh": 0.2, "abandon": 5, **room}
    settings.SEMAPHORES = {**settings.SEMAPHORES, "room": {"limit": limit, "lease": lease, "waiting_room": spec}}


@pytest.fixture(autouse=True)
def site(settings) -> Iterator[None]:
    settings.ROOT_URLCONF = "tests.support.room_site"
    outcomes.reset()
    yield


def browser(address: str) -> Client:
    return Client(REMOTE_ADDR=address)


def let_in_within(visitors: list[Client], seconds: float, attack: Any) -> list[float]:
    """Each visitor polls as the queue page does while ``attack()`` runs between polls: when each got in."""
    started = time.monotonic()
    got_in: dict[int, float] = {}
    while len(got_in) < len(visitors) and time.monotonic() - started < seconds:
        attack()
        for i, visitor in enumerate(visitors):
            if i not in got_in and visitor.get("/room/", **POLL).status_code == 204:
                got_in[i] = time.monotonic() - started
        time.sleep(0.05)
    assert len(got_in) == len(visitors), f"let in: {got_in} of {len(visitors)} within {seconds} s"
    return [got_in[i] for i in range(len(visitors))]


@pytest.mark.parametrize("keeping", ["polls", "page views"])
def test_one_client_that_walked_in_cannot_keep_the_room_past_a_session(settings, keeping: str) -> None:
    """The occupation attack: three places taken while the room had space, kept by polls or page views."""
    declare(settings, limit=3, session=2)
    places = [browser(ATTACKER) for _ in range(3)]
    assert [place.get("/room/").status_code for place in places] == [200] * 3
    real = [browser(ALICE), browser(BOB)]
    assert [visitor.get("/room/", **JSON).status_code for visitor in real] == [503, 503]
    headers = POLL if keeping == "polls" else {}

    def keep_the_places() -> None:
        for place in places:
            place.get("/room/", **headers)

    # Both real visitors get in within one session (plus a few refreshes), whatever the attacker does.
    times = let_in_within(real, 2 + 3, keep_the_places)
    print(f"kept by {keeping}: the two real visitors got in after {times[0]:.1f} s and {times[1]:.1f} s")


def test_a_poll_answered_by_the_room_never_renews_a_visit(settings) -> None:
    """A visit is kept by using the site: the page's poll (answered 204, the view never runs) keeps nothing."""
    declare(settings, limit=1, lease=1, session=None)
    holder, waiter = browser(ATTACKER), browser(ALICE)
    assert holder.get("/room/").status_code == 200
    assert waiter.get("/room/", **JSON).status_code == 503
    assert holder.get("/room/", **POLL).status_code == 204  # inside: "come in", nothing renewed
    let_in_within([waiter], 1 + 3, lambda: holder.get("/room/", **POLL))


def test_a_visit_is_renewed_by_its_page_views_up_to_its_session_then_it_goes_through_the_room_again(
    settings,
) -> None:
    declare(settings, limit=1, lease=1, session=2)
    visitor = browser(ALICE)
    started = time.monotonic()
    while time.monotonic() - started < 1.5:  # page views past one lease: still inside
        assert visitor.get("/room/").status_code == 200
        time.sleep(0.2)
    browser(BOB).get("/room/", **JSON)  # someone waits now
    while visitor.get("/room/").status_code == 200:
        assert time.monotonic() - started < 2 + 1, "a visit outlived its session"
        time.sleep(0.1)
    assert json.loads(visitor.get("/room/", **JSON).content)["position"] == 1  # in line: Bob got its place


def test_without_session_renewal_a_visit_lasts_its_session_from_the_start(settings) -> None:
    declare(settings, limit=1, lease=30, session=1, session_renewal=False)
    visitor = browser(ALICE)
    assert visitor.get("/room/").status_code == 200
    permit = get_semaphore("room").status()
    assert permit.used == 1
    browser(BOB).get("/room/", **JSON)
    started = time.monotonic()
    while visitor.get("/room/").status_code == 200:
        assert time.monotonic() - started < 1 + 1
        time.sleep(0.1)


def test_one_client_address_holds_client_places_at_most_in_line_and_inside(settings) -> None:
    declare(settings, limit=1, client_places=3, client_tickets_per_minute=None)
    script = [browser(ATTACKER) for _ in range(4)]
    assert [place.get("/room/", **JSON).status_code for place in script] == [200, 503, 503, 429]
    refused = script[3].get("/room/", **JSON)
    assert refused.status_code == 429 and refused["Retry-After"] == "5"
    assert json.loads(refused.content) == {"refused": "places", "retry_after_seconds": 5}
    assert "no-store" in refused["Cache-Control"]
    assert [place.get("/room/", **JSON).status_code for place in script[:3]] == [200, 503, 503]  # kept
    assert json.loads(browser(ALICE).get("/room/", **JSON).content)["position"] == 3  # another address: a place
    assert script[0].post("/room/done/").status_code == 200  # one of the three ends: a place for the fourth
    assert script[3].get("/room/", **JSON).status_code == 503
    page = browser(ATTACKER).get("/room/")
    assert page.status_code == 429 and b"Too many places from your network" in page.content


@pytest.mark.slow
def test_one_client_address_takes_client_tickets_per_minute_new_places_at_most(settings) -> None:
    declare(settings, limit=100, client_places=None, client_tickets_per_minute=5)
    answers = [browser(ATTACKER).get("/room/", **JSON) for _ in range(6)]  # cookieless: a new ticket each
    assert [answer.status_code for answer in answers] == [200] * 5 + [429]
    assert json.loads(answers[-1].content) == {"refused": "new", "retry_after_seconds": 12}
    assert browser(ALICE).get("/room/", **JSON).status_code == 200  # another address has its own
    time.sleep(12.5)  # a minute / 5: one more
    assert browser(ATTACKER).get("/room/", **JSON).status_code == 200


def test_a_cookieless_flood_cannot_push_a_real_visitor_back(settings) -> None:
    """The review's flood made a real visitor's position read 15,189: now one address adds its bound at most."""
    declare(settings, limit=1)  # the defaults: 50 places, 30 new places a minute per address
    browser(ALICE).get("/room/")
    real = browser(BOB)
    started = time.monotonic()
    flood = [browser(ATTACKER).get("/room/", **JSON).status_code for _ in range(200)]
    refilled = int((time.monotonic() - started) / 2)  # the bucket gains one new place every 2 s (30 a minute)
    placed = flood.count(503)
    assert 30 <= placed <= 30 + refilled + 1 and flood.count(429) == 200 - placed
    assert json.loads(real.get("/room/", **JSON).content)["position"] == placed + 1


def test_a_script_cannot_read_its_place_in_a_random_room_to_keep_the_best_of_many_tickets(settings) -> None:
    """Grinding: in a random-order room each new ticket lands at a place drawn for it. A script that could read
    its place would take tickets (30 a minute per address) and keep the best-placed one, where a person gets
    one draw: the answers of one line's tickets must not tell their places apart."""
    declare(settings, limit=1, queueing="random", client_places=None, client_tickets_per_minute=None)
    first = browser(ALICE)
    assert first.get("/room/").status_code == 200
    assert first.post("/room/done/").status_code == 200  # a visit ended: the room knows a visit's length
    assert browser(BOB).get("/room/").status_code == 200  # the room is full again
    tickets = [browser(ATTACKER) for _ in range(12)]
    for ticket in tickets:
        assert ticket.get("/room/", **JSON).status_code == 503
    answers = [json.loads(ticket.get("/room/", **JSON).content) for ticket in tickets]
    assert {answer["position"] for answer in answers} == {None}
    etas = {answer["eta_seconds"] for answer in answers}
    assert len(etas) == 1 and None not in etas  # the line's wait, not the ticket's own
    pages = [ticket.get("/room/") for ticket in tickets]
    assert {page.context["ahead"] for page in pages} == {None}  # a site's own template gets nothing to show
    assert len({re.sub(rb"<time.*?</time>", b"", page.content) for page in pages}) == 1


def test_nobody_reads_their_drawn_place_before_the_opening(settings) -> None:
    """The pre-queue's places are drawn at the opening: none is shown before it, nor given to a site's template."""
    declare(settings, limit=1, opens=time.time() + 3600, client_places=None, client_tickets_per_minute=None)
    tickets = [browser(ATTACKER) for _ in range(6)]
    for ticket in tickets:
        assert ticket.get("/room/", **JSON).status_code == 503
    answers = [json.loads(ticket.get("/room/", **JSON).content) for ticket in tickets]
    assert {(answer["position"], answer["eta_seconds"]) for answer in answers} == {(None, None)}
    pages = [ticket.get("/room/") for ticket in tickets]
    assert {page.context["ahead"] for page in pages} == {None}
