"""Replication: a Sentinel failover under load, and the stricter ``replicas`` mode.

The app reaches Sentinel the way django-redis does (``SentinelClient`` with
``SENTINELS``), through a cache alias in ``SEMAPHORE_CONNECTION``.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator

import pytest
import redis
from django.test import override_settings

from django_semaphore import BackendUnavailable, Semaphore
from django_semaphore.core.conf import SemaphoreConfig
from django_semaphore.testing import RedisServer, find_binary

from ..support.load import Load
from ..support.polling import eventually
from ..support.servers import SERVICE, SentinelGroup, wait_for


def make(name: str, limit: int, **options: object) -> Semaphore:
    return Semaphore(SemaphoreConfig.from_options(name, {"limit": limit, **options}))


@pytest.fixture
def sentinel_cache(settings) -> Iterator[SentinelGroup]:
    with SentinelGroup() as group:
        caches = dict(settings.CACHES)
        caches["sentinel"] = {
            "BACKEND": "django_redis.cache.RedisCache",
            "LOCATION": f"redis://{SERVICE}/0",
            "OPTIONS": {
                "CLIENT_CLASS": "django_redis.client.SentinelClient",
                "CONNECTION_FACTORY": "django_redis.pool.SentinelConnectionFactory",
                "SENTINELS": group.sentinels,
                "SOCKET_TIMEOUT": 1,
                "SOCKET_CONNECT_TIMEOUT": 0.5,
            },
        }
        with override_settings(CACHES=caches, SEMAPHORE_CONNECTION="sentinel"):
            yield group


@pytest.mark.processes
def test_sentinel_failover_under_load_recovers_without_restart(sentinel_cache: SentinelGroup) -> None:
    sem = make("failover", 2, lease=2)
    old_master = sentinel_cache.master_port()
    with Load(sem, limit=2) as load:
        eventually(lambda: load.granted() > 20)
        new_master = sentinel_cache.failover()
        # Until Sentinel demotes the old master, clients may still write there;
        # once it is a replica, redis-py's Sentinel pool must find the new one.
        with redis.Redis(host="127.0.0.1", port=old_master) as demoted:
            wait_for(lambda: demoted.info("replication")["role"] == "slave", timeout=90, what="demotion")
        with redis.Redis(host="127.0.0.1", port=new_master) as promoted:
            # It grants: 20 more permits, and a fence it minted (the scripts no longer count grants themselves).
            served_before, fence_before = load.granted(), int(promoted.hget(sem.keys.state, "fence") or 0)
            eventually(
                lambda: (
                    load.granted() > served_before + 20
                    and int(promoted.hget(sem.keys.state, "fence") or 0) > fence_before
                ),
                timeout=20,
            )
    print(f"failover {old_master} -> {new_master}; {dict(load.outcomes)}")
    assert load.errors == []  # only BackendUnavailable while the master changed
    # The same settings reach the promoted master from asyncio too.
    permit = asyncio.run(sem.aacquire(wait=5, auto_renew=False))
    assert permit is not None
    asyncio.run(permit.arelease())
    # Leases (2 s) clean up whatever the failover left behind.
    eventually(lambda: sem.status().used == 0, timeout=10)


@pytest.fixture
def replicated() -> Iterator[tuple[RedisServer, RedisServer]]:
    binary = find_binary()
    with RedisServer(binary, extra_args=["--repl-diskless-sync-delay", "0"]) as master:
        replica = RedisServer(binary, extra_args=["--replicaof", "127.0.0.1", str(master.port)])
        with replica, redis.Redis(host="127.0.0.1", port=replica.port) as link:
            wait_for(lambda: link.info("replication")["master_link_status"] == "up", what="replica in sync")
            with override_settings(SEMAPHORE_CONNECTION=f"{master.url}?socket_timeout=2"):
                yield master, replica


def test_replicas_mode_grants_once_a_replica_confirms(replicated: tuple[RedisServer, RedisServer]) -> None:
    _master, replica = replicated
    sem = make("strict", 1, replicas=1, replica_timeout=1)
    permit = sem.acquire(auto_renew=False)
    assert permit is not None
    with redis.Redis(host="127.0.0.1", port=replica.port) as link:
        assert link.zscore(sem.keys.holders, permit.token) is not None  # already on the replica
    assert permit.release() is True
    permit = asyncio.run(sem.aacquire(auto_renew=False))
    assert permit is not None
    permit.release()


@pytest.mark.processes
def test_replicas_mode_gives_the_permit_back_when_no_replica_confirms(
    replicated: tuple[RedisServer, RedisServer],
) -> None:
    _master, replica = replicated
    replica.stop()
    sem = make("strict", 1, replicas=1, replica_timeout=0.2)
    with pytest.raises(BackendUnavailable, match="0 of 1 replicas"):
        sem.acquire(auto_renew=False)
    with pytest.raises(BackendUnavailable):
        asyncio.run(sem.aacquire(auto_renew=False))
    status = sem.status()
    assert status.used == 0 and status.holder_count == 0  # both grants given back (no script counts them any more)
    # Without the stricter mode the same server grants at once.
    assert make("strict", 1).acquire(auto_renew=False) is not None


@pytest.mark.processes
def test_replicas_mode_confirms_a_permit_handed_over_by_a_release(
    replicated: tuple[RedisServer, RedisServer],
) -> None:
    _master, replica = replicated
    sem = make("strict-handoff", 1, replicas=1, replica_timeout=1)
    holder = sem.acquire(auto_renew=False)
    assert holder is not None
    outcome: list[object] = []

    def wait_in_line() -> None:
        try:
            outcome.append(sem.acquire(wait=10, auto_renew=False))
        except BackendUnavailable as exc:
            outcome.append(exc)

    waiter = threading.Thread(target=wait_in_line)
    waiter.start()
    eventually(lambda: sem.status().waiting == 1)
    replica.freeze()  # the grant the release writes for the waiter cannot reach it
    try:
        holder.release()
        waiter.join(10)
    finally:
        replica.thaw()
    assert len(outcome) == 1 and isinstance(outcome[0], BackendUnavailable), outcome
    status = sem.status()
    assert status.used == 0 and status.holder_count == 0
