"""A keyed semaphore's partitions do not outlive their use by more than SEMAPHORE_PARTITION_IDLE."""

from __future__ import annotations

import time

import redis

from django_semaphore import get_semaphore


def _ttls(client: redis.Redis, keys: list[str]) -> dict[str, int]:
    return {key.rsplit(":", 1)[-1]: client.pttl(key) for key in keys if client.exists(key)}


def test_idle_partition_keys_expire_after_the_last_lease(settings, redis_client: redis.Redis) -> None:
    settings.SEMAPHORE_PARTITION_IDLE = 0.5
    sem = get_semaphore("search", key="idle-user")
    permit = sem.acquire(lease=1.5, auto_renew=False)
    assert permit is not None
    ttls = _ttls(redis_client, sem.keys.common)
    # Held: every key outlives the lease (1.5 s) by the idle period (0.5 s), and by at most a
    # quarter more (the slack that spares a busy partition a refresh on every call).
    # (A permit of one keeps its holder's record in the state hash: no info key.)
    assert set(ttls) >= {"holders", "state"}
    assert all(1500 < ttl <= 2125 for ttl in ttls.values()), ttls
    time.sleep(1.0)
    assert sem.acquire(wait=0) is not None  # counters intact while the lease runs
    assert sem.acquire(wait=0) is None
    assert sem.status().used == 2
    permit.release()
    assert get_semaphore("search").partitions() == {sem.partition: "idle-user"}


def test_expired_partition_starts_afresh_with_a_higher_fence_and_leaves_the_registry(
    settings, redis_client: redis.Redis
) -> None:
    settings.SEMAPHORE_PARTITION_IDLE = 0.3
    sem = get_semaphore("search", key="fleeting")
    first = sem.acquire(lease=0.2, auto_renew=False)
    assert first is not None
    first.release()
    time.sleep(0.6)
    assert not any(redis_client.exists(key) for key in sem.keys.common)
    assert get_semaphore("search").partitions() == {}
    again = get_semaphore("search", key="fleeting").acquire(auto_renew=False)
    # The partition's keys (its fence included) are gone, yet a fresh fence is
    # seeded from the server clock: it still beats the old one.
    assert again is not None and again.fence > first.fence


def test_whole_semaphores_keep_their_keys(redis_client: redis.Redis) -> None:
    sem = get_semaphore("reports")
    permit = sem.acquire(auto_renew=False)
    assert permit is not None
    permit.release()
    assert redis_client.pttl(sem.keys.state) == -1


def test_a_limit_override_of_a_partition_expires_with_it(settings, redis_client: redis.Redis) -> None:
    settings.SEMAPHORE_PARTITION_IDLE = 0.3
    sem = get_semaphore("search", key="never-used")
    sem.set_limit(5)
    assert 0 < redis_client.pttl(sem.keys.state) <= 375
