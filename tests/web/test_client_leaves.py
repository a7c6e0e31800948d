"""A client that leaves while its request's work runs in a thread (ASGI): the permit stays until that work ends.

Django's ASGI handler cancels a request's handling when its client disconnects. The event loop then stops
waiting for an async view's ``await sync_to_async(...)``, or for a sync view behind async middleware, but
the thread runs the work on to its end. A guard that gave its permit back at the cancellation would let the
next request in beside work still running, and a client that leaves at once could start as much of it as it
likes: one request, one disconnect, over and over. An async view that gives such work up itself
(``asyncio.wait_for``) and answers leaves it running too: the permit waits for it the same way, under the
decorator, the middleware and Ninja's guard, and under WSGI.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from asgiref.sync import SyncToAsync, ThreadSensitiveContext, sync_to_async
from django.core.handlers.asgi import ASGIHandler
from django.test import Client, RequestFactory

from benchmarks.runtime import http_scope
from django_semaphore import signals
from django_semaphore.web.holding import after_the_requests_thread, requests_thread

from ..support import views
from ..support.guards import MIDDLEWARE, declare, used
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


def _served_while_it_works(
    path: str, releases: Releases, *, leaves_at: threading.Event | None = None, urls: str | None = None
) -> list[int]:
    """Serve ``path`` on an event loop of its own thread until the work is under way (``leaves_at``: the client
    leaves at that moment; else it stays until the view has given the work up), and let the work end only once
    a release that came with that moment has had time to be heard. The statuses the server was sent."""
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
        if leaves_at is not None:
            assert leaves_at.wait(10)
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
    _served_while_it_works("/surface/working-async/", releases, leaves_at=Work.started)
    assert Work.abandoned.is_set()  # Django did cancel the view's await
    assert releases.running_then == [0]


def test_a_sync_view_behind_the_middleware_whose_client_leaves_keeps_its_permit_until_it_ends(
    settings, releases: Releases
) -> None:
    declare(settings)
    settings.MIDDLEWARE = [*settings.MIDDLEWARE, MIDDLEWARE]
    settings.SEMAPHORE_MIDDLEWARE_RULES = [{"semaphore": "guarded", "path": "^/surface/working/$"}]
    _served_while_it_works("/surface/working/", releases, leaves_at=Work.started)
    assert releases.running_then == [0]


def _given_up_and_answered(path: str, releases: Releases, status: int) -> None:
    """``path``'s view gives its work up and answers ``status``, no client leaving: released with 0 runs going on."""
    statuses = _served_while_it_works(path, releases)
    assert statuses == [status] and Work.abandoned.is_set()
    assert releases.running_then == [0]


def test_an_async_view_that_gives_up_on_its_threads_work_keeps_its_permit_until_that_work_ends(
    settings, releases: Releases
) -> None:
    """No client leaves: the view's own deadline (``asyncio.wait_for``) stops waiting for its sync work and it
    answers 504, while the request's thread runs the work on. The permit stays with the work, as on a
    cancellation."""
    declare(settings)
    _given_up_and_answered("/surface/working-async-with-a-deadline/", releases, 504)


def test_an_async_view_that_lets_its_deadline_out_keeps_its_permit_until_the_work_ends(
    settings, releases: Releases
) -> None:
    """The view lets the timeout out (Django answers 500): the guard's way out on an error waits as well."""
    declare(settings)
    _given_up_and_answered("/surface/working-async-past-its-deadline/", releases, 500)


def test_an_async_view_behind_the_middleware_that_gives_up_keeps_its_permit_until_the_work_ends(
    settings, releases: Releases
) -> None:
    declare(settings)
    settings.MIDDLEWARE = [*settings.MIDDLEWARE, MIDDLEWARE]
    path = "/surface/working-async-with-a-deadline-by-rule/"
    settings.SEMAPHORE_MIDDLEWARE_RULES = [{"semaphore": "guarded", "path": f"^{path}$"}]
    _given_up_and_answered(path, releases, 504)


def test_a_ninja_operation_that_gives_up_keeps_its_permit_until_the_work_ends(settings, releases: Releases) -> None:
    declare(settings)
    settings.ROOT_URLCONF = "tests.support.api_urls"
    _given_up_and_answered("/ninja/working-with-a-deadline", releases, 504)


def test_an_async_view_that_gave_up_and_whose_client_then_leaves_keeps_its_permit_until_the_work_ends(
    settings, releases: Releases
) -> None:
    """The client leaves while the view, having given its work up, waits for that work before giving the permit
    back: the cancellation comes there, and the release still waits for the work."""
    declare(settings)
    _served_while_it_works("/surface/working-async-with-a-deadline/", releases, leaves_at=Work.abandoned)
    assert releases.running_then == [0]


def test_under_wsgi_an_async_view_that_gives_up_keeps_its_permit_until_the_work_ends(
    settings, releases: Releases, client: Client
) -> None:
    """Under WSGI an async view runs through ``async_to_sync``: its ``sync_to_async`` work runs in the worker's
    own thread (asgiref's ``CurrentThreadExecutor``), which the release waits for too."""
    declare(settings)

    def let_the_work_end() -> None:
        if Work.abandoned.wait(10):
            releases.heard.wait(CANCELLATION)
        Work.may_end.set()

    ender = threading.Thread(target=let_the_work_end)
    ender.start()
    try:
        response = client.get("/surface/working-async-with-a-deadline/")
    finally:
        Work.may_end.set()
        ender.join(30)
    assert response.status_code == 504 and Work.abandoned.is_set()
    wait_until(releases.heard.is_set, timeout=10)
    assert releases.running_then == [0]


def _served(path: str, on_start: Callable[[], object] = lambda: None) -> list[tuple[int, object]]:
    """Serve ``path`` through Django's ASGI handler, on a loop of its own thread; for each response its status and
    what ``on_start`` read as it was sent. A client that waited 20 s leaves (a hung request ends)."""
    sent: list[tuple[int, object]] = []

    async def serve() -> None:
        body = [{"type": "http.request", "body": b"", "more_body": False}]

        async def receive() -> dict[str, Any]:
            if body:
                return body.pop()
            await asyncio.sleep(20)
            return {"type": "http.disconnect"}

        async def send(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                sent.append((message["status"], on_start()))

        await ASGIHandler()(http_scope(path), receive, send)

    server = threading.Thread(target=asyncio.run, args=(serve(),))
    server.start()
    server.join(60)
    assert not server.is_alive()
    return sent


def test_a_plain_async_views_permit_is_back_before_its_response_is_sent(settings) -> None:
    """With nothing left in the request's thread, the permit goes back as the view returns, as it always has:
    before the client has its answer (one more request, at once, finds it free)."""
    declare(settings)
    assert _served("/surface/guarded-async/", on_start=used) == [(200, 0)]


def test_a_guarded_async_view_run_from_the_requests_own_thread_does_not_wait_for_that_thread(settings) -> None:
    """A sync view, in the request's thread, runs a guarded async view through ``async_to_sync``: that thread
    waits for the view, so the guard must not wait for it (asgiref runs the view's own sync work there, as
    its ``CurrentThreadExecutor``)."""
    declare(settings)
    assert _served("/surface/calls-a-guarded-async-view/", on_start=used) == [(200, 0)]


def test_a_view_whose_requests_thread_is_gone_gives_its_permit_back_at_once(settings) -> None:
    """The request's thread shut down (a task that outlived its request): nothing to wait for."""
    declare(settings)

    async def scenario() -> int:
        async with ThreadSensitiveContext():
            await sync_to_async(threading.get_ident)()  # the request's thread is made
            executor = SyncToAsync.context_to_thread_executor[SyncToAsync.thread_sensitive_context.get()]
            executor.shutdown()
            response = await views.guarded_async(RequestFactory().get("/surface/guarded-async/"))
        return response.status_code

    assert asyncio.run(scenario()) == 200
    assert used() == 0


def test_the_thread_the_guard_waits_for_is_the_one_asgiref_runs_the_requests_sync_work_on() -> None:
    """The guard finds the request's thread in asgiref's own records (not public API): this fails if they change."""

    async def scenario() -> tuple[int, int | None]:
        async with ThreadSensitiveContext():
            theirs = await sync_to_async(threading.get_ident)()
            executor = requests_thread()
            ours = None if executor is None else executor.submit(threading.get_ident).result(10)
        return theirs, ours

    theirs, ours = asyncio.run(scenario())
    assert ours == theirs


def test_a_wait_whose_hop_the_executor_cancels_ends_without_cancelling_the_request() -> None:
    """An executor shut down with ``cancel_futures`` while the guard's hop waits behind work drops that hop: the
    guard goes on to give the permit back; the request is not cancelled."""

    async def scenario() -> bool:
        async with ThreadSensitiveContext():
            may_go_on = threading.Event()
            working = asyncio.ensure_future(sync_to_async(may_go_on.wait)())
            await asyncio.sleep(0)
            executor = requests_thread()
            assert executor is not None
            waiting = asyncio.ensure_future(after_the_requests_thread())
            await asyncio.sleep(0.1)
            executor.shutdown(wait=False, cancel_futures=True)
            try:
                await asyncio.wait_for(asyncio.shield(waiting), timeout=10)
            finally:
                may_go_on.set()
                await working
            return waiting.cancelled()

    assert asyncio.run(scenario()) is False
