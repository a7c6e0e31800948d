"""A semaphore's keys vanishing under held permits (eviction, a hand-made DEL, a failover that lost them).

Deleted by hand here, one key at a time, so each case is exact; the eviction
itself is in tests/ops/test_shared_cache_redis.py. Whatever is left, the engine
goes on (it cannot know who held the lost permits) and says what it found,
once: ``semaphore_keys_lost`` and an ERROR record on ``django_semaphore.keys``.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest
import redis

from django_semaphore import get_semaphore

from ..support.polling import wait_until


def test_holders_gone_while_the_state_counts_permits_held(
    redis_client: redis.Redis, keys_lost: list[dict[str, Any]], caplog: pytest.LogCaptureFixture
) -> None:
    sem = get_semaphore("reports")
    held = [sem.acquire(auto_renew=False), sem.acquire(auto_renew=False)]
    redis_client.delete(sem.keys.holders)
    with caplog.at_level(logging.ERROR, logger="django_semaphore.keys"):
        assert sem.acquire(auto_renew=False) is not None
    assert keys_lost == [{"sender": "reports", "name": "reports", "partition": None, "found": "holders", "permits": 2}]
    assert len(caplog.records) == 1 and "2 permits" in caplog.records[0].getMessage()
    assert sem.acquire(auto_renew=False) is not None  # said once: the count is healed
    assert len(keys_lost) == 1
    assert all(permit is not None for permit in held)


def test_the_state_gone_while_holders_remain_keeps_counting_them(
    redis_client: redis.Redis, keys_lost: list[dict[str, Any]]
) -> None:
    sem = get_semaphore("single")
    holder = sem.acquire(auto_renew=False)
    assert holder is not None
    redis_client.delete(sem.keys.state)
    assert sem.acquire(auto_renew=False) is None  # the surviving holder still counts: no second one
    assert keys_lost == [{"sender": "single", "name": "single", "partition": None, "found": "state", "permits": 1}]
    later = sem.acquire(auto_renew=False)
    assert later is None and len(keys_lost) == 1
    holder.release()
    newer = sem.acquire(auto_renew=False)
    assert newer is not None and newer.fence > holder.fence  # fences still rise, from the server clock


def test_a_status_read_that_finds_it_says_so_too(redis_client: redis.Redis, keys_lost: list[dict[str, Any]]) -> None:
    sem = get_semaphore("single")
    assert sem.acquire(auto_renew=False) is not None
    redis_client.delete(sem.keys.holders)
    assert sem.status().used == 0
    assert [event["found"] for event in keys_lost] == ["holders"]


def test_a_release_that_finds_it_says_so(redis_client: redis.Redis, keys_lost: list[dict[str, Any]]) -> None:
    sem = get_semaphore("single")
    holder = sem.acquire(auto_renew=False)
    assert holder is not None
    redis_client.delete(sem.keys.holders)
    assert holder.release() is False
    assert [event["found"] for event in keys_lost] == ["holders"]


@pytest.mark.parametrize("in_event_loop", [False, True], ids=["sync", "asyncio"])
def test_a_holder_whose_every_key_vanished_learns_it_at_its_renewal(
    redis_client: redis.Redis, keys_lost: list[dict[str, Any]], in_event_loop: bool
) -> None:
    sem = get_semaphore("single")
    holder = sem.acquire(auto_renew=False)
    assert holder is not None
    redis_client.delete(*sem.keys.common)
    renewed = asyncio.run(holder.arenew()) if in_event_loop else holder.renew()
    assert renewed is False and holder.lost
    assert keys_lost == [{"sender": "single", "name": "single", "partition": None, "found": "all", "permits": 1}]


def test_a_lease_that_simply_ran_out_is_no_vanished_key(keys_lost: list[dict[str, Any]], settings) -> None:
    settings.SEMAPHORE_PARTITION_IDLE = 0.05  # the partition's keys expire soon after its lease ends
    sem = get_semaphore("search", key="someone")
    holder = sem.acquire(lease=0.05, auto_renew=False)
    assert holder is not None
    with redis.Redis.from_url(settings.CACHES["default"]["LOCATION"]) as client:
        wait_until(lambda: not client.exists(sem.keys.state))
    assert holder.renew() is False
    assert keys_lost == []
