"""Waiters that die in line tie a handed permit for one of their waiter TTLs at most.

The waiters are real OS processes, SIGKILLed while they wait. A release hands
the permit to the head of the line; if that head is dead, nobody renews it and
it comes back when the claim the grant was made on runs out. The bound is read
from the grant itself (its lease deadline against the server time it was made
at, both in the holder's record), so no timing threshold is needed.
"""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest
import redis

from django_semaphore import Permit, Semaphore
from django_semaphore.core.conf import SemaphoreConfig

from ..support import workers
from ..support.polling import wait_until
from ..support.processes import warm
from ..support.records import holder_record

pytestmark = pytest.mark.processes

WAITER_TTL = 1.0  # the default SEMAPHORE_WAITER_TTL, which the waiter processes run with


def make(name: str) -> Semaphore:
    return Semaphore(SemaphoreConfig.from_options(name, {"limit": 1, "lease": 30}))


def _queue_dead_waiters(key_prefix: str, name: str, sem: Semaphore, count: int) -> list:
    """``count`` waiter processes in line behind the holder, then SIGKILLed there."""
    processes = [
        warm.Process(target=workers.hold_forever, args=(key_prefix, name, 1, 30.0, 60.0)) for _ in range(count)
    ]
    for process in processes:
        process.start()
    wait_until(lambda: sem.status().waiting == count, timeout=60)
    for process in processes:  # only our own children, by their pid
        os.kill(process.pid, signal.SIGKILL)
    for process in processes:
        process.join(10)
    return processes


def _handed_claims(client: redis.Redis, sem: Semaphore) -> dict[bytes, int]:
    """Each holder's token: how long its lease runs from the moment it was granted (ms, server clock)."""
    keys = sem.calls.keys
    claims = {}
    for token, deadline in client.zrange(keys.holders, 0, -1, withscores=True):
        acquired_ms = int((holder_record(client, keys, token) or b"").split(b"|")[1])
        claims[token] = int(deadline) - acquired_ms
    return claims


def _held(settings, name: str) -> tuple[Semaphore, Permit]:  # type: ignore[no-untyped-def]
    """A limit-1 semaphore ``name``, its one permit held by this process (no renewal: no script meanwhile)."""
    settings.SEMAPHORE_WAITER_TTL = WAITER_TTL
    sem = make(name)
    holder = sem.acquire(auto_renew=False)
    assert holder is not None
    return sem, holder


def _stop(processes: list) -> None:
    for process in processes:
        if process.is_alive():
            process.kill()
        process.join(5)


def test_a_dead_head_given_a_pass_after_an_idle_gap_ties_the_permit_one_waiter_ttl_at_most(
    key_prefix: str, redis_client: redis.Redis, settings
) -> None:
    # Nobody touches the line for longer than a waiter TTL (the holder does not renew), so the
    # release that ends the gap cannot tell dead waiters from ones the server had not heard from:
    # each gets a pass. The one at the head is handed the permit, which nobody will renew.
    sem, holder = _held(settings, "passes")
    processes: list = []
    try:
        processes = _queue_dead_waiters(key_prefix, "passes", sem, 3)
        time.sleep(WAITER_TTL * 1.5)  # the idle gap: no script runs on this semaphore
        assert holder.release()
        (claim,) = _handed_claims(redis_client, sem).values()
        assert claim <= WAITER_TTL * 1000, f"a dead waiter ties the permit for {claim} ms"
        permit = sem.acquire(wait=10)  # the claim runs out, the other dead waiters' passes too
        assert permit is not None
        status = sem.status()
        assert status.used == 1 and status.waiting == 0
        assert status.counters["expired"] == 1
        permit.release()
    finally:
        _stop(processes)


def test_a_dead_head_handed_the_permit_while_others_wait_ties_it_one_waiter_ttl_at_most(
    key_prefix: str, redis_client: redis.Redis, settings
) -> None:
    # A live waiter behind them keeps the line served, so no pass: the dead head's heartbeat has
    # simply not run out yet when the release hands it the permit.
    sem, holder = _held(settings, "busy-line")
    processes: list = []
    got: list[Permit | None] = []
    live = threading.Thread(target=lambda: got.append(make("busy-line").acquire(wait=30)))
    try:
        processes = _queue_dead_waiters(key_prefix, "busy-line", sem, 2)
        live.start()
        wait_until(lambda: sem.status().waiting == 3)
        assert holder.release()
        ((handed_to, claim),) = _handed_claims(redis_client, sem).items()
        live.join(30)
        permit = got[0]
        assert permit is not None
        assert handed_to != permit.token.encode(), "the dead head's heartbeat had run out before the release"
        assert claim <= WAITER_TTL * 1000, f"a dead waiter ties the permit for {claim} ms"
        status = sem.status()
        assert status.used == 1 and status.waiting == 0
        assert status.counters["expired"] == 1
        permit.release()
    finally:
        _stop(processes)
