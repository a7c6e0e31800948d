"""A guarded request's permits held until its response is complete, and given back on every way out.

On the sync path a response is complete when the server has sent it and
closed it (``hold_until_closed``): the release is then sent without waiting
for its answer (``Permit.post_release``), after the client has its response,
and the worker goes on to its next request at once. A streaming response is sent while
its content runs, so it holds its permits until then too. On the asyncio path
a plain response is complete when the view returns and the request's thread
has ended the sync work the view handed it (``after_the_requests_thread``:
work the view gave up on runs on); its release is then awaited on the loop. A
stream, or a template response Django's handler renders after the view, keeps
them until closed. Whatever raises on the way (a view, a key function, a
signal receiver, a cancellation) gives back what was taken
(``ReleasedOnError``), on the asyncio path also after the request's thread.

A response can be lost after its view, never to be closed: a later
middleware raised, a cache could not store it, the server refused it, a
middleware replaced it. Its permits go back at once, whichever of these comes
first (``Hold.lost``): Django's ``got_request_exception`` for the request, the
end of the request (the close of the response Django's handler sent), the
response's drop. None of them waits for the cyclic garbage collector, in
whose reach Django's error handling often leaves a lost response. A cache that
stores the response keeps a copy that holds nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import weakref
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable, Iterable, Iterator, Sequence
from concurrent.futures import Executor
from types import TracebackType
from typing import cast

import django
from asgiref.sync import AsyncToSync, SyncToAsync
from django.core.handlers.asgi import ASGIHandler
from django.core.signals import got_request_exception
from django.http import HttpRequest, HttpResponseBase, StreamingHttpResponse

from ..core.connection import OnExit
from ..core.permit import Permit
from ..core.renewal import renewer
from .admission import Admission
from .visits import dress

logger = logging.getLogger("django_semaphore.requests")


class ReleasedOnError(OnExit):
    """Whatever raises inside it (a view, a key function, a signal receiver, a cancellation) runs ``release``.

    Once a permit is granted, only the code that took it holds a reference
    that could give it back; an exception that skipped the release would
    leave the permit held until its lease ends. It runs on every guarded request.
    """

    __slots__ = ("release",)

    def __init__(self, release: Callable[[], object]) -> None:
        self.release = release

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        if kind is not None:
            self.release()


class AReleasedOnError:
    """``ReleasedOnError`` for async code: ``release`` returns an awaitable.

    An async view can leave sync work running in the request's thread: the
    event loop stops waiting for its ``sync_to_async`` call, whose thread runs
    on to its end, when Django's ASGI handler cancels a request whose client
    left, or when the view gives that work up itself (``asyncio.wait_for``)
    and raises. Given back then, the permit would let the next request in
    beside that work, and a client that leaves at once could start as much of
    it as it likes. So an error's release waits for the work queued in that
    thread (``after_the_requests_thread``). A cancellation cannot wait: on a
    cancellation ``release_in_thread`` (a sync release) runs in the request's
    own thread, after that work (``_after_the_requests_thread``); with nothing
    running there, or none given, ``release`` runs at once. That release is
    posted (sent without waiting for Redis's answer): with asgiref before 3.12
    the event loop waits for the request's thread as the request ends, and
    must not wait for a hung Redis too.
    """

    __slots__ = ("release", "release_in_thread")

    def __init__(
        self, release: Callable[[], Awaitable[object]], release_in_thread: Callable[[], object] | None = None
    ) -> None:
        self.release = release
        self.release_in_thread = release_in_thread

    async def __aenter__(self) -> None:
        return None

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        if kind is None:
            return
        if not issubclass(kind, asyncio.CancelledError):
            try:
                await after_the_requests_thread()
            except BaseException:  # cancelled while it waited: the work may still run
                await self._cancelled()
                raise
            await self.release()
            return
        await self._cancelled()

    async def _cancelled(self) -> None:
        """After the request's thread without waiting for it (``release_in_thread``); else ``release`` now."""
        later = self.release_in_thread
        if later is None or not _after_the_requests_thread(later):
            await self.release()


def requests_thread() -> Executor | None:
    """The executor whose thread runs this request's thread-sensitive sync work; None outside one.

    The one asgiref's ``sync_to_async`` (``thread_sensitive``, its default)
    picks: under ``async_to_sync`` (an async view under WSGI, a sync view's
    call into async code) the thread that called it, which waits meanwhile;
    else, under Django's ASGI handler, the thread of the request's
    ``ThreadSensitiveContext``, which runs a sync view, the middleware's sync
    hooks and an async view's ``sync_to_async`` calls in turn. Both are
    asgiref's own records (not public API, the same since asgiref 3.3); the
    handler waits for that thread before the request ends. Work an async view
    hands to another thread (``thread_sensitive=False``) is not waited for.
    """
    calling = getattr(AsyncToSync.executors, "current", None)
    if calling is not None:
        return cast(Executor, calling)
    context = SyncToAsync.thread_sensitive_context.get(None)
    return None if context is None else SyncToAsync.context_to_thread_executor.get(context)


async def after_the_requests_thread() -> None:
    """Return once the request's thread has run what was queued there so far (work a view gave up on included).

    One hop through that thread (nothing public tells whether it is busy);
    none when there is no such thread, or it has shut down (the request is
    over, and its thread's work with it). A cancellation is not waited out:
    the caller's cancellation path takes over. Woken by the hop's callback,
    not by awaiting it: a hop the executor cancels (shut down with
    ``cancel_futures``) must not read as a cancellation of this task.
    """
    executor = requests_thread()
    if executor is None:
        return
    loop = asyncio.get_running_loop()
    woken: asyncio.Future[None] = loop.create_future()
    try:
        hop = executor.submit(_nothing)
    except RuntimeError:
        return
    hop.add_done_callback(lambda _: _wake(loop, woken))
    await woken


def _nothing() -> None:
    return None


def _wake(loop: asyncio.AbstractEventLoop, woken: asyncio.Future[None]) -> None:
    """On the request's thread: wake the waiting task."""
    with contextlib.suppress(RuntimeError):  # its loop closed meanwhile: nobody waits any more
        loop.call_soon_threadsafe(_set, woken)


def _set(woken: asyncio.Future[None]) -> None:
    if not woken.done():  # cancelled meanwhile
        woken.set_result(None)


def _after_the_requests_thread(release: Callable[[], object]) -> bool:
    """Queue ``release`` behind the work of this request's thread (``requests_thread``); False if it has none."""
    executor = requests_thread()
    if executor is None:
        return False
    try:
        executor.submit(_logged, release)
    except RuntimeError:  # shut down: the request is over, and its thread's work with it
        return False
    return True


def _logged(release: Callable[[], object]) -> None:
    try:
        release()
    except Exception:  # nobody waits for this thread's result: say it here
        logger.exception("Giving back the permits of a request whose client left failed.")


def release_all(admissions: Sequence[Admission], *, posted: bool = False) -> None:
    """Release in reverse order of acquisition (``posted``: without waiting for Redis's answers)."""
    for admission in reversed(admissions):
        admission.release(posted=posted)


async def arelease_all(admissions: Sequence[Admission]) -> None:
    for admission in reversed(admissions):
        await admission.arelease()


def finish(request: HttpRequest, response: HttpResponseBase, admissions: Sequence[Admission]) -> HttpResponseBase:
    """Release when the server has sent the response and closed it (a response lost on the way: then).

    A room's ticket goes on the response first. Anything but a response (a
    view that returned None, which Django turns into an error) has nothing a
    server would close: released now.
    """
    if not isinstance(response, HttpResponseBase):
        release_all(admissions)
        return response
    _dressed(response, admissions)
    return hold_until_closed(request, response, admissions)


async def afinish(
    request: HttpRequest, response: HttpResponseBase, admissions: Sequence[Admission]
) -> HttpResponseBase:
    """Release on the loop once the request's thread has ended the work the view gave it (work it gave up on,
    too); a stream, or a template response Django's handler has still to render (its lazy queries are the
    view's work), is held until closed as on the sync path (Django closes a response in the request's thread).
    """
    _dressed(response, admissions)
    if getattr(response, "streaming", False) or _unrendered(response):
        return hold_until_closed(request, response, admissions)
    await after_the_requests_thread()
    await arelease_all(admissions)
    return response


def _unrendered(response: HttpResponseBase) -> bool:
    return not getattr(response, "is_rendered", True) and callable(getattr(response, "render", None))


def _dressed(response: HttpResponseBase, admissions: Sequence[Admission]) -> None:
    """Room visits put their tickets on the response (web/visits.py); nothing to do for other semaphores."""
    if isinstance(response, HttpResponseBase) and any(admission.room is not None for admission in admissions):
        dress(response, [admission.room for admission in admissions])


def _lost(permits: Sequence[Permit]) -> Permit | None:
    return next((permit for permit in permits if permit.lost), None)


class Hold:
    """A guarded response's admissions, given back once: when the response is closed, or as soon as it is lost.

    It is one of the closers Django's ``close()`` runs (not a wrapper of
    ``close()``: a wrapper holding the bound method would be a reference
    cycle). A response can also be lost on its way to the server, never to be
    closed: a later middleware raised, a cache could not pickle it, the
    server refused it, a middleware replaced it. ``lost()`` then gives the
    permits back at once, from the request's failure or its end
    (``_RequestHolds``) or from the response's drop, whichever comes first;
    never twice, and never while a stream's body may still be sent: a stream
    dropped half-way while its request goes on stops renewing and lets its
    leases end.

    A cache that stores the response (Django's per-site cache, ``cache_page``)
    pickles it: the copy it serves later holds nothing, so the hold pickles
    as an empty one.
    """

    __slots__ = ("admissions", "ended", "over", "started", "streaming")

    def __init__(self, admissions: Sequence[Admission], streaming: bool) -> None:
        self.admissions = admissions
        self.streaming = streaming
        self.started = self.ended = False  # a stream's body: asked for its first part; done or closed
        self.over = False

    def __call__(self) -> None:
        """The response is sent and closed: give the permits back, in reverse order, without waiting for Redis."""
        if self.over:
            return
        self.over = True
        try:
            release_all(self.admissions, posted=True)
        except Exception:  # Django's close() swallows what its closers raise: say it here
            logger.exception("Giving back a request's permits as its response closed failed.")
            raise

    def lost(self, *, request_over: bool = False) -> None:
        """The response will never be closed: give the permits back from the background (no I/O here).

        It may run anywhere, on any thread (a finaliser, even inside another
        release). A stream whose body was sent in part may still be running
        somewhere, unless its request is over: its permits are then only no
        longer renewed, and their leases end them.
        """
        if self.over:
            return
        self.over = True
        half_sent = self.streaming and self.started and not self.ended and not request_over
        for admission in self.admissions:
            if admission.room is not None:
                admission.room.forget()
            if admission.permit is None or admission.released:
                continue
            if half_sent:
                logger.warning("A response holding %r was never closed; its lease will end it.", admission.permit)
                renewer.forget(admission.permit)
            else:
                admission.release_in_background()

    def cut_short(self) -> None:
        """The stream's body ended before its end: its content raised, or it was closed half-way.

        Nothing more of it will be sent, and the response may never be
        closed: Django's ASGI handler lets the error out to the server
        without closing it, in a reference cycle of the error's traceback.
        """
        self.ended = True
        self.lost(request_over=True)

    def __reduce__(self) -> tuple[type[Hold], tuple[tuple[()], bool]]:
        return (Hold, ((), self.streaming))


def _sent(response: StreamingHttpResponse, hold: Hold) -> Iterable[bytes] | AsyncIterable[bytes]:
    """The stream, noted on ``hold`` as it starts and ends, and cut short once a permit it holds is lost.

    Lost: its max_hold reached, or taken away. A client that stops reading, or
    reads a byte a second, would otherwise keep the permit for as long as the
    server keeps the connection.
    """
    content = response.streaming_content
    permits = [admission.permit for admission in hold.admissions if admission.permit is not None]

    def cut(permit: Permit) -> None:
        logger.warning("Ending a streamed response early: it held %r past its max_hold.", permit)

    if response.is_async:

        async def async_chunks() -> AsyncIterator[bytes]:
            hold.started = True
            try:
                async for chunk in content:  # type: ignore[union-attr]
                    lost = _lost(permits)
                    if lost is not None:
                        cut(lost)
                        return
                    yield chunk
            except BaseException:
                hold.cut_short()
                raise
            finally:
                hold.ended = True

        return async_chunks()

    def chunks() -> Iterator[bytes]:
        hold.started = True
        try:
            for chunk in content:  # type: ignore[union-attr]
                lost = _lost(permits)
                if lost is not None:
                    cut(lost)
                    return
                yield chunk
        except BaseException:
            hold.cut_short()
            raise
        finally:
            hold.ended = True

    return chunks()


def hold_until_closed(
    request: HttpRequest, response: HttpResponseBase, admissions: Sequence[Admission]
) -> HttpResponseBase:
    """Keep the permits until the response has been sent and closed, or is lost on the way.

    Servers call ``response.close()`` when they are done with a response
    (WSGI and ASGI both, and so does the test client): the ``Hold`` among its
    closers releases the permits then, after the client has the response,
    and, for a stream (a ``StreamingHttpResponse``, a ``FileResponse``, which
    does its work while it is sent), after that work. The request keeps the
    hold too (``_RequestHolds``), for when the response is lost on its way.
    """
    held = [admission for admission in admissions if admission.permit is not None or admission.room is not None]
    if not held:
        return response
    hold = Hold(held, streaming=getattr(response, "streaming", False))
    if isinstance(response, StreamingHttpResponse):
        response.streaming_content = _sent(response, hold)
    closers = response._resource_closers  # type: ignore[attr-defined]
    if not isinstance(closers, _Closers):
        closers = response._resource_closers = _Closers(closers, response)  # type: ignore[attr-defined]
    closers.append(hold)
    _RequestHolds.of(request).holds.append(hold)
    weakref.finalize(response, hold.lost)
    return response


class _Closers(list[Callable[[], object]]):
    """A guarded response's closers, which see Django's handler hand the response to the server.

    Django's handler adds the request's ``close()`` (``_RequestHolds``) to the
    closers of the response it is about to send. Under ASGI it does so on the
    event loop, in the task that then sends the response; if that sending
    raises (a cookie it cannot encode, the server's ``send`` refusing a
    header), the error goes out to the server and the response is never
    closed, kept in a reference cycle of the error's traceback and the
    handler's tasks. So the task is watched from then (``_RequestHolds.sent_by``):
    under Django 5.2 it is a task of the handler's own, which the error ends;
    under Django 6 it is the server's task for the request, in which the
    handler also closes the response, and which the server may end well
    after catching the error. Only Django's ASGI handler closes the response
    in that task: a test client's (``AsyncClient``) hands a stream back to its
    caller, who reads and closes it later, maybe in another task.

    A cache stores a plain list (of empty holds).
    """

    __slots__ = ("response",)

    def __init__(self, closers: Iterable[Callable[[], object]], response: HttpResponseBase) -> None:
        super().__init__(closers)
        self.response = weakref.ref(response)  # the response holds its closers: a reference back would be a cycle

    def append(self, closer: Callable[[], object]) -> None:
        super().append(closer)
        if isinstance(closer, _RequestHolds):
            closer.sent_by(_current_task(), self.response)

    def __reduce__(self) -> tuple[type[list[object]], tuple[list[object]]]:
        return (list, (list(self),))


def _current_task() -> asyncio.Task[object] | None:
    """The task running on this thread's event loop; None on a thread without one (WSGI)."""
    try:
        return asyncio.current_task()
    except RuntimeError:
        return None


class _RequestHolds:
    """The holds of one request's guarded responses; what ends them when a response is lost after its view.

    Two moments say so, and neither waits for the response's drop (which a
    lost response's traceback, often in a reference cycle of Django's error
    handling, puts off until the cyclic collector runs):

    - ``got_request_exception``: something raised after a view returned (a
      later middleware, a cache, a template's rendering); Django answers
      with an error page of its own, or lets the server answer;
    - the end of the request: Django's handler adds the request's
      ``close()`` to the closers of the response it sends, and the server
      closes that response once sent. Whatever this request's guards still
      hold then is from a response that was lost without an exception
      Django reports (a 403 or 404 a later middleware raised, a response a
      middleware replaced), and no body of this request is being sent any
      more. The request's ``close`` is this object from the first hold on.
    """

    __slots__ = ("holds", "request", "sent")

    def __init__(self, request: HttpRequest) -> None:
        self.holds: list[Hold] = []
        self.request = weakref.ref(request)  # a reference back would make the request a cycle
        self.sent: weakref.ref[HttpResponseBase] | None = None  # the response a task sends (``sent_by``)

    @classmethod
    def of(cls, request: HttpRequest) -> _RequestHolds:
        """The request's holds (a request that is no Django request, a framework's wrapper, keeps none)."""
        holds = request.__dict__.get("close")
        if isinstance(holds, cls):
            return holds
        holds = cls(request)
        if isinstance(request, HttpRequest):
            request.close = holds  # type: ignore[method-assign]
        return holds

    def __call__(self) -> None:
        """The request's ``close()``: the response the handler sent is closed."""
        try:
            for hold in self.holds:
                hold.lost(request_over=True)
        finally:
            request = self.request()
            if request is not None:
                type(request).close(request)  # what Django's handler meant to run: the request's own

    def failed(self) -> None:
        """Lost: a guard whose response is still to come (the error page) has not handed its hold in yet."""
        for hold in self.holds:
            hold.lost()

    def sent_by(self, task: asyncio.Task[object] | None, response: weakref.ref[HttpResponseBase]) -> None:
        """Under ASGI: ``task`` sends ``response``; ended by an error or a cancellation, it sends nothing more."""
        if task is not None:
            self.sent = response
            task.add_done_callback(self._sending_ended)

    def _sending_ended(self, task: asyncio.Task[object]) -> None:
        # Django 5.2's sending task ended well: its handler closes the response next, and the holds give the
        # permits back then. Django 6's ASGI handler closes it in this task: whatever is still held was never
        # closed. A test client returns the response from this task instead, to be read and closed later.
        if task.cancelled() or task.exception() is not None or self._closed_in_the_sending_task():
            for hold in self.holds:
                hold.lost(request_over=True)

    def _closed_in_the_sending_task(self) -> bool:
        response = None if self.sent is None else self.sent()
        handler = getattr(response, "_handler_class", None)  # set by the handler that sends it (and closes it)
        return _CLOSED_IN_THE_SENDING_TASK and isinstance(handler, type) and issubclass(handler, ASGIHandler)


# Django 6's ASGI handler sends the response and then closes it in one task, the one that runs ``handle``;
# Django 5.2 sends it in a task of its own and closes it afterwards, in the task that made that one.
_CLOSED_IN_THE_SENDING_TASK = django.VERSION >= (6, 0)


def _request_failed(sender: object, request: HttpRequest | None = None, **kwargs: object) -> None:
    holds = None if request is None else request.__dict__.get("close")
    if isinstance(holds, _RequestHolds):
        holds.failed()


got_request_exception.connect(_request_failed, dispatch_uid="django_semaphore.holding")
