"""A waiting room's launch mode: a scheduled opening with a shuffled pre-queue, new visitors a minute, and the
random queueing method (core/lua/room.lua, the places web/visits.py's keyed hash gives).

The shuffle must be fair (over many launches, each early arrival is as likely to end up anywhere in the
line) and must not cost an early arrival anything against a later one: everyone pre-queued is ahead of
everyone who comes after the opening, who then queue first come, first served.
"""

from __future__ import annotations

import time
import warnings
from collections import Counter
from typing import Any

import redis

from django_semaphore import get_semaphore
from django_semaphore.core import visits
from django_semaphore.core.semaphore import Semaphore
from django_semaphore.web.visits import shuffled_place

RUNS, EARLY = 600, 6


def launch_spec(limit: int = 1, **room: Any) -> dict[str, Any]:
    """A launch room's declaration: ``room``'s options over a one-second refresh and a minute's abandon."""
    return {"limit": limit, "lease": 60, "waiting_room": {"refresh": 1, "abandon": 60, **room}}


def launch_room(settings: Any, name: str, limit: int = 1, **room: Any) -> Semaphore:
    settings.SEMAPHORES = {**settings.SEMAPHORES, name: launch_spec(limit, **room)}
    return get_semaphore(name)


def arrive(sem: Semaphore, visitor: str) -> visits.RoomReply:
    assert sem.config.room is not None
    place = shuffled_place(sem.name, sem.config.room, visitor)
    return visits.visit(sem, visits.VisitAsk(f"room-{visitor}", shuffled=place))[0]


def test_the_pre_queue_is_shuffled_uniformly_over_many_launches(settings, redis_client: redis.Redis) -> None:
    """Each of six early arrivals, in 600 launches, lands in each of the six places about equally.

    The launches open at fixed times (far ahead), so the draw, a keyed hash of the room's name and opening and
    the visitor (``shuffled_place``), is the same in every run: a test whose draw changed with the clock failed
    in the rare runs whose fair draw fell in the tail the bound leaves (1 in 1,000 by design; CI met one).
    """
    opens = 4_102_444_800.0  # 2100-01-01
    places: dict[int, Counter[int]] = {arrival: Counter() for arrival in range(EARLY)}
    # Each launch its own room and opening (its own draw), declared at once: one settings override per room
    # would nest 600 deep, past the recursion limit of the settings' lookup.
    rooms = {f"launch{run}": launch_spec(opens=opens + run) for run in range(RUNS)}
    settings.SEMAPHORES = {**settings.SEMAPHORES, **rooms}
    for run in range(RUNS):
        sem = get_semaphore(f"launch{run}")
        for arrival in range(EARLY):
            reply = arrive(sem, f"{arrival:032x}")
            assert reply.code == visits.IN_LINE and reply.used == 0  # nobody in before the opening
        for arrival in range(EARLY):
            places[arrival][arrive(sem, f"{arrival:032x}").position] += 1
    expected = RUNS / EARLY
    # Pearson's sum, scaled by (EARLY - 1) / EARLY: each launch is a permutation (every place taken once), so
    # a cell's count is a sum of RUNS independent draws of chance 1 / EARLY, whose variance is EARLY / (EARLY - 1)
    # times a contingency table's. Unscaled, a fair shuffle's sum averages 30, not 25, and passed 52.6 in one run
    # of a hundred; scaled, it follows the chi-square of 25 degrees of freedom.
    deviations = sum((count - expected) ** 2 / expected for row in places.values() for count in row.values())
    chi_square = deviations * (EARLY - 1) / EARLY
    print(f"pre-queue places over {RUNS} launches: {dict(places[0])} (first arrival); chi-square {chi_square:.1f}")
    # 25 degrees of freedom: 52.6 is the 99.9th percentile of a fair shuffle's chi-square.
    assert chi_square < 52.6
    assert all(set(row) == set(range(1, EARLY + 1)) for row in places.values())


def test_after_the_opening_everyone_pre_queued_is_ahead_and_the_rest_come_first_come_first_served(
    settings,
) -> None:
    sem = launch_room(settings, "sale", limit=2, opens=time.time() + 1.5)
    early = [f"e{i:031x}" for i in range(5)]
    assert [arrive(sem, who).code for who in early] == [visits.IN_LINE] * 5
    assert visits.figures(sem).used == 0
    while time.time() < sem.config.room.opens_ms / 1000 + 0.05:  # type: ignore[union-attr]
        time.sleep(0.05)
    late = [f"l{i:031x}" for i in range(3)]
    late_positions = [arrive(sem, who).position for who in late]
    assert late_positions == [4, 5, 6]  # 5 pre-queued, 2 of them in now: behind the 3 left, in arrival order
    assert visits.figures(sem).used == 2
    early_positions = sorted(arrive(sem, who).position for who in early if arrive(sem, who).code == visits.IN_LINE)
    assert early_positions == [1, 2, 3]


def test_before_the_pre_queue_opens_nobody_takes_a_place(settings) -> None:
    now = time.time()
    sem = launch_room(settings, "sale", prequeue=now + 3600, opens=now + 7200)
    reply = arrive(sem, "a" * 32)
    assert reply.code == visits.NOT_YET and reply.waiting == 0 and reply.used == 0


def test_new_users_per_minute_lets_that_many_in_even_with_room_for_more(settings) -> None:
    sem = launch_room(settings, "sale", limit=10, new_users_per_minute=3)
    codes = [arrive(sem, f"{i:032x}").code for i in range(5)]
    assert codes == [visits.LET_IN] * 3 + [visits.IN_LINE] * 2
    reply = visits.figures(sem)
    assert reply.used == 3 and reply.waiting == 2


def test_random_queueing_gives_an_early_arrival_no_advantage(settings) -> None:
    sem = launch_room(settings, "sale", queueing="random")
    arrive(sem, "f" * 32)  # inside: the room is full
    order = [f"{i:032x}" for i in range(20)]
    for who in order:
        arrive(sem, who)
    positions = [arrive(sem, who).position for who in order]
    assert sorted(positions) == list(range(1, 21)) and positions != list(range(1, 21))


def test_a_place_is_drawn_without_a_deprecated_default(settings) -> None:
    """Django 6 warns on every ``salted_hmac`` that leaves its algorithm to the default (SHA-1, to change): the
    draw names SHA-256, so a launch's visitors do not fill a server's log with one warning each."""
    sem = launch_room(settings, "drawn", opens=time.time() + 3600)
    assert sem.config.room is not None
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert 1 <= shuffled_place(sem.name, sem.config.room, "0" * 32) <= 2**40
