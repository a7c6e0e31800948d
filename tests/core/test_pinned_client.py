"""A permit keeps the client it was granted through: its release, renewals and clean-ups go there.

The settings may name another server by the time they run (a test's
``override_settings`` restored, a site reconfigured at run time); asking them
again would release on, renew on, or retry against the wrong server, and
leave the permit held on its own until its lease ends.
"""

from __future__ import annotations

import asyncio
import time

from django.test import override_settings

from django_semaphore import Semaphore
from django_semaphore.core.conf import SemaphoreConfig
from django_semaphore.core.renewal import renewer
from django_semaphore.testing import free_port

from ..support.polling import wait_until


def nowhere() -> str:
    """A Redis URL nothing listens on, with timeouts short enough for a test."""
    return f"redis://127.0.0.1:{free_port()}/0?socket_timeout=0.2&socket_connect_timeout=0.2"


def make(**options: object) -> Semaphore:
    return Semaphore(SemaphoreConfig.from_options("pinned", {"limit": 2, "lease": 30, **options}))


def test_release_goes_to_the_server_that_granted_the_permit() -> None:
    sem = make()
    permit = sem.acquire(auto_renew=False)
    assert permit is not None
    with override_settings(SEMAPHORE_CONNECTION=nowhere()):
        assert permit.release() is True
    assert sem.status().used == 0


def test_a_renewal_goes_to_the_server_that_granted_the_permit() -> None:
    sem = make(lease=0.6)
    permit = sem.acquire()
    assert permit is not None
    with override_settings(SEMAPHORE_CONNECTION=nowhere()):
        time.sleep(1.2)  # two leases: only the background renewals keep it
        assert not permit.lost
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
    sem = make(lease=0.6)

    async def take() -> object:
        return await sem.aacquire()

    permit = asyncio.run(take())
    assert permit is not None
    with override_settings(SEMAPHORE_CONNECTION=nowhere(), SEMAPHORE_ASYNC_CONNECTION=None):
        time.sleep(1.2)
        assert not permit.lost  # type: ignore[attr-defined]
    assert permit.is_held()  # type: ignore[attr-defined]
    assert permit.release() is True  # type: ignore[attr-defined]
    assert sem.status().used == 0
