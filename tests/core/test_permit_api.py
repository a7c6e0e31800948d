"""The permit API the peers have: extend, renew with a new lease, ask the server, stop renewing, cancel a wait."""

from __future__ import annotations

import asyncio
import random
import threading
import time

import pytest

from django_semaphore import Permit, Semaphore
from django_semaphore.core.conf import SemaphoreConfig

from ..support.polling import wait_until


def make(limit: int = 1, **options: object) -> Semaphore:
    return Semaphore(SemaphoreConfig.from_options("peers", {"limit": limit, **options}))


def lease_left(sem: Semaphore, permit: Permit) -> float:
    """Seconds the server still gives the permit's lease."""
    status = sem.status()
    (holder,) = [holder for holder in status.holders if holder.token == permit.token]
    return (holder.lease_deadline_ms - status.now_ms) / 1000


def test_renew_with_a_new_lease_keeps_using_it() -> None:
    sem = make(lease=1)
    permit = sem.acquire()
    assert permit is not None
    assert permit.renew(lease=4) is True
    assert permit.lease == 4 and 3.5 < lease_left(sem, permit) <= 4
    time.sleep(2)  # past the old lease: the background renewal runs on the new one
    assert permit.is_held() and lease_left(sem, permit) > 2
    assert permit.renew() is True and 3.5 < lease_left(sem, permit) <= 4
    for bad, error in ((0, ValueError), (-1, ValueError), (float("nan"), ValueError), ("5", TypeError)):
        with pytest.raises(error):
            permit.renew(lease=bad)  # type: ignore[arg-type]
    permit.release()
    assert permit.renew(lease=4) is False


def test_extend_adds_to_what_is_left_once() -> None:
    sem = make(lease=2)
    permit = sem.acquire(auto_renew=False)
    assert permit is not None
    assert permit.extend(10) is True
    assert 11 < lease_left(sem, permit) <= 12
    assert permit.lease == 2  # later renewals keep the permit's own lease
    with pytest.raises(ValueError):
        permit.extend(0)
    sem.force_release(permit.token)
    assert permit.extend(1) is False and permit.lost


def test_is_held_asks_the_server_not_the_local_flag() -> None:
    sem = make(lease=30)
    permit = sem.acquire(auto_renew=False)
    assert permit is not None and permit.is_held() is True
    sem.force_release(permit.token)
    assert permit.held  # this process has not heard yet
    assert permit.is_held() is False and permit.lost and not permit.held
    short = sem.acquire(lease=0.3, auto_renew=False)
    assert short is not None
    time.sleep(0.5)
    assert short.is_held() is False  # its lease ran out unrenewed
    released = sem.acquire(auto_renew=False)
    assert released is not None and released.release()
    assert released.is_held() is False


def test_is_held_finds_a_holder_beyond_the_first_listed(monkeypatch) -> None:
    from django_semaphore.core import permit as permits

    monkeypatch.setattr(permits, "HOLDERS_LISTED", 2)
    sem = make(limit=5, lease=30)
    held = [sem.acquire(auto_renew=False) for _ in range(5)]
    assert all(permit is not None and permit.is_held() for permit in held)
    sem.force_release_all()


def test_stop_renewal_keeps_the_permit_until_its_lease_ends() -> None:
    sem = make(limit=2, lease=0.6)
    stopped, kept = sem.acquire(), sem.acquire()
    assert stopped is not None and kept is not None
    stopped.stop_renewal()
    assert stopped.is_held()
    wait_until(lambda: not stopped.is_held(), timeout=3)
    assert kept.is_held()  # the background renewal goes on for the other
    assert kept.release()


def test_the_asyncio_forms() -> None:
    async def scenario() -> None:
        sem = make(lease=2)
        permit = await sem.aacquire(auto_renew=False)
        assert permit is not None
        assert await permit.arenew(lease=5) and permit.lease == 5
        assert await permit.aextend(5) and lease_left(sem, permit) > 9
        assert await permit.ais_held()
        sem.force_release(permit.token)
        assert await permit.ais_held() is False and permit.lost

    asyncio.run(scenario())


def test_a_waiting_acquire_is_cancelled_from_another_thread_at_once() -> None:
    sem = make(lease=30)
    holder = sem.acquire(auto_renew=False)
    assert holder is not None
    cancel = threading.Event()
    outcome: list[object] = []
    waiter = threading.Thread(target=lambda: outcome.append(sem.attempt(wait=30, cancel=cancel)))
    waiter.start()
    wait_until(lambda: sem.status().waiting == 1)
    cancelled = time.monotonic()
    cancel.set()
    waiter.join(5)
    assert time.monotonic() - cancelled < 0.5
    (attempt,) = outcome
    assert attempt.permit is None and attempt.waited < 5  # type: ignore[attr-defined]
    assert sem.status().waiting == 0
    holder.release()
    assert sem.status().used == 0  # nothing was handed to the cancelled waiter


def test_a_cancel_set_before_or_after_changes_nothing_it_should_not() -> None:
    sem = make(lease=30)
    already = threading.Event()
    already.set()
    assert sem.acquire(wait=5, cancel=already) is None  # free, but cancelled: no permit
    assert sem.status().used == 0
    later = threading.Event()
    permit = sem.acquire(wait=5, cancel=later)
    assert permit is not None
    later.set()  # after the acquire returned: its permit stays held
    time.sleep(0.2)
    assert permit.is_held()
    permit.release()


def wait_for_permit(sem: Semaphore, cancel: threading.Event, got: list[Permit | None]) -> None:
    got.append(sem.acquire(wait=10, cancel=cancel, auto_renew=False))


def test_cancels_racing_hand_overs_never_leak_a_permit() -> None:
    """A cancel landing as a release hands the permit over: either the caller holds it, or nobody does."""
    sem = make(lease=30)
    rng = random.Random(15)
    for _ in range(25):
        holder = sem.acquire(auto_renew=False)
        assert holder is not None
        cancel = threading.Event()
        got: list[Permit | None] = []
        waiter = threading.Thread(target=wait_for_permit, args=(sem, cancel, got))
        waiter.start()
        wait_until(lambda: sem.status().waiting == 1)
        releaser = threading.Timer(rng.uniform(0, 0.02), holder.release)
        releaser.start()
        time.sleep(rng.uniform(0, 0.02))
        cancel.set()
        waiter.join(5)
        releaser.join(5)
        (permit,) = got
        if permit is not None:
            assert permit.is_held()
            permit.release()
        status = sem.status()
        assert (status.used, status.holder_count, status.waiting) == (0, 0, 0)
