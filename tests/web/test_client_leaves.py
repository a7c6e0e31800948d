"""A client that leaves while its request's work runs in a thread (ASGI): the permit stays until that work ends.

Django's ASGI handler cancels a request's handling when its client disconnects. The event loop then stops
waiting for an async view's ``await sync_to_async(...)``, or for a sync view behind async middleware, but
the thread runs the work on to its end. A guard that gave its permit back at the cancellation would let the
next request in beside work still running, and a client that leaves at once could start as much of it as it
likes: one request, one disconnect, over and over.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from django.core.handlers.asgi import ASGIHandler

from django_semaphore import signals

from ..support.asgi import http_scope
from ..support.guards import MIDDLEWARE, declare
from ..support.polling import wait_until
from ..support.views import Work

# Closing a response sends request_finished, whose receiver looks at the database connection.
pytestmark = pytest.mark.django_db

# How long a release that comes with the cancellation is waited for: it follows the cancellation at once.
CANCELLATION = 3.0


class Releases:
    """Each release of the guarded semaphore, as the runs of the work still going on when it came."""

    def __init__(self) -> None:
        self.running_then: list[int] = []
        self.heard = threading.Event()

    def __call__(self, sender: str, **kwargs: Any) -> None:
        if sender == "guarded":
            self.running_then.append(Work.running)
            self.heard.set()


@pytest.fixture
def releases() -> Iterator[Releases]:
    Work.reset()
    heard = Releases()
    signals.semaphore_released.connect(heard)
    try:
        yield heard
    finally:
        signals.semaphore_released.disconnect(heard)
        Work.may_end.set()


def _served_while_it_works(path: str, releases: Releases, *, client_leaves: bool) -> list[int]:
    """Serve ``path`` on an event loop of its own thread until the work is under way (started, when the client
    leaves then; given up on by the view, when it stays), and let the work end only once a release that came
    with that moment has had time to be heard. The statuses the server was sent."""
    statuses: list[int] = []
    gone: list[asyncio.Event] = []  # made on the server's loop, set from this thread
    ready = threading.Event()

    async def serve() -> None:
        gone.append(asyncio.Event())
        ready.set()
        body = [{"type": "http.request", "body": b"", "more_body": False}]

        async def receive() -> dict[str, Any]:
            if body:
                return body.pop()
            await gone[0].wait()
            return {"type": "http.disconnect"}

        async def send(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                statuses.append(message["status"])

        await ASGIHandler()(http_scope(path), receive, send)

    loop = asyncio.new_event_loop()
    server = threading.Thread(target=loop.run_until_complete, args=(serve(),))
    server.start()
    try:
        assert ready.wait(10)
        if client_leaves:
            assert Work.started.wait(10)
            loop.call_soon_threadsafe(gone[0].set)
        else:
            assert Work.abandoned.wait(10)
        releases.heard.wait(CANCELLATION)
    finally:
        Work.may_end.set()
        server.join(30)
        loop.close()
    assert not server.is_alive()
    # Posted from the request's thread, the release is heard when its answer is read (the background reads it).
    wait_until(releases.heard.is_set, timeout=10)
    return statuses


def test_an_async_view_whose_client_leaves_keeps_its_permit_until_its_threads_work_ends(
    settings, releases: Releases
) -> None:
    declare(settings)
    _served_while_it_works("/surface/working-async/", releases, client_leaves=True)
    assert Work.abandoned.is_set()  # Django did cancel the view's await
    assert releases.running_then == [0]


def test_a_sync_view_behind_the_middleware_whose_client_leaves_keeps_its_permit_until_it_ends(
    settings, releases: Releases
) -> None:
    declare(settings)
    settings.MIDDLEWARE = [*settings.MIDDLEWARE, MIDDLEWARE]
    settings.SEMAPHORE_MIDDLEWARE_RULES = [{"semaphore": "guarded", "path": "^/surface/working/$"}]
    _served_while_it_works("/surface/working/", releases, client_leaves=True)
    assert releases.running_then == [0]


@pytest.mark.xfail(
    strict=True,
    reason="open: a plain response's permit goes back on the loop when the view returns (web/holding.py afinish), "
    "also while work the view gave up on still runs in the request's thread",
)
def test_an_async_view_that_gives_up_on_its_threads_work_keeps_its_permit_until_that_work_ends(
    settings, releases: Releases
) -> None:
    """No client leaves: the view's own deadline (``asyncio.wait_for``) stops waiting for its sync work and it
    answers 504, while the request's thread runs the work on. The permit stays with the work, as on a
    cancellation (the 504 itself waits for that thread: Django's middleware mixin runs its response hooks
    there)."""
    declare(settings)
    statuses = _served_while_it_works("/surface/working-async-with-a-deadline/", releases, client_leaves=False)
    assert statuses == [504] and Work.abandoned.is_set()
    assert releases.running_then == [0]
