"""A release hands its permit straight to the head of the line."""

from __future__ import annotations

import multiprocessing
import os
import signal
import threading
import time

import pytest
import redis

from django_semaphore import Permit, Semaphore
from django_semaphore.core import renewal
from django_semaphore.core.conf import SemaphoreConfig
from django_semaphore.core.renewal import renewer
from django_semaphore.testing import RedisServer

from ..support import workers
from ..support.handoffs import in_line_behind_a_holder
from ..support.polling import wait_until

spawn = multiprocessing.get_context("spawn")


def make(name: str, limit: int = 1, **options: object) -> Semaphore:
    return Semaphore(SemaphoreConfig.from_options(name, {"limit": limit, **options}))


def _scripts_run(client: redis.Redis) -> int:
    """Operations the server ran (a "function not found" answer, followed by a load, does not count)."""
    stats = client.info("commandstats").get("cmdstat_fcall", {})
    return int(stats.get("calls", 0)) - int(stats.get("failed_calls", 0))


def test_the_waiter_holds_the_permit_without_asking_again(own_server: RedisServer, settings) -> None:
    # No heartbeat, backstop or read-timeout wake-up during the test: any
    # script call but the release would be the waiter asking again.
    settings.SEMAPHORE_WAITER_TTL = 30
    settings.SEMAPHORE_CONNECTION = f"{own_server.url}?socket_timeout=30"
    sem = make("handed", lease=1)  # the waiter's lease is within the claim: nothing to renew
    holder = make("handed", lease=60).acquire(auto_renew=False)
    assert holder is not None
    got: list[object] = []
    waiter = threading.Thread(target=lambda: got.append(make("handed", lease=1).acquire(wait=10, auto_renew=False)))
    waiter.start()
    wait_until(lambda: sem.status().waiting == 1)
    with redis.Redis.from_url(own_server.url) as admin:
        admin.config_resetstat()
        holder.release()
        waiter.join(10)
        assert _scripts_run(admin) == 1  # the release alone: the waiter did not run acquire again
    assert got and got[0] is not None and got[0].fence > holder.fence
    assert sem.status().used == 1


def test_a_handed_permit_is_renewed_to_its_full_lease() -> None:
    sem = make("renewed", lease=60)
    holder = sem.acquire()
    assert holder is not None
    got: list[object] = []
    waiter = threading.Thread(target=lambda: got.append(make("renewed", lease=60).acquire(wait=10, auto_renew=False)))
    waiter.start()
    wait_until(lambda: sem.status().waiting == 1)
    holder.release()
    waiter.join(10)
    permit = got[0]
    assert permit is not None
    (status_holder,) = sem.status().holders
    assert status_holder.lease_deadline_ms - sem.status().now_ms > 30_000  # not the 1 s claim
    permit.release()


def test_a_permit_handed_on_a_claim_is_renewed_at_once_without_waking_the_thread(monkeypatch) -> None:
    """The hand-off's path pays no thread switch; the claim is renewed to the full lease at once all the same."""
    scene = in_line_behind_a_holder("at-once")
    # Waking it to look more often was the waiter's business, on its way into the line.
    wait_until(lambda: 0 < renewer._asleep_until <= time.monotonic() + renewal.LOOK_WHILE_WAITING)
    wakes: list[int] = []
    notify, track = renewer._wakeup.notify, renewer.track
    monkeypatch.setattr(renewer._wakeup, "notify", lambda *args: wakes.append(1) or notify(*args))
    tracked: list[int] = []
    monkeypatch.setattr(renewer, "track", lambda *args, **kw: (track(*args, **kw), tracked.append(len(wakes))))

    def not_on_the_server(permit: Permit, lease: float | None = None) -> bool:
        permit.expires_at = time.monotonic() + 60  # the thread's renewals do nothing: the server shows the post's
        return True

    monkeypatch.setattr(Permit, "renew", not_on_the_server)
    permit = scene.hand_over()
    assert tracked == [0]  # tracked, and the thread left asleep
    status = scene.semaphore.status
    wait_until(lambda: status().holders[0].lease_deadline_ms - status().now_ms > 30_000, timeout=5)
    monkeypatch.undo()
    assert permit.is_held() and scene.lost == []
    permit.release()


def test_a_handed_permit_outlives_a_stall_that_begins_after_the_hand_off(own_server: RedisServer) -> None:
    """A stall longer than what is left of the claim, from a tenth of a second after the hand-off, costs nothing.

    The claim is renewed to the full lease as the waiter gets the permit, as any permit's lease
    would be: not when the renewal thread next looks, which may be inside the stall.
    """
    scene = in_line_behind_a_holder("stall")
    permit = scene.hand_over()
    time.sleep(0.1)
    with redis.Redis.from_url(own_server.url) as admin:
        admin.execute_command("CLIENT", "PAUSE", 1200, "ALL")  # a failover, a slow fork...
    time.sleep(1.2 + 0.5)
    assert scene.lost == [] and permit.is_held()
    permit.release()


def test_a_claim_renewed_at_once_is_looked_at_again_a_quarter_into_it() -> None:
    permit = make("schedule", lease=60).acquire()
    assert permit is not None
    try:
        now = time.monotonic()
        permit.expires_at = now + 1.0  # as a claim of 1 s leaves it, the lease being 60 s
        assert permit.next_renewal() <= now  # due at once: renewed so, without the thread (post_renewal)
        assert now + 0.24 < permit.claim_renewal() <= now + 0.26  # then the thread's look, should that fail
    finally:
        permit.release()


@pytest.mark.processes
def test_a_permit_handed_to_a_frozen_waiter_comes_back_after_the_claim(key_prefix: str) -> None:
    sem = make("frozen", lease=60)
    holder = sem.acquire()
    assert holder is not None
    waiter = spawn.Process(target=workers.hold_forever, args=(key_prefix, "frozen", 1, 60.0, 60.0))
    try:
        waiter.start()
        wait_until(lambda: sem.status().waiting == 1)
        os.kill(waiter.pid, signal.SIGSTOP)  # alive to the line for up to a second, but it will never renew
        holder.release()  # handed to the frozen waiter on a short claim
        assert sem.status().used == 1
        permit = sem.acquire(wait=10)  # the claim (1 s) lapses; the next in line gets the permit
        assert permit is not None
        assert sem.status().counters["expired"] >= 1
        permit.release()
    finally:
        waiter.kill()
        waiter.join(5)
