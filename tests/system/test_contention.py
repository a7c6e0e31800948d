"""Safety and liveness with real OS processes competing for permits."""

from __future__ import annotations

import time

import pytest
import redis

from django_semaphore import Semaphore
from django_semaphore.core import scripts
from django_semaphore.core.conf import SemaphoreConfig
from django_semaphore.core.connection import get_client
from django_semaphore.testing import RedisServer

from ..support import modes, workers
from ..support.polling import wait_until
from ..support.processes import warm

pytestmark = pytest.mark.processes  # starts, kills or stalls real processes: CI runs it in one cell


def _run(processes: list) -> None:
    try:
        for process in processes:
            process.start()
        for process in processes:
            process.join(120)
    finally:
        for process in processes:  # only our own children, by their pid
            if process.is_alive():
                process.kill()
                process.join(5)


def _counts(client: redis.Redis, prefix: str) -> tuple[int, int]:
    entries, over, unavailable = (int(client.get(prefix + name) or 0) for name in ("entries", "over", "unavailable"))
    print(f"{entries} entries, {over} over the limit, {unavailable} calls unavailable (their wait ran out)")
    return entries, over


@pytest.fixture
def app_way(way: modes.Way, redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch, settings) -> modes.Way:
    """The app, here and in the processes the test spawns (they read REDIS_URL), runs its Lua ``way``."""
    url = way.url(redis_server.url)
    monkeypatch.setenv("REDIS_URL", url)
    settings.SEMAPHORE_CONNECTION = url
    return way


@pytest.mark.parametrize("skewed", [False, True], ids=["same-clock", "half-skewed-1h"])
def test_never_over_the_limit_under_contention(
    key_prefix: str, redis_client: redis.Redis, skewed: bool, app_way: modes.Way
) -> None:
    skews = [0.0] * 8 if not skewed else [3600.0, -3600.0, 3600.0, -3600.0, 0.0, 0.0, 0.0, 0.0]
    processes = [
        warm.Process(target=workers.hammer, args=(key_prefix, 3, 3.0, skew, seed)) for seed, skew in enumerate(skews)
    ]
    ran_before = app_way.runs(redis_client)
    _run(processes)
    entries, over = _counts(redis_client, key_prefix)
    assert all(p.exitcode == 0 for p in processes)
    assert entries > 100, "the processes barely ran"
    assert over == 0
    assert app_way.runs(redis_client) - ran_before > entries  # every acquire and release ran this way
    sem = Semaphore(SemaphoreConfig.from_options("contended", {"limit": 3}))
    status = sem.status()
    assert status.used == 0 and status.holder_count == 0 and status.waiting == 0


def test_never_over_the_limit_when_not_fair(key_prefix: str, redis_client: redis.Redis, app_way: modes.Way) -> None:
    """Not fair, a release wakes the head of the line and a newcomer may take the permit first: still never over."""
    processes = [warm.Process(target=workers.hammer, args=(key_prefix, 1, 3.0, 0.0, seed, False)) for seed in range(8)]
    _run(processes)
    entries, over = _counts(redis_client, key_prefix)
    assert all(p.exitcode == 0 for p in processes)
    assert entries > 100, "the processes barely ran"
    assert over == 0
    status = Semaphore(SemaphoreConfig.from_options("contended", {"limit": 1, "fair": False})).status()
    assert status.used == 0 and status.holder_count == 0 and status.waiting == 0


def test_killed_holder_permit_is_reclaimed_after_its_lease(
    key_prefix: str, redis_client: redis.Redis, app_way: modes.Way
) -> None:
    # The holder's renewer renews every third of the lease, so a lease of 3 s keeps the permit unless the
    # machine stalls the holder for 2 s (a lease of 1 s was lost to a 0.7 s stall under load).
    lease = 3.0
    sem = Semaphore(SemaphoreConfig.from_options("crashy", {"limit": 1, "lease": lease}))
    holder = warm.Process(target=workers.hold_forever, args=(key_prefix, "crashy", 1, lease, 0))
    try:
        holder.start()
        wait_until(lambda: sem.status().used == 1)
        time.sleep(lease + 0.5)  # longer than the lease: the holder's renewer keeps it
        assert sem.acquire() is None
        holder.kill()
        holder.join(5)
        permit = sem.acquire(wait=lease + 2)  # the lease's end, on the server's clock, frees it
        assert permit is not None
        assert sem.status().counters["expired"] == 1
        permit.release()
        assert scripts.mode_of(get_client()) == app_way.name
    finally:
        if holder.is_alive():
            holder.kill()
            holder.join(5)
    # Left: the state and its history; and the counts this process's tally wrote, if its flush came by.
    leftovers = {k.decode() for k in redis_client.scan_iter(f"{key_prefix}*")}
    counts = {f"{key_prefix}{{crashy}}:tally", f"{key_prefix}{{crashy}}:recent"}
    assert leftovers - counts == {f"{key_prefix}{{crashy}}:history", f"{key_prefix}{{crashy}}:state"}


def test_dead_waiter_leaves_the_line_quickly(key_prefix: str) -> None:
    sem = Semaphore(SemaphoreConfig.from_options("line", {"limit": 1, "lease": 30}))
    holder = sem.acquire()
    assert holder is not None
    doomed = warm.Process(target=workers.hold_forever, args=(key_prefix, "line", 1, 30.0, 60.0))
    try:
        doomed.start()
        wait_until(lambda: sem.status().waiting == 1)
        doomed.kill()
        doomed.join(5)
        holder.release()
        # Behind a dead head of line, a live waiter still gets the permit
        # once the dead one misses its heartbeat (about a second).
        permit = sem.acquire(wait=4)
        assert permit is not None
        assert sem.status().waiting == 0
    finally:
        if doomed.is_alive():
            doomed.kill()
            doomed.join(5)
