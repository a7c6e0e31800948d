"""An operator's release of every holder is a pass over them, a bounded batch a call.

It was one script that read and dropped every holder at once: its work grew with
the holders, and while it ran the server answered nobody (every semaphore, and
the cache if it shares the server). Now each call takes one step of a ZSCAN pass
(lua/force_release.lua's FORCE_BATCH) and the client calls until the pass is over,
then passes again until one releases nothing; only holders granted before the
first pass began are released, so the permits a step hands to the line stay with
the waiters.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

from django_semaphore import Semaphore
from django_semaphore.core import connection, operator_actions, scripts
from django_semaphore.core.calls import AcquireOptions
from django_semaphore.core.conf import SemaphoreConfig
from django_semaphore.testing import RedisServer, find_binary

HOLDERS = 1000
FORCE_BATCH = 200  # lua/force_release.lua


@pytest.fixture
def script_calls(redis_client: redis.Redis) -> Iterator[redis.Redis]:
    """The server's slow log recording every command (restored afterwards): what each script call did."""
    saved = redis_client.config_get("slowlog-*")
    redis_client.config_set("slowlog-log-slower-than", 0)
    redis_client.config_set("slowlog-max-len", 100_000)
    redis_client.slowlog_reset()
    yield redis_client
    for name, value in saved.items():
        redis_client.config_set(name, value)
    redis_client.slowlog_reset()


def _force_release_calls(client: redis.Redis) -> list[list[bytes]]:
    """The ZSCANs run by force-release calls since the log was reset (one per call of a pass)."""
    entries = client.slowlog_get(100_000)
    return [list(entry["command"].split()) for entry in entries if bytes(entry["command"]).startswith(b"ZSCAN ")]


def _filled(sem: Semaphore, count: int) -> set[str]:
    permits = [sem.acquire(wait=0, auto_renew=False) for _ in range(count)]
    assert all(permits)
    return {permit.token for permit in permits if permit}


def test_releasing_every_one_of_a_thousand_holders_takes_many_short_calls(script_calls: redis.Redis) -> None:
    sem = Semaphore(SemaphoreConfig.from_options("crowd", {"limit": HOLDERS + 10, "lease": 300}))
    tokens = _filled(sem, HOLDERS)
    script_calls.slowlog_reset()
    released = sem.force_release_all()
    assert sorted(released) == sorted(tokens)  # each once
    status = sem.status(max_holders=0)
    assert (status.used, status.holder_count) == (0, 0)
    calls = _force_release_calls(script_calls)
    assert len(calls) >= HOLDERS // FORCE_BATCH, calls[:3]
    assert sem.acquire(wait=0, auto_renew=False) is not None  # the permits are free again


def test_a_striped_semaphore_passes_over_every_stripe(script_calls: redis.Redis) -> None:
    sem = Semaphore(SemaphoreConfig.from_options("crowd-striped", {"limit": 1200, "lease": 300, "stripes": 3}))
    tokens = _filled(sem, 900)
    released = sem.force_release_all()
    assert sorted(released) == sorted(tokens)
    assert sem.status(max_holders=0).used == 0


@pytest.mark.parametrize("fast", [True, False])
def test_one_holder_and_an_empty_semaphore(fast: bool) -> None:
    before = scripts.fast_paths_enabled
    scripts.use_fast_paths(fast)
    try:
        sem = Semaphore(SemaphoreConfig.from_options(f"few-{fast}", {"limit": 2, "lease": 300}))
        assert sem.force_release_all() == []
        permit = sem.acquire(wait=0, auto_renew=False)
        assert permit is not None
        assert sem.force_release("not-a-holder") is False
        assert sem.force_release_all() == [permit.token]
        assert sem.force_release(permit.token) is False
    finally:
        scripts.use_fast_paths(before)


def test_waiters_the_pass_serves_keep_their_permits() -> None:
    """Each step hands what it freed to the line; a later step found those new holders and took their permits
    back, while their callers were told they held them."""
    sem = Semaphore(SemaphoreConfig.from_options("served", {"limit": 300, "lease": 300}))
    tokens = _filled(sem, 300)
    waiters = []
    for _ in range(40):  # in line, asleep (their requests recorded): what a step frees goes to them
        request = AcquireOptions(wait=300).request(sem.config, sem.calls)
        connection.run(request.acquire_call(0), sem.name, sem.partition)
        waiters.append(request.token)
    assert sem.status(max_holders=0).waiting == 40
    released = sem.force_release_all()
    assert sorted(released) == sorted(tokens)
    status = sem.status()
    assert sorted(holder.token for holder in status.holders) == sorted(waiters)
    assert (status.used, status.waiting) == (40, 0)


def test_a_pass_continued_on_another_server_is_followed_by_one_that_finds_what_it_skipped(
    redis_client: redis.Redis,
) -> None:
    """A ZSCAN cursor means something on the server that gave it: after a failover, a restart or a slot's
    migration, the pass goes on from it over a table in another order, skips holders, and still ends."""
    sem = Semaphore(SemaphoreConfig.from_options("moved", {"limit": HOLDERS + 10, "lease": 300}))
    tokens = _filled(sem, HOLDERS)
    work = operator_actions._everyone((sem.calls,))
    (call,) = next(work).calls
    step = work.send([scripts.run(redis_client, call)])  # the first step, on the first server
    with RedisServer(find_binary()) as other, redis.Redis.from_url(other.url) as moved_to:
        for key in sem.keys.common:  # the semaphore, as another server holds it now
            dumped = redis_client.dump(key)
            if dumped is not None:
                moved_to.restore(key, 0, dumped)
        try:
            while True:
                step = work.send([scripts.run(moved_to, call) for call in step.calls])
        except StopIteration as done:
            released = [token.decode() for token in done.value]
        assert sorted(released) == sorted(tokens)
        assert moved_to.zcard(sem.keys.holders) == 0


def test_a_holder_whose_record_is_gone_is_counted_out_whatever_it_weighed(redis_client: redis.Redis) -> None:
    """The release of everyone used to set `used` to 0; a pass subtracts the weights it reads, and a holder
    without its record reads as one: with nobody left, `used` is 0 all the same."""
    sem = Semaphore(SemaphoreConfig.from_options("heavy", {"limit": 10, "lease": 300}))
    heavy = sem.acquire(wait=0, auto_renew=False, weight=5)
    assert heavy is not None
    assert redis_client.hdel(sem.keys.info, heavy.token) == 1  # its record (a weighted one is kept there)
    assert sem.force_release_all() == [heavy.token]
    assert sem.status(max_holders=0).used == 0
