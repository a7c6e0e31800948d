"""A call the engine already knows how to send goes alone: one command, and nothing lost by skipping the exchange.

Once a process has decided how a server runs the operations (core/scripts.py),
each call is its one FCALL or EVALSHA, sent straight to the client. These
tests hold it to the exchange's promises: one command per operation, the
library's heartbeat still beating on time, and a lost library or script
cache found and mended by the call that meets it, which runs once.
"""

from __future__ import annotations

import asyncio

import pytest
import redis

from django_semaphore import Semaphore, get_semaphore
from django_semaphore.core import scripts
from django_semaphore.core.connection import get_client
from django_semaphore.testing import RedisServer

from ..support import modes

ONLY_FROM_CLIENTS = {"fcall", "fcall_ro", "evalsha", "eval", "multi", "exec", "ping"}


def _cycle(count: int = 1) -> None:
    sem = get_semaphore("single")
    for _ in range(count):
        permit = sem.acquire(auto_renew=False)
        assert permit is not None and permit.release() is True


# What redis-py sends when it opens a connection (a new one in the pool, say where another thread held the idle
# one, as CI met once): it says who it is, no part of an operation. HELLO, AUTH and SELECT are left out already
# (neither in ONLY_FROM_CLIENTS nor a subcommand).
CONNECTING = {"client|setinfo", "client|setname"}


def _commands(admin: redis.Redis) -> dict[str, int]:
    stats = admin.info("commandstats")
    return {name.removeprefix("cmdstat_"): int(entry["calls"]) for name, entry in stats.items()}


def _sent_by_clients(admin: redis.Redis, before: dict[str, int]) -> dict[str, int]:
    """The commands clients sent since ``before`` (commands the scripts run count too: left out)."""
    after = _commands(admin)
    return {
        name: after[name] - before.get(name, 0)
        for name in after
        if after[name] != before.get(name, 0) and (name in ONLY_FROM_CLIENTS or "|" in name) and name not in CONNECTING
    }


@pytest.fixture
def single(way: modes.Way, redis_server: RedisServer, settings) -> Semaphore:
    """The limit-1 semaphore, the app connected as ``way``'s user."""
    settings.SEMAPHORE_CONNECTION = way.url(redis_server.url)
    return get_semaphore("single")


def test_each_operation_is_one_command_and_the_heartbeat_beats_on_time(
    way: modes.Way, single: Semaphore, redis_client: redis.Redis, settings
) -> None:
    # The metrics' flush is the background thread's own script, due an interval after any call this worker
    # counted (an earlier test's too): off, so that it never lands in the count.
    settings.SEMAPHORE_METRICS_FLUSH_INTERVAL = None
    _cycle()  # decides the way
    beat = scripts.heartbeat_key(scripts.library()[0])
    redis_client.delete(beat)
    before = _commands(redis_client)
    _cycle(5)
    sent = _sent_by_clients(redis_client, before)
    assert sent == {"fcall" if way.name == "functions" else "evalsha": 10}, sent
    assert not redis_client.exists(beat)
    # When the heartbeat falls due, the next call carries it (in the same round trip).
    scripts.state_of(get_client()).beat_at -= scripts.HEARTBEAT_EVERY
    _cycle()
    assert 0 < redis_client.pttl(beat) <= scripts.HEARTBEAT_TTL * 1000


def test_a_call_that_meets_a_lost_library_or_script_cache_mends_it_and_runs_once(
    way: modes.Way, single: Semaphore, redis_client: redis.Redis
) -> None:
    held = single.acquire(auto_renew=False)
    assert held is not None
    if way.name == "functions":
        redis_client.function_delete(scripts.library()[0])
    else:
        redis_client.script_flush()
    before = _commands(redis_client)
    assert held.release() is True  # it ran, and once
    after = _commands(redis_client)
    # Mended once: the library loaded (EVALSHA: the script's source sent with EVAL) by the call that met it.
    mended = "function|load" if way.name == "functions" else "eval"
    assert after.get(mended, 0) - before.get(mended, 0) == 1
    assert single.status().used == 0
    again = single.acquire(wait=0)  # the next call goes directly again
    assert again is not None and single.status().used == 1
    assert again.release() is True


def test_connections_the_server_closed_while_idle_are_not_an_outage(
    way: modes.Way, single: Semaphore, redis_client: redis.Redis
) -> None:
    """The engine's own connections (core/bounded.py) find a closed one before sending, as a pool does."""
    held = single.acquire(auto_renew=False)
    assert held is not None
    # Every connection of the app's user, idle ones included (a restart, a proxy's idle timeout).
    assert redis_client.client_kill_filter(user=way.user) > 0
    assert held.release() is True
    redis_client.client_kill_filter(user=way.user)
    _cycle(3)
    assert single.status().used == 0


def test_asyncio_calls_survive_connections_the_server_closed_and_send_one_command_each(
    way: modes.Way, single: Semaphore, redis_client: redis.Redis
) -> None:
    """The asyncio client's pool connections, used without the client's per-command code (core/scripts.py)."""

    async def cycles(count: int) -> None:
        for _ in range(count):
            permit = await single.aacquire(auto_renew=False)
            assert permit is not None and await permit.arelease() is True

    async def scenario() -> dict[str, int]:
        await cycles(1)  # decides the way, opens the loop's connections
        redis_client.client_kill_filter(user=way.user)
        # Closed while idle: the loop runs meanwhile and reads the server's close, as a real one would
        # between requests (the pool then finds it before sending).
        await asyncio.sleep(0.05)
        await cycles(1)
        before = _commands(redis_client)
        await cycles(5)
        return _sent_by_clients(redis_client, before)

    sent = asyncio.run(scenario())
    assert sent == {"fcall" if way.name == "functions" else "evalsha": 10}, sent
    assert single.status().used == 0
