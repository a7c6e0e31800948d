"""A restart from an older snapshot: fences never repeat, and a holder the server forgot learns it at its next renewal.

The server of the test's own saves a snapshot (``SAVE``, as an RDB schedule or
an AOF ``everysec`` that loses its last second leaves one), grants more, and is
killed and started again from that snapshot: it forgets every grant made since.
A fence granted after the restart must still be above every fence granted
before it, and a holder whose grant was forgotten must learn it from its next
renewal (``semaphore_lost``, the permit marked lost): until then, more than the
limit may be inside, which is what docs/failure-modes.md promises and no more.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
import redis

from django_semaphore import Permit, Semaphore, signals
from django_semaphore.core.conf import SemaphoreConfig
from django_semaphore.testing import RedisServer, ServerNotFound, find_binary

from ..support import modes
from ..support.polling import eventually
from ..support.recorded import recorded

pytestmark = pytest.mark.processes  # each test kills and restarts a server of its own

LEASE = 6.0  # renewed every 2 s: a forgotten holder learns it within that of the restart


@pytest.fixture
def snapshotting_server() -> Iterator[RedisServer]:
    """A server of the test's own, in a data directory of its own: ``SAVE`` writes the snapshot it restarts from."""
    try:
        binary = find_binary()
    except ServerNotFound:
        pytest.skip("no server binary to start and restart")
    server = RedisServer(binary, extra_args=modes.server_args(binary)).start()
    try:
        yield server
    finally:
        server.close()


def make(name: str) -> Semaphore:
    return Semaphore(SemaphoreConfig.from_options(name, {"limit": 2, "lease": LEASE}))


def restarted_from_the_snapshot(server: RedisServer) -> float:
    """Kill the server (nothing saved on the way down) and start it again from its last snapshot; when (monotonic)."""
    server.crash()
    server.start()
    return time.monotonic()


def acquired_after_the_restart(sem: Semaphore) -> Permit:
    """A permit, once the app's connections (dropped with the server) are made again."""
    got: list[Permit] = []

    def acquire() -> bool:
        permit = sem.acquire(wait=0)
        if permit is not None:
            got.append(permit)
        return permit is not None

    eventually(acquire)
    return got[0]


def test_a_restart_from_an_older_snapshot_never_repeats_a_fence_and_the_forgotten_holder_learns_it(
    way: modes.Way, snapshotting_server: RedisServer, settings, fast_paths: bool
) -> None:
    settings.SEMAPHORE_CONNECTION = way.url(snapshotting_server.url) + "?socket_timeout=2&socket_connect_timeout=2"
    name = f"rolled-back-{way}-{fast_paths}"
    sem = make(name)
    with redis.Redis.from_url(snapshotting_server.url) as admin:
        first = sem.acquire()
        assert first is not None
        admin.save()  # the snapshot knows the first holder
        second = sem.acquire()  # granted after it: the restart forgets this grant
        assert second is not None and second.fence > first.fence
    with recorded(signals.semaphore_lost) as lost:
        restarted_at = restarted_from_the_snapshot(snapshotting_server)
        third = acquired_after_the_restart(sem)  # the second's permit, as the server sees it
        assert third.fence > second.fence, f"fences {first.fence}, {second.fence}, then {third.fence} after the restart"
        eventually(lambda: second.lost, timeout=LEASE)
        learned_at = time.monotonic()
    # Its lease had not ended: to the renewal it reads as a lease taken away (an operator's force release
    # reads the same), which the engine cannot tell from a grant the server forgot.
    assert [(event["token"], event["reason"]) for event in lost] == [(second.token, "expired")]
    assert not first.lost and first.is_held()
    assert third.is_held()
    # What the failure-modes page promises: the forgotten holder knows by its next renewal, due a third of a
    # lease after its last one before the crash (a second of slack for a loaded machine).
    assert learned_at - restarted_at <= LEASE / 3 + 1.0, f"learned {learned_at - restarted_at:.2f} s after the restart"
    first.release()
    third.release()
