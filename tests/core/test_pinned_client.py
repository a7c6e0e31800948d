"""A permit keeps the client it was granted through: its release, renewals and clean-ups go there.

The settings may name another server by the time they run (a test's
``override_settings`` restored, a site reconfigured at run time); asking them
again would release on, renew on, or retry against the wrong server, and
leave the permit held on its own until its lease ends.
"""

from __future__ import annotations

import asyncio

from django.test import override_settings

from django_semaphore import Permit, Semaphore
from django_semaphore.core.conf import SemaphoreConfig
from django_semaphore.core.renewal import renewer
from django_semaphore.testing import free_port

from ..support.polling import wait_until

# A lease renewed every second in the background: a renewal thread that a loaded machine does not run for up to two
# seconds still renews it in time (a lease of 0.6 s, renewed every 0.2 s, was lost to a 0.4 s wait for the CPU).
LEASE = 3.0


def nowhere() -> str:
    """A Redis URL nothing listens on, with timeouts short enough for a test."""
    return f"redis://127.0.0.1:{free_port()}/0?socket_timeout=0.2&socket_connect_timeout=0.2"


def make(**options: object) -> Semaphore:
    return Semaphore(SemaphoreConfig.from_options("pinned", {"limit": 2, "lease": 30, **options}))


def renewed_twice(permit: Permit) -> bool:
    """Whether two background renewals reached the permit's server, each moving its lease deadline there.

    Told of no event, the test waits for the deadline the permit learns from the server: a renewal sent
    anywhere else fails and moves nothing, and the permit is lost once its lease ends.
    """
    deadlines = [permit.lease_deadline_ms]

    def moved() -> bool:
        if permit.lease_deadline_ms != deadlines[-1]:
            deadlines.append(permit.lease_deadline_ms)
        return len(deadlines) > 2 or permit.lost

    wait_until(moved, timeout=4 * LEASE)
    return not permit.lost


def test_release_goes_to_the_server_that_granted_the_permit() -> None:
    sem = make()
    permit = sem.acquire(auto_renew=False)
    assert permit is not None
    with override_settings(SEMAPHORE_CONNECTION=nowhere()):
        assert permit.release() is True
    assert sem.status().used == 0


def test_a_renewal_goes_to_the_server_that_granted_the_permit() -> None:
    sem = make(lease=LEASE)
    permit = sem.acquire()
    assert permit is not None
    with override_settings(SEMAPHORE_CONNECTION=nowhere()):
        assert renewed_twice(permit)
    assert permit.is_held()
    permit.release()


def test_a_release_left_to_the_background_settles_on_the_permits_server() -> None:
    sem = make()
    permit = sem.acquire(auto_renew=False)
    assert permit is not None
    with override_settings(SEMAPHORE_CONNECTION=nowhere()):
        permit.release_in_background()
        wait_until(lambda: renewer.pending() == 0, timeout=5)
    assert sem.status().used == 0


def test_an_async_permit_is_renewed_on_the_server_of_its_call() -> None:
    sem = make(lease=LEASE)

    async def take() -> Permit | None:
        return await sem.aacquire()

    permit = asyncio.run(take())
    assert permit is not None
    with override_settings(SEMAPHORE_CONNECTION=nowhere(), SEMAPHORE_ASYNC_CONNECTION=None):
        assert renewed_twice(permit)
    assert permit.is_held()
    assert permit.release() is True
    assert sem.status().used == 0
