"""A guarded request's permits held until its response is complete, and given back on every way out.

On the sync path a response is complete when the server has sent it and
closed it (``hold_until_closed``): the release is then sent without waiting
for its answer (``Permit.post_release``), after the client has its response,
and the worker goes on to its next request at once. A streaming response is sent while
its content runs, so it holds its permits until then too. On the asyncio path
a plain response is complete when the view returns (its release is awaited on
the loop, with no thread hop; a stream keeps them until closed). Whatever
raises on the way (a view, a key function, a signal receiver, a cancellation)
gives back what was taken (``ReleasedOnError``); a response nobody closes
gives them back when it is dropped (a view called directly, a response a
later middleware replaced).
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable, Iterable, Iterator, Sequence
from types import TracebackType

from django.http import HttpResponseBase, StreamingHttpResponse

from ..core.permit import Permit
from ..core.renewal import renewer
from .admission import Admission
from .visits import dress

logger = logging.getLogger("django_semaphore.requests")


class ReleasedOnError:
    """Whatever raises inside it (a view, a key function, a signal receiver, a cancellation) runs ``release``.

    Once a permit is granted, only the code that took it holds a reference
    that could give it back; an exception that skipped the release would
    leave the permit held until its lease ends. A class rather than a
    generator-based context manager: it runs on every guarded request.
    """

    __slots__ = ("release",)

    def __init__(self, release: Callable[[], object]) -> None:
        self.release = release

    def __enter__(self) -> None:
        return None

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        if kind is not None:
            self.release()


class AReleasedOnError:
    """``ReleasedOnError`` for async code: ``release`` returns an awaitable."""

    __slots__ = ("release",)

    def __init__(self, release: Callable[[], Awaitable[object]]) -> None:
        self.release = release

    async def __aenter__(self) -> None:
        return None

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        if kind is not None:
            await self.release()


def release_all(admissions: Sequence[Admission], *, posted: bool = False) -> None:
    """Release in reverse order of acquisition (``posted``: without waiting for Redis's answers)."""
    for admission in reversed(admissions):
        admission.release(posted=posted)


async def arelease_all(admissions: Sequence[Admission]) -> None:
    for admission in reversed(admissions):
        await admission.arelease()


def _abandoned(admissions: Sequence[Admission]) -> None:
    """A streaming response was dropped without being closed: stop renewing, let leases end."""
    for admission in admissions:
        if admission.room is not None:
            admission.room.forget()
        if admission.permit is not None and not admission.released:
            logger.warning("A response holding %r was never closed; its lease will end it.", admission.permit)
            renewer.forget(admission.permit)


def _dropped(admissions: Sequence[Admission]) -> None:
    """A plain response was dropped without being closed: its work is done, give its permits back.

    From the background thread: a finaliser may run anywhere, on any thread
    (even inside another release), and must not do I/O there.
    """
    for admission in admissions:
        if admission.permit is not None and not admission.released:
            admission.release_in_background()


def finish(response: HttpResponseBase, admissions: Sequence[Admission]) -> HttpResponseBase:
    """Release when the server has sent the response and closed it (a dropped plain response: then).

    A room's ticket goes on the response first. Anything but a response (a
    view that returned None, which Django turns into an error) has nothing a
    server would close: released now.
    """
    if not isinstance(response, HttpResponseBase):
        release_all(admissions)
        return response
    _dressed(response, admissions)
    return hold_until_closed(response, admissions)


async def afinish(response: HttpResponseBase, admissions: Sequence[Admission]) -> HttpResponseBase:
    _dressed(response, admissions)
    if getattr(response, "streaming", False):
        return hold_until_closed(response, admissions)
    await arelease_all(admissions)
    return response


def _dressed(response: HttpResponseBase, admissions: Sequence[Admission]) -> None:
    """Room visits put their tickets on the response (web/visits.py); nothing to do for other semaphores."""
    if isinstance(response, HttpResponseBase) and any(admission.room is not None for admission in admissions):
        dress(response, [admission.room for admission in admissions])


def _lost(permits: Sequence[Permit]) -> Permit | None:
    return next((permit for permit in permits if permit.lost), None)


def _until_lost(response: StreamingHttpResponse, permits: Sequence[Permit]) -> Iterable[bytes] | AsyncIterable[bytes]:
    """The stream, cut short once a permit it holds is lost (its max_hold reached, or taken away).

    A client that stops reading, or reads a byte a second, would otherwise keep
    the permit for as long as the server keeps the connection.
    """
    content = response.streaming_content

    def cut(permit: Permit) -> None:
        logger.warning("Ending a streamed response early: it held %r past its max_hold.", permit)

    if response.is_async:

        async def async_chunks() -> AsyncIterator[bytes]:
            async for chunk in content:  # type: ignore[union-attr]
                lost = _lost(permits)
                if lost is not None:
                    cut(lost)
                    return
                yield chunk

        return async_chunks()

    def chunks() -> Iterator[bytes]:
        for chunk in content:  # type: ignore[union-attr]
            lost = _lost(permits)
            if lost is not None:
                cut(lost)
                return
            yield chunk

    return chunks()


def hold_until_closed(response: HttpResponseBase, admissions: Sequence[Admission]) -> HttpResponseBase:
    """Keep the permits until the response has been sent and closed.

    Servers call ``response.close()`` when they are done with a response
    (WSGI and ASGI both, and so does the test client); a closer it runs releases
    the permits then, in reverse order: after the client has the response,
    and, for a stream (a ``StreamingHttpResponse``, a ``FileResponse``, which
    does its work while it is sent), after that work. If nobody ever closes a
    stream, a finaliser stops renewing its permits so their leases end on
    their own instead of being renewed forever; a plain response dropped
    unclosed has done its work, and its permits go back from the background.
    """
    held = [admission for admission in admissions if admission.permit is not None or admission.room is not None]
    if not held:
        return response
    permits = [admission.permit for admission in held if admission.permit is not None]
    if isinstance(response, StreamingHttpResponse):
        response.streaming_content = _until_lost(response, permits)

    def release_on_close() -> None:
        try:
            release_all(held, posted=True)  # the response is sent: nobody waits on the answers
        except Exception:  # Django's close() swallows what its closers raise: say it here
            logger.exception("Giving back a request's permits as its response closed failed.")
            raise

    # One of the closers Django's close() runs, not a wrapper of close(): a wrapper holding the bound
    # method is a reference cycle, and a response dropped unclosed would keep its permits (renewed)
    # until the cyclic garbage collector happened to run, instead of giving them back at once.
    response._resource_closers.append(release_on_close)  # type: ignore[attr-defined]
    weakref.finalize(response, _abandoned if getattr(response, "streaming", False) else _dropped, held)
    return response
