"""Fault injection at the engine level, each on a server of the test's own.

The server is SIGKILLed and restarted, its connections are killed, it is
paused: the library answers ``BackendUnavailable`` (never anything else)
while it cannot reach Redis, and serves again on its own once it can.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
import redis
from django.test import override_settings

from django_semaphore import BackendUnavailable, Semaphore
from django_semaphore.core.conf import SemaphoreConfig
from django_semaphore.core.renewal import renewer
from django_semaphore.core.replies import SemaphoreStatus
from django_semaphore.testing import RedisServer, find_binary

from ..support import modes
from ..support.load import Load
from ..support.polling import answered, eventually, wait_until

pytestmark = pytest.mark.processes  # starts, kills or stalls real processes: CI runs it in one cell

# Short timeouts so an outage is noticed fast; redis-py's own retries apply on top.
TIMEOUTS = "socket_timeout=0.5&socket_connect_timeout=0.5"
PAUSE_MS = 60_000


def make(name: str, limit: int, **options: object) -> Semaphore:
    return Semaphore(SemaphoreConfig.from_options(name, {"limit": limit, **options}))


@contextmanager
def own_server(*extra_args: str, way: modes.Way | None = None) -> Iterator[RedisServer]:
    """A server of the test's own, the app pointed at it (as ``way``'s user, when given)."""
    binary = find_binary()
    with RedisServer(binary, extra_args=[*modes.server_args(binary), *extra_args]) as server:
        url = f"{way.url(server.url) if way else server.url}?{TIMEOUTS}"
        with override_settings(SEMAPHORE_CONNECTION=url):
            yield server
        if way is not None:
            with redis.Redis.from_url(server.url) as admin:
                assert way.ran_only_this_way(admin)


def test_sigkill_and_restart_mid_load_without_persistence(way: modes.Way) -> None:
    with own_server(way=way) as server:
        sem = make("crash", 2, lease=30)
        held = sem.acquire(auto_renew=False)
        assert held is not None
        with Load(sem, limit=2) as load:
            eventually(lambda: load.granted() > 20)
            server.crash()
            eventually(lambda: load.outcomes["unavailable"] > 0)
            with pytest.raises(BackendUnavailable):
                sem.status()
            server.restart()
            before = load.granted()
            back_after = eventually(lambda: load.granted() > before)
        print(f"acquisitions resumed {back_after:.2f} s after the server returned; {dict(load.outcomes)}")
        assert load.errors == [] and load.outcomes["over"] == 0
        # No persistence: the permit held at the crash is gone with the data,
        # and releasing it now is refused (and counted), not an error.
        status = sem.status()
        assert status.holder_count == 0 and status.used == 0
        # A load permit whose release the crash cut off is given back from the background once the server
        # answers, and refused too (its permit went with the data; CI once counted it beside this one): those
        # settled first, this release is counted on its own.
        wait_until(lambda: renewer.pending() == 0, timeout=30)
        refused = sem.status().counters["refused"]
        assert held.release() is False
        assert sem.status().counters["refused"] == refused + 1


def test_aof_restart_keeps_holders_whose_leases_still_expire() -> None:
    # A lease the restart and the reads after it fit in on a loaded machine (each write waits for its fsync);
    # its end on the server's clock, not the wait's length, is what gives the permit back.
    lease = 8.0
    with own_server("--appendonly", "yes", "--appendfsync", "always") as server:
        sem = make("durable", 1, lease=lease)
        held = sem.acquire(auto_renew=False)
        assert held is not None
        server.crash()
        server.restart()
        status = answered(sem.status)
        assert status.holder_count == 1 and status.holders[0].token == held.token
        assert status.now_ms < held.lease_deadline_ms, "the restart outlasted the lease: nothing left to keep"
        assert answered(lambda: sem.acquire(wait=0)) is None
        # Nobody renews the lease any more: it runs out and the permit returns.
        permit = answered(lambda: sem.acquire(wait=lease + 10))
        assert permit is not None and permit.fence > held.fence
        assert answered(sem.status).counters["expired"] == 1
        permit.release()


def test_scripts_are_reloaded_after_a_restart_that_lost_them(way: modes.Way) -> None:
    with own_server(way=way) as server:
        sem = make("noscript", 1)
        assert sem.acquire(auto_renew=False)
        server.restart()  # a new process without persistence: FCALL meets "not found", EVALSHA NOSCRIPT
        eventually(lambda: sem.status())
        assert sem.acquire(auto_renew=False) is not None


def test_client_kill_under_load_neither_double_counts_nor_leaks(way: modes.Way) -> None:
    with own_server(way=way) as server:
        sem = make("killed", 2, lease=1)
        admin = redis.Redis(host="127.0.0.1", port=server.port)
        kills = 0
        with Load(sem, limit=2, threads=4) as load:
            deadline = time.monotonic() + 3
            while time.monotonic() < deadline:
                kills += admin.client_kill_filter(_type="normal", skipme=True)
                time.sleep(0.05)
        print(f"killed {kills} connections; {dict(load.outcomes)}")
        assert kills > 10 and load.granted() > 20
        assert load.errors == [] and load.outcomes["over"] == 0
        # An acquire or release whose reply was lost with its connection can
        # leave a holder nobody knows about: its lease (1 s) returns it. A
        # waiter cut off mid-wait leaves the line (or its heartbeat lapses).
        eventually(lambda: _idle(sem.status()), timeout=5)
        admin.close()


def _idle(status: SemaphoreStatus) -> bool:
    return status.used == 0 and status.holder_count == 0 and status.waiting == 0


def test_pause_longer_than_the_socket_timeout_answers_unavailable_in_time(way: modes.Way) -> None:
    with own_server(way=way) as server:
        sem = make("paused", 1)
        admin = redis.Redis(host="127.0.0.1", port=server.port)
        sem.status()  # connect before the pause
        # Pause writes (scripts included) for a minute: CLIENT UNPAUSE, not a
        # write, still gets through then, which it would not under PAUSE ALL.
        admin.client_pause(PAUSE_MS, all=False)
        try:
            started = time.monotonic()
            with pytest.raises(BackendUnavailable):
                sem.acquire(wait=0)
            elapsed = time.monotonic() - started
        finally:
            admin.client_unpause()
        print(f"BackendUnavailable after {elapsed:.2f} s of a {PAUSE_MS / 1000:g} s pause")
        # The 0.5 s socket timeout (times redis-py's retries), not the pause, bounds the wait.
        assert elapsed < PAUSE_MS / 1000 / 2
        assert sem.acquire(wait=0, auto_renew=False) is not None
        admin.close()


def test_fences_keep_increasing_across_a_restart_that_lost_the_data() -> None:
    with own_server() as server:
        sem = make("fenced", 1, lease=30)
        before = sem.acquire(auto_renew=False)
        assert before is not None
        server.restart()  # no persistence: the fence counter is gone too
        deadline = time.monotonic() + 10
        while True:
            try:
                after = sem.acquire(auto_renew=False)
                break
            except BackendUnavailable:
                assert time.monotonic() < deadline, "the restarted server never answered"
                time.sleep(0.05)
        assert after is not None and after.fence > before.fence


@pytest.mark.parametrize("round_", range(3))
def test_a_hang_longer_than_the_socket_timeout_costs_seconds_not_a_lease(round_: int) -> None:
    # A fork, a BGSAVE or a disk stall: Redis stops answering for 3 s, longer than the clients'
    # 2 s socket timeout. When it resumes it runs what they sent meanwhile, acquires whose callers
    # gave up among them; capacity must be back within seconds, not when 60 s leases end.
    with RedisServer(find_binary()) as server:
        url = f"{server.url}?socket_timeout=2&socket_connect_timeout=2"
        with override_settings(SEMAPHORE_CONNECTION=url):
            sem = make("hung", 4, lease=60)
            with Load(sem, limit=4, threads=16, hold=0.2) as load:
                eventually(lambda: load.granted() > 20)
                server.freeze()
                time.sleep(3)
                server.thaw()
                time.sleep(0.5)
            recovered = eventually(lambda: sem.status().used == 0, timeout=6)
    print(f"capacity back {recovered:.2f} s after the load stopped; {dict(load.outcomes)}")
    assert load.errors == [] and load.outcomes["over"] == 0
