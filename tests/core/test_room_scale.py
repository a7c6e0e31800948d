"""A waiting room's poll costs the same at 10 and at 10,000 visitors in line: position by rank, not by scan.

Counted, not timed (benchmarks/room_poll.py times it): the commands one poll
of a visitor in line runs inside the script, from the server's own
``INFO commandstats``, on a server of the test's own so nothing else counts.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import redis

from django_semaphore import get_semaphore
from django_semaphore.core import scripts, visits
from django_semaphore.core.connection import get_client
from django_semaphore.testing import RedisServer

from ..support.server_clock import server_ms

# room.lua's SAMPLE_MS: an admission sample per this many ms of the server's clock.
SAMPLE_MS = 5000
# What the client sends for a poll itself (and the test's own reading): not the script's work.
OUTSIDE = {"fcall", "evalsha", "eval", "config", "info", "function", "ping", "hello", "client", "select", "set"}


@pytest.fixture
def admin(own_server: RedisServer) -> Iterator[redis.Redis]:
    with redis.Redis.from_url(own_server.url) as client:
        yield client


def commands(admin: redis.Redis) -> dict[str, int]:
    stats: dict[str, Any] = admin.info("commandstats")
    counted = {name.removeprefix("cmdstat_"): int(value["calls"]) for name, value in stats.items()}
    return {name: calls for name, calls in counted.items() if name.split("|")[0] not in OUTSIDE}


def fill(settings: Any, name: str, waiting: int) -> None:
    """A room of limit 1, full, with ``waiting`` visitors in line (their visits pipelined, a thousand a trip)."""
    settings.SEMAPHORES = {
        **settings.SEMAPHORES,
        name: {"limit": 1, "lease": 600, "waiting_room": {"refresh": 60, "abandon": 600}},
    }
    sem = get_semaphore(name)
    visits.visit(sem, "inside")
    tokens = [f"v{i:06d}" for i in range(waiting)]
    for first in range(0, waiting, 1000):
        calls = [sem.calls.room(f"visit {token} 600000 0") for token in tokens[first : first + 1000]]
        replies = scripts.run_pipeline(get_client(), calls)
        assert not any(isinstance(reply, Exception) for reply in replies)
    assert visits.figures(sem).waiting == waiting


def one_poll(admin: redis.Redis, name: str, token: str) -> tuple[dict[str, int], int]:
    """The commands of one poll in the steady state: measured again where the poll fell in a new sample's time.

    room.lua writes an admission sample once per SAMPLE_MS of the server's clock, on whichever call comes
    first: a poll measured just after that boundary wrote one (an HSET more) in a run on a loaded machine.
    """
    sem = get_semaphore(name)
    for _ in range(3):
        visits.visit(sem, token)  # the library is loaded, the samples written: what follows is the steady state
        before = server_ms(admin)
        admin.config_resetstat()
        reply, _ = visits.visit(sem, token)
        ran = commands(admin)
        if before // SAMPLE_MS == server_ms(admin) // SAMPLE_MS:
            assert reply.code == visits.IN_LINE
            return ran, reply.position
    raise AssertionError("every poll measured crossed a sample's boundary")


def test_a_poll_runs_the_same_commands_at_10_and_at_10000_waiting(settings, admin: redis.Redis) -> None:
    fill(settings, "small", 10)
    fill(settings, "large", 10_000)
    small_last, small_position = one_poll(admin, "small", "v000009")
    large_last, large_position = one_poll(admin, "large", "v009999")
    large_middle, middle_position = one_poll(admin, "large", "v005000")
    assert (small_position, large_position, middle_position) == (10, 10_000, 5_001)
    print(f"one poll: {sum(small_last.values())} commands at 10 waiting, {sum(large_last.values())} at 10,000")
    assert small_last == large_last == large_middle
    # The state, the first holder, the visitors inside (a count), the line's size and its late waiters, the
    # visitor as holder and in line (a rank), the samples; its heartbeat and the state's counters written
    # back. Nothing walks the line.
    assert small_last == {
        "time": 1,
        "hmget": 2,
        "zrange": 1,
        "zcount": 1,
        "zcard": 1,
        "zrangebyscore": 1,
        "zscore": 1,
        "zrank": 1,
        "zadd": 1,
        "hset": 1,
    }, small_last
