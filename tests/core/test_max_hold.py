"""``max_hold``: renewal keeps a permit alive while its holder lives, but not for good.

A streamed response to a client that stops reading, or a request body sent a
byte a second, would otherwise keep its permit for as long as the connection
lasts. Past ``max_hold`` the lease is not renewed: the permit comes back, and
its holder learns it lost it (``on_lost``, the signal, the counter, the log).
"""

from __future__ import annotations

import asyncio
import time

import pytest
from django.test import AsyncClient, Client

from django_semaphore import Semaphore, get_semaphore
from django_semaphore.core.conf import SemaphoreConfig
from django_semaphore.signals import semaphore_lost
from django_semaphore.web.admission import request_lease

from ..support.guards import declare
from ..support.polling import wait_until


def make(name: str, **options: object) -> Semaphore:
    return Semaphore(SemaphoreConfig.from_options(name, {"limit": 1, **options}))


def test_a_renewed_permit_is_lost_at_its_max_hold_and_comes_back() -> None:
    sem = make("bounded-core", lease=0.3, max_hold=1.0)
    lost: list[object] = []
    reasons: list[object] = []

    def receiver(sender: str, **kwargs: object) -> None:
        reasons.append(kwargs.get("reason"))

    semaphore_lost.connect(receiver)
    try:
        started = time.monotonic()
        permit = sem.acquire(on_lost=lost.append)
        assert permit is not None
        time.sleep(0.7)
        assert permit.held and sem.acquire() is None  # renewed past its first lease
        wait_until(lambda: lost == [permit], timeout=5)
        held_for = time.monotonic() - started
    finally:
        semaphore_lost.disconnect(receiver)
    assert 0.9 <= held_for < 2.0
    assert reasons == ["max_hold"]
    # It comes back: the holder counts it lost a little before the server's clock reaches the max hold
    # (its estimate errs early), so on a busy machine the server may still hold it for a moment.
    wait_until(lambda: sem.acquire(auto_renew=False) is not None, timeout=2)
    assert sem.status().counters["max_hold"] == 1


def test_max_hold_none_lets_a_permit_be_renewed_for_as_long_as_it_is_held() -> None:
    sem = make("unbounded-core", lease=0.3)
    permit = sem.acquire()
    assert permit is not None
    time.sleep(1.2)
    assert permit.held and sem.acquire() is None
    permit.release()


def test_a_request_gets_a_short_renewed_lease_and_a_fixed_hold_cap_by_default(settings) -> None:
    """A killed worker's permits come back within a short lease (renewal keeps a live request's), and a
    long export is not cut off after ten of them: the cap is a fixed duration."""
    config = SemaphoreConfig.from_options("web", {"limit": 1})
    assert (config.lease, request_lease(config).lease) == (60, 10)  # non-web callers keep SEMAPHORE_DEFAULT_LEASE
    assert config.max_hold is None and request_lease(config).max_hold == 600
    explicit = request_lease(SemaphoreConfig.from_options("web", {"limit": 1, "lease": 3}))
    assert (explicit.lease, explicit.max_hold) == (3, 600)
    assert request_lease(SemaphoreConfig.from_options("web", {"limit": 1, "max_hold": None})).max_hold is None
    assert request_lease(SemaphoreConfig.from_options("web", {"limit": 1, "max_hold": 30})).max_hold == 30
    # Nothing renews a permit without auto_renew: a request keeps the whole lease it was given.
    assert request_lease(SemaphoreConfig.from_options("web", {"limit": 1, "auto_renew": False})).lease == 60
    settings.SEMAPHORE_WEB_LEASE = 5
    settings.SEMAPHORE_WEB_MAX_HOLD = None
    tuned = request_lease(SemaphoreConfig.from_options("web", {"limit": 1}))
    assert (tuned.lease, tuned.max_hold) == (5, None)


@pytest.mark.django_db  # close() sends request_finished, which tidies database connections
@pytest.mark.parametrize("through", ["decorator", "middleware"])
def test_a_guarded_request_holds_its_permit_on_the_web_lease(settings, through: str) -> None:
    declare(settings, guarded={"lease": None}, sitewide={"lease": None})
    for name in ("guarded", "sitewide"):  # as declared in a project: no lease of their own
        settings.SEMAPHORES[name].pop("lease")
    if through == "middleware":
        settings.MIDDLEWARE = [*settings.MIDDLEWARE, "django_semaphore.middleware.SemaphoreMiddleware"]
        settings.SEMAPHORE_MIDDLEWARE_RULES = [{"semaphore": "sitewide", "path": "^/surface/reported-stream/"}]
    name = "sitewide" if through == "middleware" else "guarded"
    response = Client().get("/surface/reported-stream/")  # the stream holds its permits until closed
    try:
        (holder,) = get_semaphore(name).status().holders
    finally:
        response.close()
    assert holder.lease_deadline_ms - holder.acquired_at_ms == 10_000
    # @limit, tasks and scripts keep SEMAPHORE_DEFAULT_LEASE.
    permit = get_semaphore(name).acquire(auto_renew=False)
    assert permit is not None and permit.lease == 60
    permit.release()


@pytest.fixture
def bounded(settings) -> None:
    declare(settings)
    settings.SEMAPHORES = {**settings.SEMAPHORES, "bounded": {"limit": 1, "lease": 0.3, "max_hold": 1.0}}


@pytest.mark.django_db  # close() sends request_finished, which tidies database connections
def test_an_endless_stream_is_cut_at_max_hold_and_its_permit_comes_back(bounded, client: Client) -> None:
    response = client.get("/surface/endless/")
    started = time.monotonic()
    body = b""
    for chunk in response.streaming_content:  # a client reading slowly, for as long as it is served
        body += chunk
        assert time.monotonic() - started < 10, "the stream was never cut"
    response.close()
    assert 0.8 <= time.monotonic() - started < 3
    assert body and set(body) == {ord(".")}
    assert get_semaphore("bounded").status().used == 0


def test_an_endless_async_stream_is_cut_at_max_hold(bounded) -> None:
    async def read() -> float:
        response = await AsyncClient().get("/surface/endless-async/")
        started = time.monotonic()
        async for _chunk in response.streaming_content:
            assert time.monotonic() - started < 10, "the stream was never cut"
        return time.monotonic() - started

    assert 0.8 <= asyncio.run(read()) < 3
    assert get_semaphore("bounded").status().used == 0


@pytest.mark.parametrize("reason", ["max_hold", "expired"])
def test_an_on_lost_that_raises_is_logged_and_the_other_permits_go_on_being_renewed(reason: str, caplog) -> None:
    """``on_lost`` runs on the renewal thread, which serves every permit of the process: a callback that raises
    is the holder's bug, logged, and must not end that thread (every other permit would then run out its lease)."""
    doomed = make(f"doomed-{reason}", lease=0.3, max_hold=0.6 if reason == "max_hold" else None)

    def broken(permit: object) -> None:
        raise RuntimeError("the holder's own bug")

    other = make(f"kept-{reason}", lease=0.6).acquire()
    assert other is not None
    permit = doomed.acquire(on_lost=broken)
    assert permit is not None
    if reason == "expired":
        doomed.force_release(permit.token)  # its next renewal finds it gone
    wait_until(lambda: permit.lost, timeout=10)
    first = other.lease_deadline_ms
    wait_until(lambda: other.lease_deadline_ms > first, timeout=10)  # renewed after the failed callback
    assert other.held
    assert "the holder's own bug" in caplog.text
    other.release()
