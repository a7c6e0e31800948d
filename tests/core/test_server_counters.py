"""The scripts count only what the server alone sees (issue 34, more per core).

How each acquire and each permit ended is counted by the process that made
the call (core/tally.py) and written to Redis in batches per semaphore name;
the scripts no longer count the same attempts again in the state hash
(`acquired`, `rejected`, `released`: a field read, a number formatted and a
field written on every call). What a process cannot see stays in the
scripts: leases reclaimed after they ran out (`expired`), permits that ended
at their max hold, renewals and releases of a lease that was gone (`lost`),
or of a token that held nothing (`refused`), an operator's force releases
(`forced`). Both ways the engine runs its Lua, with and without the fast paths.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from django_semaphore import get_semaphore
from django_semaphore.core import scripts
from django_semaphore.core.replies import COUNTERS
from django_semaphore.testing import RedisServer

from ..support import modes
from ..support.raw import release_token

OUTCOMES = (b"acquired", b"rejected", b"released")


@pytest.fixture(params=(True, False), ids=("fast", "full"))
def engine(request: pytest.FixtureRequest, way: modes.Way, redis_server: RedisServer, settings: Any) -> Iterator[None]:
    """The app in ``way``, with its fast paths on or off (restored afterwards)."""
    before = scripts.fast_paths_enabled
    scripts.use_fast_paths(request.param)
    settings.SEMAPHORE_CONNECTION = way.url(redis_server.url)
    try:
        yield
    finally:
        scripts.use_fast_paths(before)


def _state(client: redis.Redis, name: str, key: str | None = None) -> dict[bytes, bytes]:
    return client.hgetall(get_semaphore(name, key=key).keys.state)


@pytest.mark.usefixtures("engine")
@pytest.mark.parametrize("key", [None, "alice"], ids=("whole", "keyed"))
def test_grants_refusals_releases_and_hand_offs_leave_no_outcome_counter_in_the_state(
    redis_client: redis.Redis, key: str | None
) -> None:
    name = "search" if key else "single"
    sem = get_semaphore(name, key=key)
    first = sem.acquire(wait=0, auto_renew=False)
    assert first is not None
    if key:  # a limit of 2: the second permit fills it
        assert sem.acquire(wait=0, auto_renew=False) is not None
    assert sem.acquire(wait=0) is None  # refused
    first.release()
    again = sem.acquire(wait=0, auto_renew=False)  # a grant after a release
    assert again is not None
    again.release()
    state = _state(redis_client, name, key)
    assert state[b"fence"] and b"used" in state
    assert not set(OUTCOMES) & set(state), state


@pytest.mark.usefixtures("engine")
def test_a_permit_handed_to_a_waiter_counts_nothing_in_the_state(redis_client: redis.Redis) -> None:
    sem = get_semaphore("single")
    holder = sem.acquire(auto_renew=False)
    assert holder is not None
    got: list[Any] = []
    waiter = threading.Thread(target=lambda: got.append(sem.acquire(wait=10, auto_renew=False)))
    waiter.start()
    deadline = time.monotonic() + 10
    while sem.status().waiting == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    holder.release()  # handed to the waiter at the head of the line
    waiter.join(15)
    assert got and got[0] is not None
    got[0].release()
    assert not set(OUTCOMES) & set(_state(redis_client, "single")), _state(redis_client, "single")


@pytest.mark.usefixtures("engine")
def test_what_only_the_server_sees_is_still_counted() -> None:
    sem = get_semaphore("single")
    short = sem.acquire(lease=0.05, auto_renew=False)
    assert short is not None
    time.sleep(0.2)
    assert short.renew() is False  # its lease ran out, not yet reclaimed: lost
    taken = sem.acquire(wait=0, auto_renew=False)  # reclaims the ended lease
    assert taken is not None
    assert release_token(sem, "0" * 32) is False  # a token that holds nothing: refused
    sem.force_release(taken.token)
    counters = sem.status().counters
    assert (counters["lost"], counters["expired"], counters["refused"], counters["forced"]) == (1, 1, 1, 1), counters


def test_a_status_names_only_the_servers_own_counters() -> None:
    """`status().counters` is the partition's server-side counts; the outcomes are the tally's, per name."""
    assert set(COUNTERS) == {"expired", "lost", "forced", "refused", "max_hold"}
    assert set(get_semaphore("reports").status().counters) == set(COUNTERS)
