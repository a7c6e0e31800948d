"""Django's cache framework around guarded responses, and a response that fails after its view.

The per-site cache (``UpdateCacheMiddleware`` first, ``FetchFromCacheMiddleware``
last, as Django documents it) and ``cache_page`` pickle the response they
store: nothing a guard attaches to a response may break that, and the copy a
cache serves later is not the request that held the permit, so closing it
gives nothing back and a hit never asks for a permit it does not pass a guard
for. The alias ``"pages"`` is LocMemCache or django-redis (on the session's
server), each test once with each.

A response that fails after its view (a later middleware raising, a cache that
cannot pickle it, a server refusing it) is dropped and never closed; Django's
own error handling keeps it in reference cycles (an error page's missing
template, the traceback of the exception). Its permits must still come back at
once: these tests run with the cyclic garbage collector off.
"""

from __future__ import annotations

import asyncio
import copy
import gc
import json
import pickle
import socket
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.core.handlers.asgi import ASGIHandler
from django.core.handlers.wsgi import WSGIHandler
from django.test import AsyncClient, Client, RequestFactory

from benchmarks.runtime import http_scope
from django_semaphore import get_semaphore, signals
from django_semaphore.testing import RedisServer

from ..support import cache_views, views
from ..support.guards import MIDDLEWARE, declare, hold, used
from ..support.polling import wait_until
from ..support.recorded import recorded
from ..support.uvicorn import Uvicorn

# Closing a response sends request_finished, whose receiver looks at the database connection.
pytestmark = pytest.mark.django_db

UPDATE = "django.middleware.cache.UpdateCacheMiddleware"
FETCH = "django.middleware.cache.FetchFromCacheMiddleware"
BREAKS = "tests.support.cache_views.BreaksAfterTheView"
# A permit given back from the background thread is back within this; one pinned by a cycle never is.
PROMPTLY = 5.0


@pytest.fixture(params=["locmem", "django-redis"])
def pages(request: pytest.FixtureRequest, settings, redis_server, key_prefix: str) -> str:
    """The cache the pages go to, fresh for this test."""
    if request.param == "locmem":
        backend = {"BACKEND": "django.core.cache.backends.locmem.LocMemCache", "LOCATION": key_prefix}
    else:
        backend = {"BACKEND": "django_redis.cache.RedisCache", "LOCATION": redis_server.url, "KEY_PREFIX": key_prefix}
    settings.CACHES = {**settings.CACHES, cache_views.PAGES: backend}
    settings.CACHE_MIDDLEWARE_ALIAS = cache_views.PAGES
    settings.CACHE_MIDDLEWARE_SECONDS = 60
    return request.param


@pytest.fixture
def no_cyclic_gc() -> Iterator[None]:
    """The cyclic garbage collector off: what only it would free stays (a permit with it)."""
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def per_site_cache(settings: Any, *inner: str, after_fetch: tuple[str, ...] = ()) -> None:
    """Django's documented order: the update first, the fetch last (``inner`` before it, ``after_fetch`` behind)."""
    settings.MIDDLEWARE = [UPDATE, *settings.MIDDLEWARE, *inner, FETCH, *after_fetch]


def guarded_by_rule(settings: Any, path: str) -> None:
    settings.SEMAPHORE_MIDDLEWARE_RULES = [{"semaphore": "guarded", "path": path}]


def holders() -> list[str]:
    return [holder.token for holder in get_semaphore("guarded").status().holders]


# -- the per-site cache and cache_page store a guarded response ------------------------------------------


def test_the_per_site_cache_stores_a_decorated_views_response_and_a_hit_takes_no_permit(
    pages: str, settings, client: Client
) -> None:
    declare(settings)
    per_site_cache(settings)
    first = client.get("/surface/guarded/")
    assert first.status_code == 200 and first.json()["used"] == 1
    assert used() == 0
    other = hold()  # the limit is full: a request that reached the guard would be answered 503
    hit = client.get("/surface/guarded/")
    assert hit.status_code == 200 and hit.content == first.content
    assert holders() == [other.token]  # the hit neither took a permit nor gave one back
    other.release()


@pytest.mark.parametrize("guard", ["decorator", "middleware after the fetch"])
def test_a_hit_never_reaches_redis_even_when_redis_is_gone(pages: str, settings, client: Client, guard: str) -> None:
    declare(settings, guarded={"on_error": "deny"})
    if guard == "decorator":
        per_site_cache(settings)
        path = "/surface/guarded/"
    else:
        per_site_cache(settings, after_fetch=(MIDDLEWARE,))
        guarded_by_rule(settings, r"^/surface/plain/$")
        path = "/surface/plain/"
    assert client.get(path).status_code == 200
    settings.SEMAPHORE_CONNECTION = f"redis://127.0.0.1:{_closed_port()}/0"  # nothing listens there
    with recorded(signals.semaphore_backend_error) as errors:
        assert client.get(path).status_code == 200
    assert errors == []
    with recorded(signals.semaphore_backend_error) as errors:
        assert client.get(f"{path}?another").status_code == 503  # a miss reaches the guard: on_error="deny"
    assert len(errors) == 1


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_the_per_site_cache_stores_a_middleware_guarded_response_behind_the_fetch(
    pages: str, settings, client: Client
) -> None:
    """The middleware after FetchFromCacheMiddleware: a hit is answered before any rule is looked at."""
    declare(settings)
    per_site_cache(settings, after_fetch=(MIDDLEWARE,))
    guarded_by_rule(settings, r"^/surface/plain/$")
    first = client.get("/surface/plain/")
    assert first.status_code == 200 and first.json()["used"] == 1
    assert used() == 0
    other = hold()
    hit = client.get("/surface/plain/")
    assert hit.status_code == 200 and hit.content == first.content
    assert holders() == [other.token]
    other.release()


def test_with_the_middleware_before_the_fetch_a_hit_costs_a_permit_while_it_is_sent(
    pages: str, settings, client: Client
) -> None:
    """The middleware before FetchFromCacheMiddleware (last, as Django asks): every request passes the guard."""
    declare(settings)
    per_site_cache(settings, MIDDLEWARE)
    guarded_by_rule(settings, r"^/surface/plain/$")
    first = client.get("/surface/plain/")
    assert first.status_code == 200 and used() == 0
    hit = client.get("/surface/plain/")
    assert hit.status_code == 200 and hit.content == first.content and used() == 0
    other = hold()
    assert client.get("/surface/plain/").status_code == 503  # full: the guard answers before the cache is read
    other.release()


def test_cache_page_outside_the_decorator_stores_the_response_and_a_hit_takes_no_permit(
    pages: str, settings, client: Client
) -> None:
    declare(settings)
    first = client.get("/surface/cached/")
    assert first.status_code == 200 and first.json()["used"] == 1
    assert used() == 0
    other = hold()
    hit = client.get("/surface/cached/")
    assert hit.status_code == 200 and hit.content == first.content
    assert holders() == [other.token]
    other.release()


def test_cache_page_outside_an_async_view_stores_the_response_and_a_hit_takes_no_permit(pages: str, settings) -> None:
    declare(settings)

    async def scenario() -> None:
        client = AsyncClient()
        first = await client.get("/surface/cached-async/")
        assert first.status_code == 200 and first.json()["used"] == 1
        assert used() == 0
        other = hold()
        hit = await client.get("/surface/cached-async/")
        assert hit.status_code == 200 and hit.content == first.content
        assert holders() == [other.token]
        other.release()

    asyncio.run(scenario())


def test_the_per_site_cache_under_asgi_with_the_middleware_stores_the_response(pages: str, settings) -> None:
    declare(settings)
    per_site_cache(settings, after_fetch=(MIDDLEWARE,))
    guarded_by_rule(settings, r"^/surface/plain-async/$")

    async def scenario() -> None:
        client = AsyncClient()
        first = await client.get("/surface/plain-async/")
        assert first.status_code == 200 and first.json()["used"] == 1
        other = hold()
        hit = await client.get("/surface/plain-async/")
        assert hit.status_code == 200 and hit.content == first.content
        assert holders() == [other.token]
        other.release()

    asyncio.run(scenario())


def test_the_decorator_outside_cache_page_takes_a_permit_for_every_request(
    pages: str, settings, client: Client
) -> None:
    declare(settings)
    first = client.get("/surface/guard-outside-the-cache/")
    assert first.status_code == 200 and used() == 0
    other = hold()
    assert client.get("/surface/guard-outside-the-cache/").status_code == 503  # the guard runs before the cache
    other.release()
    hit = client.get("/surface/guard-outside-the-cache/")
    assert hit.status_code == 200 and hit.content == first.content and used() == 0


def test_the_per_site_cache_stores_a_template_response_rendered_inside_the_permit(
    pages: str, settings, client: Client
) -> None:
    declare(settings)
    per_site_cache(settings)
    first = client.get("/surface/template/")
    assert first.status_code == 200 and first.content == b"<p>/surface/template/</p>"
    assert used() == 0
    other = hold()
    hit = client.get("/surface/template/")
    assert hit.status_code == 200 and hit.content == first.content
    assert holders() == [other.token]
    other.release()


@pytest.mark.parametrize("path", ["/surface/counted-template/", "/surface/counted-template-async/"])
def test_a_template_response_is_rendered_inside_its_permit_and_stored_so(pages: str, settings, path: str) -> None:
    """Django's handler renders it after the view returned: the template's work (its lazy queries) is the
    view's, under the limit, sync views and async ones alike; the copy stored is the one rendered then."""
    declare(settings)
    per_site_cache(settings)

    async def get() -> Any:
        return await AsyncClient().get(path)

    first = asyncio.run(get()) if path.endswith("-async/") else Client().get(path)
    assert first.status_code == 200 and first.content == b"1"  # the permit was held while it rendered
    assert used() == 0
    other = hold()
    hit = Client().get(path)
    assert hit.status_code == 200 and hit.content == b"1" and holders() == [other.token]
    other.release()


# -- a copy from the cache is not the request that held the permit -------------------------------------


def test_a_pickled_copy_of_a_guarded_response_gives_nothing_back_when_closed(settings) -> None:
    declare(settings)
    response = views.guarded(RequestFactory().get("/surface/guarded/"))
    assert used() == 1
    for served in (pickle.loads(pickle.dumps(response)), copy.deepcopy(response)):
        served.close()
        assert used() == 1  # the original has not been sent yet
    response.close()
    assert used() == 0


def _environ(path: str) -> dict[str, Any]:
    return RequestFactory().get(path).environ


def _served(handler: WSGIHandler, path: str) -> Any:
    """What a WSGI server holds while it sends a response: the iterable Django returned, not closed yet."""
    seen: list[str] = []
    response = handler(_environ(path), lambda status, headers: seen.append(status))
    assert seen == ["200 OK"], seen
    return response


def test_a_copy_served_from_the_cache_while_the_original_is_still_sent_leaves_the_originals_permit_held(
    pages: str, settings
) -> None:
    declare(settings)
    per_site_cache(settings)
    handler = WSGIHandler()
    original = _served(handler, "/surface/guarded/")  # stored in the cache; its client is still reading it
    assert used() == 1
    hit = _served(handler, "/surface/guarded/")
    assert b"".join(hit) == b"".join(original)
    hit.close()
    assert used() == 1  # the copy's close gave nothing back: the original still holds it
    original.close()
    assert used() == 0


def test_a_stream_is_never_stored_so_a_request_while_it_is_sent_meets_the_guard(pages: str, settings) -> None:
    """Limit 1: while the first stream is being sent, the same URL is a miss, and the guard answers it 503."""
    declare(settings)
    per_site_cache(settings)
    handler = WSGIHandler()
    first = _served(handler, "/surface/stream/")
    body = iter(first)
    assert next(body) == b"one "
    statuses: list[str] = []
    handler(_environ("/surface/stream/"), lambda status, headers: statuses.append(status)).close()
    assert statuses == ["503 Service Unavailable"] and used() == 1
    assert b"".join(body) == b"two three"
    first.close()
    assert used() == 0
    again = _served(handler, "/surface/stream/")
    assert used() == 1  # not a copy from the cache: a request that holds the permit while it streams
    assert b"".join(again) == b"one two three"
    again.close()
    assert used() == 0


# -- a response that fails after its view gives its permits back at once, with no cyclic GC --------------


@pytest.mark.parametrize("path", ["/surface/guarded/", "/surface/stream/"])
def test_a_decorated_response_a_later_middleware_breaks_gives_its_permit_back_at_once(
    settings, no_cyclic_gc: None, path: str
) -> None:
    declare(settings)
    settings.MIDDLEWARE = [BREAKS, *settings.MIDDLEWARE]
    client = Client(raise_request_exception=False)
    assert client.get(path, headers={"X-Break": "error"}).status_code == 500
    wait_until(lambda: used() == 0, timeout=PROMPTLY)


@pytest.mark.parametrize("path", ["/surface/plain/", "/surface/unguarded-stream/"])
def test_a_middleware_guarded_response_a_later_middleware_breaks_gives_its_permit_back_at_once(
    settings, no_cyclic_gc: None, path: str
) -> None:
    declare(settings)
    settings.MIDDLEWARE = [BREAKS, *settings.MIDDLEWARE, MIDDLEWARE]
    guarded_by_rule(settings, f"^{path}$")
    client = Client(raise_request_exception=False)
    assert client.get(path, headers={"X-Break": "error"}).status_code == 500
    wait_until(lambda: used() == 0, timeout=PROMPTLY)


@pytest.mark.parametrize("path", ["/surface/guarded/", "/surface/stream/"])
def test_a_response_a_later_middleware_refuses_with_a_403_gives_its_permit_back_at_once(
    settings, no_cyclic_gc: None, path: str
) -> None:
    """No ``got_request_exception`` for a 403: the end of the request (the 403 closed by the server) frees it."""
    declare(settings)
    settings.MIDDLEWARE = [BREAKS, *settings.MIDDLEWARE]
    environ = {**_environ(path), "HTTP_X_BREAK": "denied"}
    statuses: list[str] = []
    refused = WSGIHandler()(environ, lambda status, headers: statuses.append(status))
    assert statuses == ["403 Forbidden"]
    b"".join(refused)
    refused.close()
    wait_until(lambda: used() == 0, timeout=PROMPTLY)


@pytest.mark.filterwarnings("ignore:StreamingHttpResponse must consume synchronous iterators")
@pytest.mark.parametrize("path", ["/surface/guarded/", "/surface/stream/", "/surface/stream-async/"])
def test_under_asgi_a_response_a_later_middleware_refuses_with_a_403_gives_its_permit_back_at_once(
    settings, no_cyclic_gc: None, path: str
) -> None:
    declare(settings)
    settings.MIDDLEWARE = [BREAKS, *settings.MIDDLEWARE]
    sent = asyncio.run(_asgi(ASGIHandler(), path, [(b"x-break", b"denied")]))
    assert sent[0]["status"] == 403
    wait_until(lambda: used() == 0, timeout=PROMPTLY)


@pytest.mark.parametrize("path", ["/surface/stream-async/", "/surface/page-async/"])
def test_an_async_views_response_a_later_middleware_breaks_gives_its_permit_back_at_once(
    settings, no_cyclic_gc: None, path: str
) -> None:
    declare(settings)
    settings.MIDDLEWARE = [BREAKS, *settings.MIDDLEWARE]

    async def get() -> int:
        response = await AsyncClient(raise_request_exception=False).get(path, headers={"X-Break": "error"})
        return response.status_code

    assert asyncio.run(get()) == 500
    wait_until(lambda: used() == 0, timeout=PROMPTLY)


def test_a_template_response_whose_rendering_fails_after_the_view_gives_its_permit_back_at_once(
    settings, no_cyclic_gc: None
) -> None:
    """Django's handler renders it after the view returned, and the rendering raises: a 500 of the handler's."""
    declare(settings)
    client = Client(raise_request_exception=False)
    assert client.get("/surface/broken-template/").status_code == 500
    wait_until(lambda: used() == 0, timeout=PROMPTLY)


@pytest.mark.parametrize("path", ["/surface/guarded/", "/surface/stream/"])
def test_a_response_a_later_middleware_replaces_gives_its_permit_back_when_the_request_ends(
    settings, no_cyclic_gc: None, path: str
) -> None:
    """Replaced, never closed, and (a stream) kept in a reference cycle of its content: the request's end frees it."""
    declare(settings)
    settings.MIDDLEWARE = [BREAKS, *settings.MIDDLEWARE]
    assert Client().get(path, headers={"X-Break": "replaced"}).content == b"another answer"
    wait_until(lambda: used() == 0, timeout=PROMPTLY)


def test_a_response_the_cache_cannot_pickle_gives_its_permit_back_at_once(
    pages: str, settings, no_cyclic_gc: None
) -> None:
    """Unpicklable for its own reasons (not the guard's): Django answers 500, and the permit is back."""
    declare(settings)
    per_site_cache(settings)
    client = Client(raise_request_exception=False)
    assert client.get("/surface/unpicklable/").status_code == 500
    wait_until(lambda: used() == 0, timeout=PROMPTLY)


def test_a_response_the_wsgi_server_refuses_gives_its_permit_back_at_once(settings, no_cyclic_gc: None) -> None:
    """The server's ``start_response`` raises (gunicorn's does for a header name it will not send)."""
    declare(settings)

    def start_response(status: str, headers: list[tuple[str, str]]) -> None:
        raise ValueError("the server refused the response's headers")

    try:
        WSGIHandler()(_environ("/surface/guarded/"), start_response)
    except ValueError:
        pass
    else:
        pytest.fail("the server's error did not come through Django's handler")
    wait_until(lambda: used() == 0, timeout=PROMPTLY)


async def _asgi(
    handler: ASGIHandler, path: str, headers: list[tuple[bytes, bytes]], refused: str | None = None
) -> list[dict[str, Any]]:
    """What the server is sent for one request, served to the end.

    ``refused``: the type of message the server's ``send`` raises for (as
    h11 does for a header name it will not send).
    """
    scope = http_scope(path)
    scope["headers"] = [*scope["headers"], *headers]
    received = [{"type": "http.request", "body": b"", "more_body": False}]
    done = asyncio.Event()
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        if received:
            return received.pop()
        await done.wait()
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == refused:
            raise OSError(f"the server refused {refused}")
        sent.append(message)

    await handler(scope, receive, send)
    done.set()
    return sent


async def _asgi_failing(path: str, refused: str | None = None) -> list[dict[str, Any]]:
    """``_asgi``, where Django's handler raises to the server (which logs it and drops the connection)."""
    with pytest.raises(Exception) as raised:
        await _asgi(ASGIHandler(), path, [], refused)
    return [{"raised": raised.value}]


@pytest.mark.filterwarnings("ignore:StreamingHttpResponse must consume synchronous iterators")
@pytest.mark.parametrize("path", ["/surface/guarded/", "/surface/stream/", "/surface/stream-async/"])
def test_a_response_whose_client_leaves_while_it_is_sent_under_asgi_gives_its_permit_back_at_once(
    settings, no_cyclic_gc: None, path: str
) -> None:
    """The client goes as the response starts (uvicorn then drops what is sent; Django cancels the sending)."""
    declare(settings)
    handler = ASGIHandler()

    async def serve() -> None:
        received = [{"type": "http.request", "body": b"", "more_body": False}]
        started, forever = asyncio.Event(), asyncio.Event()

        async def receive() -> dict[str, Any]:
            if received:
                return received.pop()
            await started.wait()
            return {"type": "http.disconnect"}

        async def send(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                started.set()
            else:
                await forever.wait()  # a client that reads nothing more

        await handler(http_scope(path), receive, send)

    asyncio.run(serve())
    wait_until(lambda: used() == 0, timeout=PROMPTLY)


@pytest.mark.filterwarnings("ignore:StreamingHttpResponse must consume synchronous iterators")
@pytest.mark.parametrize("path", ["/surface/broken-stream/", "/surface/broken-stream-async/"])
def test_under_asgi_a_stream_whose_body_raises_gives_its_permit_back_at_once(
    settings, no_cyclic_gc: None, path: str
) -> None:
    """Django's ASGI handler lets the error out to the server and never closes the response.

    The error's traceback and the handler's tasks make a reference cycle that
    keeps the response: only the end of its body can free the permit.
    """
    declare(settings)
    asyncio.run(_asgi_failing(path))
    wait_until(lambda: used() == 0, timeout=PROMPTLY)


@pytest.mark.filterwarnings("ignore:StreamingHttpResponse must consume synchronous iterators")
@pytest.mark.parametrize("refused", ["http.response.start", "http.response.body"])
@pytest.mark.parametrize(
    "path", ["/surface/guarded/", "/surface/template/", "/surface/stream/", "/surface/stream-async/"]
)
def test_under_asgi_a_response_the_server_refuses_gives_its_permit_back_at_once(
    settings, no_cyclic_gc: None, path: str, refused: str
) -> None:
    """The ASGI server's ``send`` raises (h11 does for a header name it will not send): never closed, as above."""
    declare(settings)
    asyncio.run(_asgi_failing(path, refused))
    wait_until(lambda: used() == 0, timeout=PROMPTLY)


@pytest.mark.parametrize("guard", ["decorator", "middleware in sync mode"])
def test_under_asgi_a_response_django_cannot_send_gives_its_permit_back_at_once(
    settings, no_cyclic_gc: None, guard: str
) -> None:
    """A cookie value Django's ASGI handler cannot encode (a client's search echoed into it): it raises sending.

    Anonymous clients could otherwise pin a permit per request, renewed until a cyclic collection.
    """
    declare(settings)
    path = "/surface/unsendable-cookie/"
    if guard != "decorator":
        path = "/surface/plain/"
        # A sync-only middleware behind it runs the middleware's sync path, in a thread: the decorator's case.
        settings.MIDDLEWARE = [*settings.MIDDLEWARE, MIDDLEWARE, "tests.support.cache_views.SetsACookie"]
        guarded_by_rule(settings, f"^{path}$")
    asyncio.run(_asgi_failing(path))
    wait_until(lambda: used() == 0, timeout=PROMPTLY)


@pytest.mark.processes
def test_under_a_real_uvicorn_a_response_django_cannot_send_gives_its_permit_back_at_once(
    settings, redis_server: RedisServer, key_prefix: str
) -> None:
    """Through a real server (uvicorn runs each request in a task of its own, which goes on after the error):
    a cookie Django cannot encode, three times on a limit of 1, the collector off in the server."""
    declare(settings)
    env = {
        "DJANGO_SETTINGS_MODULE": "tests.support.surface_asgi_settings",
        "REDIS_URL": redis_server.url,
        "SEMAPHORE_KEY_PREFIX": key_prefix,
    }
    with Uvicorn("tests.support.surface_asgi:application", env=env) as server:
        for _ in range(3):
            with pytest.raises(urllib.error.HTTPError) as answered:
                urllib.request.urlopen(f"{server.base_url}/surface/unsendable-cookie/", timeout=60)
            assert answered.value.code == 500  # uvicorn's own answer to an application that raised
            wait_until(lambda: used() == 0, timeout=PROMPTLY)


@pytest.mark.parametrize("path", ["/surface/streaming/", "/surface/streaming-async/"])
def test_a_stream_the_async_client_fetched_in_a_task_of_its_own_keeps_its_permit_until_it_is_read(
    settings, path: str
) -> None:
    """``asyncio.gather`` of ``AsyncClient`` requests, as a test of concurrency does: each runs in a task that
    ends with the response in hand, its stream still to be read (and closed, by the client's wrapper). That
    task is not a server's: under Django 6 too, the stream holds its permit until it has been read."""
    declare(settings)

    async def scenario() -> None:
        client = AsyncClient()
        (response,) = await asyncio.gather(client.get(path))
        for _ in range(3):  # the task's done callbacks have run
            await asyncio.sleep(0)
        assert response.status_code == 200
        assert not response.asgi_request.semaphore.released and used() == 1
        content = response.streaming_content
        if hasattr(content, "__aiter__"):
            assert b"".join([part async for part in content]) == b"one two three"
        else:
            assert b"".join(content) == b"one two three"

    asyncio.run(scenario())
    wait_until(lambda: used() == 0, PROMPTLY)


def test_the_request_is_still_closed_as_django_closes_it(settings, client: Client) -> None:
    """The guard hears the end of the request through its ``close()``, which closes the uploaded files."""
    declare(settings)
    cache_views.uploads.clear()
    upload = SimpleUploadedFile("report.csv", b"a,b\n" * 10)
    assert client.post("/surface/upload/", {"report": upload}).content == b"stored"
    (stored,) = cache_views.uploads
    assert stored.closed and used() == 0  # type: ignore[attr-defined]


# -- a waiting room's ticket is never stored in a cache ------------------------------------------------------


def test_a_waiting_rooms_answer_is_never_cached_with_its_visitors_ticket(pages: str, settings) -> None:
    settings.ROOT_URLCONF = "tests.support.room_site"
    settings.SEMAPHORES = {**settings.SEMAPHORES, "room": {"limit": 1, "lease": 30, "waiting_room": {"refresh": 1.5}}}
    # No sessions: nothing else (the room's look at request.user, through the session) makes it vary on Cookie.
    settings.MIDDLEWARE = ["django.middleware.common.CommonMiddleware"]
    per_site_cache(settings)
    first = Client().get("/room/")
    assert first.status_code == 200 and first.json()["inside"]
    another = Client().get("/room/", HTTP_ACCEPT="application/json")
    # A stored copy would let the second browser in as the first, with the first's ticket.
    assert another.status_code == 503, another.content[:200]
    assert another.cookies["semaphore_room_room"].value != first.cookies["semaphore_room_room"].value
    assert json.loads(another.content)["position"] == 1
