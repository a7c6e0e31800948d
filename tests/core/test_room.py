"""A waiting room in Redis (core/lua/room.lua, core/visits.py): the line of visitors, in both ways the Lua runs.

Visitors are tokens here (the request path turns tickets into them:
tests/faces/test_waiting_room.py); the room's refresh and abandon times are
fractions of a second, so abandoned places go in a test's time.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
import redis

from django_semaphore import Semaphore, get_semaphore
from django_semaphore.core import visits
from django_semaphore.core.conf import SemaphoreConfig
from django_semaphore.core.visits import IN_LINE, INSIDE, LET_IN
from django_semaphore.testing import RedisServer

from ..support import modes

ABANDON = 0.4


@pytest.fixture(autouse=True)
def room_way(way: modes.Way, redis_server: RedisServer, settings) -> modes.Way:
    """The app runs its Lua ``way``: every test here runs with Functions and with EVALSHA."""
    settings.SEMAPHORE_CONNECTION = way.url(redis_server.url)
    return way


def room(settings: Any, limit: int = 2, **options: Any) -> Semaphore:
    spec = {"refresh": 0.1, "abandon": ABANDON, **options.pop("room", {})}
    declared = {"limit": limit, "lease": 30, "waiting_room": spec, **options}
    settings.SEMAPHORES = {**settings.SEMAPHORES, "room": declared}
    return get_semaphore("room")


def visit(sem: Semaphore, who: str) -> visits.RoomReply:
    return visits.visit(sem, who)[0]


def a_millisecond_later() -> None:
    """A rate needs a window longer than 0 ms: calls this fast can all fall in one ms of the server's clock."""
    time.sleep(0.002)


def line_up(sem: Semaphore, *who: str) -> list[visits.RoomReply]:
    return [visit(sem, name) for name in who]


def test_visitors_are_let_in_while_there_is_room_then_wait_in_the_order_they_came(settings) -> None:
    sem = room(settings, limit=2)
    replies = line_up(sem, "a", "b", "c", "d", "e")
    assert [r.code for r in replies] == [LET_IN, LET_IN, IN_LINE, IN_LINE, IN_LINE]
    assert [r.position for r in replies] == [0, 0, 1, 2, 3]
    assert replies[-1].used == 2 and replies[-1].waiting == 3
    again = visit(sem, "a")
    assert again.code == INSIDE and again.used == 2  # a visitor inside is one visitor, request after request
    assert [visit(sem, name).position for name in ("e", "c", "d")] == [3, 1, 2]  # asking again keeps the place


def test_an_ended_visit_lets_in_the_head_of_the_line_and_no_one_else(settings) -> None:
    sem = room(settings, limit=2)
    line_up(sem, "a", "b", "c", "d", "e")
    assert visits.end(sem, "room-x") is False  # nobody by that name is inside
    assert visits.end(sem, "a") is True
    assert visit(sem, "e").position == 2  # c was let in as a left; d is first now
    assert visit(sem, "d").position == 1
    assert visit(sem, "c").code == INSIDE  # its visit began when a's ended: its next request is inside
    assert sem.status().used == 2


def test_exactly_the_first_ones_the_room_has_space_for_are_let_in(settings) -> None:
    """Let in only when fewer than (limit - inside) are ahead: three places free, three let in, in order."""
    sem = room(settings, limit=3)
    line_up(sem, "a", "b", "c", "w1", "w2", "w3", "w4", "w5")
    assert sem.set_limit(6) == 6  # three more places: the line is served at once
    assert [visit(sem, name).code for name in ("w1", "w2", "w3")] == [INSIDE] * 3
    assert [visit(sem, name).position for name in ("w4", "w5")] == [1, 2]
    assert sem.status().used == 6


def test_a_newcomer_never_passes_anyone_in_line(settings) -> None:
    sem = room(settings, limit=1)
    line_up(sem, "a", "b")
    assert visits.end(sem, "a") is True  # b is let in
    assert visits.end(sem, "b") is True  # nobody waits now, one place is free
    assert visit(sem, "newcomer").code == LET_IN
    line_up(sem, "c")
    sem.set_limit(2)  # c is let in by the raise, before any newcomer asks
    assert visit(sem, "late").code == IN_LINE


def test_position_counts_the_people_ahead_after_abandoned_places_are_purged(settings) -> None:
    sem = room(settings, limit=1)
    line_up(sem, "a", "w1", "w2", "w3", "w4", "w5")
    deadline = time.monotonic() + ABANDON * 2
    while time.monotonic() < deadline:  # w2 and w3 stop asking; the others keep their places
        for name in ("w1", "w4", "w5"):
            visit(sem, name)
        visit(sem, "a")
        time.sleep(0.05)
    reply = visit(sem, "w5")
    assert reply.position == 3 and reply.waiting == 3  # w1 and w4 ahead
    assert reply.abandoned == 2


def test_a_visitor_silent_longer_than_abandon_goes_to_the_back(settings) -> None:
    sem = room(settings, limit=1)
    line_up(sem, "a", "first", "second")
    time.sleep(ABANDON + 0.1)
    assert visit(sem, "second").position == 1  # first lost its place; second's own is gone too: it rejoins
    assert visit(sem, "first").position == 2  # back, behind whoever asked since


def test_an_abandoned_head_holds_a_place_it_was_given_only_until_it_would_have_lost_it(
    settings, redis_client: redis.Redis
) -> None:
    """The head, silent, is let in while it still has its place; the place comes back when its abandon time does."""
    sem = room(settings, limit=1)
    line_up(sem, "a", "head", "next")
    keys = sem.calls.keys
    head_deadline = redis_client.zscore(keys.alive, "head")
    visit(sem, "next")
    assert visits.end(sem, "a") is True  # handed to the silent head
    assert redis_client.zscore(keys.holders, "head") == head_deadline  # no longer than its place would have lasted
    while visit(sem, "next").code == IN_LINE:
        time.sleep(0.02)
    now_ms = redis_client.time()
    assert now_ms[0] * 1000 + now_ms[1] // 1000 >= head_deadline  # let in once the head's time was up, not later


def test_a_head_let_in_while_away_keeps_the_place_until_its_abandon_time_even_past_a_shorter_lease(
    settings, redis_client: redis.Redis
) -> None:
    """A visitor let in between two polls must find its place when it next asks, however short the lease."""
    sem = room(settings, limit=1, lease=0.1, room={"abandon": 2})
    line_up(sem, "a", "head")
    head_deadline = redis_client.zscore(sem.calls.keys.alive, "head")
    assert visits.end(sem, "a") is True  # handed to the head, away from its page
    assert redis_client.zscore(sem.calls.keys.holders, "head") == head_deadline
    time.sleep(0.5)  # longer than the lease, shorter than the head's abandon time
    assert visit(sem, "head").code == INSIDE


def test_copies_of_one_visitor_hold_one_place(settings) -> None:
    sem = room(settings, limit=1)
    line_up(sem, "a", "b", "shared")
    assert [visit(sem, "shared").position for _ in range(3)] == [2, 2, 2]
    assert sem.status().waiting == 2


def test_letting_the_next_ones_in_goes_past_the_limit_and_only_as_far_as_the_line(settings) -> None:
    sem = room(settings, limit=1)
    line_up(sem, "a", "b", "c", "d")
    reply = visits.let_in(sem, 2)
    assert reply.let_in == 2 and reply.used == 3 and reply.waiting == 1
    assert [visit(sem, name).code for name in ("b", "c")] == [INSIDE, INSIDE]
    assert visits.let_in(sem, 10).let_in == 1
    with pytest.raises(ValueError, match="whole number"):
        visits.let_in(sem, 0)


def test_queue_all_sends_every_newcomer_through_the_line_which_still_moves(settings) -> None:
    sem = room(settings, limit=2)
    assert visits.queue_all(sem, True).queue_all is True
    first = visit(sem, "a")
    assert first.code == IN_LINE and first.position == 1  # room for it, and still it waits its turn
    assert visit(sem, "a").code == LET_IN  # its turn at its next request
    assert visits.queue_all(sem, False).queue_all is False
    assert visit(sem, "b").code == LET_IN


def test_a_paused_room_lets_nobody_in_and_has_no_estimate(settings) -> None:
    sem = room(settings, limit=1)
    line_up(sem, "a", "b", "c", "d")
    time.sleep(0.02)
    visits.end(sem, "a")
    visits.end(sem, "b")  # two visits ended: the rate is known
    a_millisecond_later()
    assert visit(sem, "d").eta_seconds(1) is not None
    sem.set_limit(0)
    visits.end(sem, "c")
    reply = visit(sem, "d")
    assert reply.code == IN_LINE and reply.position == 1 and reply.paused
    assert reply.eta_seconds(0) is None


def test_the_estimate_waits_for_two_visitors_let_in_from_the_line_while_no_visit_ended(settings) -> None:
    sem = room(settings, limit=2)
    line_up(sem, "a", "b", "c", "d", "e", "f")
    reply = visit(sem, "f")
    assert reply.admitted == 2 and reply.eta_seconds(3) is None  # the two who walked in say nothing of the line
    assert reply.full_since_ms == reply.pace_ms > 0  # the line formed when c came
    visits.let_in(sem, 1)  # an operator lets one in: the line's first move (its pace is measured from there)
    visits.let_in(sem, 1)  # one admission measured, no visit ended
    a_millisecond_later()
    assert visit(sem, "f").eta_seconds(1) is None
    visits.let_in(sem, 1)
    a_millisecond_later()
    reply = visit(sem, "f")
    assert reply.window_from_line == 2 and reply.window_admitted == 2 and reply.visit_ms == 0
    rate = reply.per_second
    assert rate is not None and reply.eta_seconds(reply.position - 1) == round(reply.position / rate, 1)
    assert reply.per_minute == round(rate * 60, 2)


def test_once_visits_ended_the_estimate_weighs_the_limit_every_visit_with_the_line_s_own_pace(settings) -> None:
    """A line that has just formed moves at about the limit every average visit; its own pace soon outweighs it."""
    sem = room(settings, limit=2, room={"abandon": 5})
    line_up(sem, "a", "b", "c", "d", "e")
    time.sleep(0.2)
    visits.end(sem, "a")  # a visit of about 0.2 s: c is let in
    reply = visit(sem, "e")
    assert 150 <= reply.visit_ms <= 2000 and reply.expected_per_second == 2000 / reply.visit_ms
    # c's admission was the line's first move: its pace is measured from there, and only the visits speak yet.
    assert reply.window_from_line == 0 and reply.per_second is not None
    assert reply.per_second == 3 / (reply.window_ms / 1000 + 3 / reply.expected_per_second)
    assert reply.eta_seconds(1, refresh=2.0) == round(2 / reply.per_second + 1.0, 1)
    time.sleep(0.2)
    visits.end(sem, "b")  # d is let in: one admission measured, weighed with the visits' three
    reply = visit(sem, "e")
    assert reply.window_from_line == 1
    assert reply.per_second == 4 / (reply.window_ms / 1000 + 3 / reply.expected_per_second)


def test_a_visit_is_renewed_by_each_request_and_never_shortened(settings, redis_client: redis.Redis) -> None:
    sem = room(settings, limit=1, lease=5)
    reply, permit = visits.visit(sem, "a")
    assert permit is not None and reply.lease_deadline_ms - reply.now_ms == 5000
    assert permit.renew(60) is True
    again, _ = visits.visit(sem, "a")
    assert again.code == INSIDE and again.lease_deadline_ms - again.now_ms > 50_000


def test_a_room_lease_is_five_minutes_unless_the_entry_sets_one(settings) -> None:
    settings.SEMAPHORES = {**settings.SEMAPHORES, "plain_room": {"limit": 1, "waiting_room": True}}
    config = get_semaphore("plain_room").config
    assert config.lease == 300.0 and config.waiter_ttl == 30.0 and config.room is not None
    assert config.room.refresh == 10.0 and config.room.cookie == "semaphore_room_plain_room"


def test_the_figures_count_since_the_room_first_counted(settings) -> None:
    sem = room(settings, limit=1)
    line_up(sem, "a", "b")
    figures = visits.figures(sem)
    assert figures.code == 0 and figures.used == 1 and figures.waiting == 1
    assert figures.admitted == 1 and figures.abandoned == 0
    assert 0 <= figures.now_ms - figures.since_ms < 60_000
    time.sleep(ABANDON + 0.1)
    assert visits.figures(sem).abandoned == 1 and visits.figures(sem).since_ms == figures.since_ms


def test_only_a_room_takes_room_operations(settings) -> None:
    plain = Semaphore(SemaphoreConfig.from_options("plain", {"limit": 1}))
    with pytest.raises(ValueError, match="no waiting room"):
        visits.visit(plain, "a")
    from django_semaphore.core.connection import run

    with pytest.raises(redis.ResponseError, match="room needs a waiting room"):
        run(plain.calls.room("figures"), "plain", None)


def test_the_metrics_read_visitors_inside_and_in_line_from_the_figures_and_the_status(settings) -> None:
    """What metrics report for a room (usage = visitors inside, waiter.count = visitors in line), either way."""
    from django_semaphore.ops import rooms

    sem = room(settings, limit=2)
    line_up(sem, "a", "b", "a", "c", "d", "e")
    figures = rooms.figures(sem)
    assert figures is not None and (figures["inside"], figures["waiting"]) == (2, 3)
    status = sem.status()
    assert (status.used, status.waiting) == (2, 3)
