"""Every call does a bounded amount of work, however many places, leases or waiters lapsed at once.

The review's burst: a hundred thousand places in a waiting room's line lapse
at once (a crowd that closed its tabs, bots that stopped polling), then one
visitor asks. One script used to purge them all (1.9 s at 94k places, Redis
answering no one meanwhile). Now each call purges a batch (common.lua's
PURGE) and, while others remain, a room's call decides nothing (``AGAIN``:
core/visits.py sends it again), so positions never count an abandoned place.

Counted, not timed: the commands one call runs, from the server's own
``INFO commandstats`` (reset before each call), on a server of the test's own.
The time they take is benchmarks/room.py's burst figure (SLOWLOG, a PING's wait).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import redis

from django_semaphore import get_semaphore
from django_semaphore.core import scripts, visits
from django_semaphore.core.calls import Calls
from django_semaphore.testing import RedisServer

# common.lua's PURGE, and the commands a call runs besides one per purged entry (reads of the state, the
# holders and the line, the writes of its plan, each removal one command for a whole batch).
PURGE = 250
FIXED = 40
# What the client sends itself (and the test's own reading): not the script's work.
OUTSIDE = {"fcall", "evalsha", "eval", "config", "info", "function", "ping", "hello", "client", "select", "set"}
LAPSED = 100_000


@pytest.fixture
def admin(own_server: RedisServer) -> Iterator[redis.Redis]:
    """A client of the test's own server with no socket timeout: the unbounded call took seconds."""
    with redis.Redis.from_url(own_server.url) as client:
        yield client


def commands(admin: redis.Redis) -> int:
    stats: dict[str, Any] = admin.info("commandstats")
    return sum(
        int(value["calls"])
        for name, value in stats.items()
        if name.removeprefix("cmdstat_").split("|")[0] not in OUTSIDE
    )


def one_call(admin: redis.Redis, call: Any) -> tuple[Any, int]:
    """Run ``call`` once on the admin client: its reply, and the commands the script ran."""
    admin.config_resetstat()
    reply = scripts.run(admin, call)
    return reply, commands(admin)


def pipelined(admin: redis.Redis, calls: list[Any]) -> None:
    for first in range(0, len(calls), 1000):
        replies = scripts.run_pipeline(admin, calls[first : first + 1000])
        assert not any(isinstance(reply, Exception) for reply in replies), replies[:3]


def age(admin: redis.Redis, key: str, tokens: list[str]) -> None:
    """Their deadlines in ``key`` (heartbeats, leases) a long time ago: they lapsed, all at once."""
    for first in range(0, len(tokens), 5000):
        admin.zadd(key, dict.fromkeys(tokens[first : first + 5000], 1), xx=True)


@pytest.mark.slow
def test_a_hundred_thousand_places_lapsed_at_once_are_purged_a_batch_per_call_and_positions_stay_exact(
    settings, admin: redis.Redis, own_server: RedisServer
) -> None:
    # Commands counted, not timed: the engine's calls on a 10 s socket timeout, not the 0.5 s a loaded machine
    # (the suite beside `make bench`, 100,000 places just written) missed.
    settings.SEMAPHORE_CONNECTION = f"{own_server.url}?socket_timeout=10&socket_connect_timeout=10"
    settings.SEMAPHORES = {
        **settings.SEMAPHORES,
        "launch": {"limit": 1, "lease": 600, "waiting_room": {"refresh": 60, "abandon": 600}},
    }
    sem = get_semaphore("launch")
    visits.visit(sem, "inside")
    tokens = [f"v{i:06d}" for i in range(LAPSED + 3)]
    pipelined(admin, [sem.calls.room(f"visit {token} 600000 0") for token in tokens])
    kept = [tokens[10], tokens[LAPSED // 2], tokens[-1]]  # three who keep asking, in the front, middle, back
    age(admin, sem.calls.keys.alive, [token for token in tokens if token not in kept])

    rounds, most = 0, 0
    while True:
        raw, ran = one_call(admin, sem.calls.room(f"visit {kept[1]} 600000 0"))
        reply = visits.RoomReply.parse(raw)
        rounds, most = rounds + 1, max(most, ran)
        if reply.code != visits.AGAIN:
            break
        assert reply.position == 0  # nobody is ranked while abandoned places remain in the line
    print(f"{LAPSED} lapsed places: {rounds} calls, at most {most} commands in one")
    # Was one call of 100,312 commands (a ZSCORE per place, and its removals); now a few, each on 250 members.
    assert most <= PURGE + FIXED
    assert rounds >= LAPSED // PURGE
    assert reply.code == visits.IN_LINE and reply.position == 2 and reply.waiting == 3
    assert reply.abandoned == LAPSED
    assert [visits.visit(sem, who)[0].position for who in kept] == [1, 2, 3]


def test_a_room_lets_a_batch_in_per_call_and_a_visitor_whose_turn_it_is_does_not_wait_for_the_rest(
    settings, admin: redis.Redis
) -> None:
    """A limit raised by thousands: each call lets PURGE in at most, and the one whose turn it is is let in."""
    settings.SEMAPHORES = {
        **settings.SEMAPHORES,
        "launch": {"limit": 1, "lease": 600, "waiting_room": {"refresh": 60, "abandon": 600}},
    }
    sem = get_semaphore("launch")
    visits.visit(sem, "inside")
    tokens = [f"v{i:05d}" for i in range(5 * PURGE)]
    pipelined(admin, [sem.calls.room(f"visit {token} 600000 0") for token in tokens])
    admin.hset(sem.calls.keys.state, "limit", 1 + 4 * PURGE)  # room for all but the last PURGE
    raw, ran = one_call(admin, sem.calls.room(f"visit {tokens[3 * PURGE]} 600000 0"))
    assert visits.RoomReply.parse(raw).code == visits.LET_IN  # 1,500 ahead, 2,000 places: its turn
    assert ran <= 3 * PURGE + FIXED  # PURGE let in (the place's end, a grant: three commands each), not 1,500
    assert visits.visit(sem, tokens[4 * PURGE])[0].position == 1  # the first left out is first in line
    # The others are let in by the calls that follow, a batch each.
    assert [visits.figures(sem).used for _ in range(3)][1:] == [1 + 4 * PURGE, 1 + 4 * PURGE]
    reply = visits.let_in(sem, 3 * PURGE)  # more than one call's batch: let in by several
    assert reply.let_in == PURGE and reply.waiting == 0


def test_a_semaphores_lapsed_leases_and_dead_waiters_are_purged_a_batch_per_call_never_under_counted(
    settings, admin: redis.Redis
) -> None:
    settings.SEMAPHORES = {**settings.SEMAPHORES, "jobs": {"limit": 6 * PURGE}}
    settings.SEMAPHORE_WAITER_TTL = 600  # the waiters stay alive while the pipelines line them up, however slow
    sem = get_semaphore("jobs")
    calls: Calls = sem.calls

    def acquire(token: str, waiting: bool) -> Any:
        return calls.acquire(
            token,
            weight=1,
            lease_ms=600_000,
            waiting=waiting,
            claim_ms=600_000,
            hold_ms=0,
            nonce="",
            not_after_ms=0,
            grant_before_ms=0,
            metadata=b"",
        )

    holders = [f"h{i:05d}" for i in range(6 * PURGE)]
    waiters = [f"w{i:05d}" for i in range(6 * PURGE)]
    pipelined(admin, [acquire(token, False) for token in holders])
    pipelined(admin, [acquire(token, True) for token in waiters])
    assert sem.status().used == 6 * PURGE and sem.status().waiting == 6 * PURGE
    age(admin, calls.keys.holders, holders)
    age(admin, calls.keys.alive, waiters)

    most, rounds = 0, 0
    while admin.zcard(calls.keys.holders) > 1 or admin.zcard(calls.keys.queue):
        _, ran = one_call(admin, acquire("newcomer", False))
        most, rounds = max(most, ran), rounds + 1
        used = int(admin.hget(calls.keys.state, "used") or 0)
        # Never under the holders left: an ended lease not yet purged still counts.
        assert used >= admin.zcard(calls.keys.holders) - int(admin.zscore(calls.keys.holders, "newcomer") is None)
        assert rounds < 100
    print(f"{6 * PURGE} lapsed leases and {6 * PURGE} dead waiters: {rounds} calls, at most {most} commands in one")
    assert most <= 2 * PURGE + FIXED  # was one call of ~9,000
    assert rounds >= 6
    status = sem.status()
    assert status.used == 1 and status.waiting == 0
