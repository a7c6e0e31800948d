"""One request's admission to one semaphore, shared by the decorator and the middleware.

``admit`` / ``aadmit`` pick the partition from the request, take a permit
(the async one on the native asyncio client), apply the failure policy, and
return an ``Admission``: what the view sees as ``request.semaphore``, and what
gives the permit back once the response is finished.
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

import redis.exceptions
from asgiref.sync import sync_to_async
from django.http import HttpRequest, HttpResponseBase, StreamingHttpResponse

from . import failure, outcomes
from .core.permit import Permit
from .core.semaphore import Attempt, Semaphore, get_semaphore
from .exceptions import BackendUnavailable, SemaphoreFull, WeightAboveLimit
from .guards import agive_back, give_back
from .request_body import must_read_ahead, read_ahead
from .request_keys import NOT_LIMITED, akey_for, key_for
from .safe_text import for_log

logger = logging.getLogger("django_semaphore.requests")

ENFORCE, DRY_RUN, OFF = "enforce", "dry-run", "off"
MODES = (ENFORCE, DRY_RUN, OFF)
LABEL_LIMIT = 200


@dataclass
class Hung:
    """Whether a call of this request found Redis not answering (a timeout), and the error it raised.

    A request pays at most one socket timeout: once one of its calls timed
    out, its other semaphores (stacked rules, a decorator behind the
    middleware) apply their failure policy without asking Redis, and its
    permits are given back from the background.
    """

    error: BackendUnavailable | None = None

    def note(self, error: BaseException | None) -> None:
        if isinstance(error, BackendUnavailable) and _timed_out(error):
            self.error = error


def _timed_out(error: BaseException) -> bool:
    cause = error.__cause__
    return isinstance(cause, redis.exceptions.TimeoutError)


def _hung(request: HttpRequest) -> Hung:
    hung = getattr(request, "_semaphore_hung", None)
    if hung is None:
        # Django's requests take attributes (as request.user); its stubs declare none of this app's.
        hung = request._semaphore_hung = Hung()  # type: ignore[attr-defined]
    return hung


@dataclass
class Admission:
    """The outcome of guarding one request with one semaphore.

    ``limited`` says the semaphore had no permit for this request (or Redis
    failed under ``on_error="deny"``), whether or not the request was turned
    away: with ``block=False`` or in dry-run the view runs anyway and can look.
    """

    name: str
    outcome: str
    mode: str = ENFORCE
    key: Any = None
    partition: str | None = None
    permit: Permit | None = None
    attempt: Attempt | None = None
    error: BackendUnavailable | None = None
    hung: Hung = field(default_factory=Hung, repr=False)
    _released: bool = field(default=False, repr=False)

    @property
    def limited(self) -> bool:
        return self.outcome in (outcomes.FULL, outcomes.DRY_RUN_FULL, outcomes.ERROR_DENIED)

    @property
    def rejected(self) -> bool:
        """True when the request must be turned away (enforce mode only)."""
        return self.mode == ENFORCE and self.limited

    @property
    def retry_after(self) -> int:
        # An outage, or a weight above the limit in force, has no lease to measure.
        if self.outcome == outcomes.ERROR_DENIED or (self.limited and self.attempt is None):
            return failure.ERROR_RETRY_AFTER
        return self.attempt.retry_after if self.attempt is not None else 0

    def exception(self) -> SemaphoreFull | BackendUnavailable:
        """The exception a rejected request stands for, for ``raise_exception`` and the 503 view."""
        if self.error is not None:
            return self.error
        attempt = self.attempt
        return SemaphoreFull(
            self.name,
            self.partition,
            max(self.retry_after, 1),
            used=attempt.used if attempt else None,
            limit=attempt.limit if attempt else None,
            waiting=attempt.waiting if attempt else None,
        )

    def release(self) -> None:
        """Give the permit back (idempotent); an outage only logs, the release is retried in the background."""
        if self.permit is None or self._released:
            return
        self._released = True
        if self.hung.error is not None:
            self.permit.release_in_background()
            return
        self.hung.note(give_back(self.permit))

    async def arelease(self) -> None:
        if self.permit is None or self._released:
            return
        self._released = True
        if self.hung.error is not None:
            self.permit.release_in_background()
            return
        self.hung.note(await agive_back(self.permit))


def _partition(whole: Semaphore, value: Any) -> Semaphore | None:
    """The semaphore (partition) for this key value, or None when it says "not limited"."""
    if value is NOT_LIMITED:
        return None
    return whole if value is None else get_semaphore(whole.name, value)


def _options(
    request: HttpRequest, semaphore: Semaphore, mode: str, wait: float | None, weight: int | None
) -> dict[str, Any]:
    label = f"{request.method} {request.path}"[:LABEL_LIMIT]
    return {
        # A dry run must not change latency, so it never waits in line.
        "wait": 0 if mode == DRY_RUN else wait,
        "weight": weight,
        # Short, and renewed while the request lives: a killed worker's permit is back within it.
        "lease": semaphore.config.web_lease,
        "label": label,
        "metadata": {"path": request.path[:LABEL_LIMIT], "method": request.method},
        # A request never holds a permit for good (a client that stops reading a stream).
        "max_hold": semaphore.config.web_max_hold,
    }


def _decide(
    request: HttpRequest,
    semaphore: Semaphore,
    value: Any,
    mode: str,
    attempt: Attempt | None,
    error: BackendUnavailable | None,
) -> Admission:
    common = {
        "name": semaphore.name,
        "mode": mode,
        "key": value,
        "partition": semaphore.partition,
        "hung": _hung(request),
    }
    if error is not None:
        allowed = failure.on_backend_error(semaphore, error, path=request.path, dry_run=mode == DRY_RUN)
        outcome = outcomes.ERROR_ALLOWED if allowed else outcomes.ERROR_DENIED
        admission = Admission(outcome=outcome, error=None if allowed else error, **common)
    elif attempt is not None and attempt.permit is not None:
        admission = Admission(outcome=outcomes.ACQUIRED, permit=attempt.permit, attempt=attempt, **common)
    elif mode == DRY_RUN:
        logger.info("Dry run: semaphore %r is full; would reject %s", semaphore.name, _request_line(request))
        admission = Admission(outcome=outcomes.DRY_RUN_FULL, attempt=attempt, **common)
    else:
        admission = Admission(outcome=outcomes.FULL, attempt=attempt, **common)
    return _noted(request, admission)


def _too_heavy(request: HttpRequest, semaphore: Semaphore, value: Any, mode: str, error: WeightAboveLimit) -> Admission:
    """A weight above the limit in force (an operator lowered it at run time): answered as full.

    The request cannot be granted until the limit is raised again, and an
    operator who lowered it wants less load, not errors; ``manage.py check``
    (E012) catches a weight above the declared limit before it gets here.
    """
    logger.warning("%s Answering %s as full.", error, _request_line(request))
    return _decide(request, semaphore, value, mode, None, None)


def _request_line(request: HttpRequest) -> str:
    """Method and path for a log line, escaped as Django escapes them: both are the client's."""
    return f"{for_log(request.method or '')} {for_log(request.path)}"


def _noted(request: HttpRequest, admission: Admission) -> Admission:
    outcomes.record(
        admission.name, admission.outcome, partition=admission.partition, mode=admission.mode, request=request
    )
    seen = getattr(request, "semaphores", None)
    # The attributes this app documents on a request; Django's stubs cannot know them.
    if seen is None:
        seen = request.semaphores = {}  # type: ignore[attr-defined]
    seen[admission.name] = admission
    request.semaphore = admission  # type: ignore[attr-defined]
    return admission


def skipped(request: HttpRequest, name: str, outcome: str, mode: str = ENFORCE) -> Admission:
    """Record a request this semaphore does not apply to (not limited, bypassed)."""
    return _noted(request, Admission(name=name, outcome=outcome, mode=mode))


def admit(
    request: HttpRequest,
    name: str,
    *,
    key: Any = None,
    wait: float | None = None,
    weight: int | None = None,
    mode: str = ENFORCE,
) -> Admission:
    """Take a permit of ``name`` for ``request`` (``key=None``: the semaphore's own key setting)."""
    whole = get_semaphore(name)
    value = key_for(request, whole.config.key if key is None else key)
    semaphore = _partition(whole, value)
    if semaphore is None:
        return skipped(request, name, outcomes.NOT_LIMITED, mode)
    read_ahead(request)  # a slow sender holds no permit while its body arrives
    hung = _hung(request)
    if hung.error is not None:
        return _decide(request, semaphore, value, mode, None, hung.error)
    try:
        attempt = semaphore.attempt(**_options(request, semaphore, mode, wait, weight))
    except BackendUnavailable as exc:
        hung.note(exc)
        return _decide(request, semaphore, value, mode, None, exc)
    except WeightAboveLimit as exc:
        return _too_heavy(request, semaphore, value, mode, exc)
    # Recording the outcome may fail after the grant: nobody else would release it.
    with ReleasedOnError(lambda: give_back(attempt.permit)):
        return _decide(request, semaphore, value, mode, attempt, None)


async def aadmit(
    request: HttpRequest,
    name: str,
    *,
    key: Any = None,
    wait: float | None = None,
    weight: int | None = None,
    mode: str = ENFORCE,
) -> Admission:
    """``admit`` on the asyncio client, for async views and the async middleware path."""
    whole = get_semaphore(name)
    value = await akey_for(request, whole.config.key if key is None else key)
    semaphore = _partition(whole, value)
    if semaphore is None:
        return skipped(request, name, outcomes.NOT_LIMITED, mode)
    if must_read_ahead(request):  # an async view under WSGI; never under ASGI, which has read the body
        await sync_to_async(read_ahead)(request)
    hung = _hung(request)
    if hung.error is not None:
        return _decide(request, semaphore, value, mode, None, hung.error)
    try:
        attempt = await semaphore.aattempt(**_options(request, semaphore, mode, wait, weight))
    except BackendUnavailable as exc:
        hung.note(exc)
        return _decide(request, semaphore, value, mode, None, exc)
    except WeightAboveLimit as exc:
        return _too_heavy(request, semaphore, value, mode, exc)
    async with AReleasedOnError(lambda: agive_back(attempt.permit)):
        return _decide(request, semaphore, value, mode, attempt, None)


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


def release_all(admissions: Sequence[Admission]) -> None:
    """Release in reverse order of acquisition."""
    for admission in reversed(admissions):
        admission.release()


async def arelease_all(admissions: Sequence[Admission]) -> None:
    for admission in reversed(admissions):
        await admission.arelease()


def _abandoned(admissions: Sequence[Admission]) -> None:
    """A streaming response was dropped without being closed: stop renewing, let leases end."""
    from .core.renewal import renewer

    for admission in admissions:
        if admission.permit is not None and not admission._released:
            logger.warning("A response holding %r was never closed; its lease will end it.", admission.permit)
            renewer.forget(admission.permit)


def finish(response: HttpResponseBase, admissions: Sequence[Admission]) -> HttpResponseBase:
    """Release now, or when a streaming response is closed."""
    if getattr(response, "streaming", False):
        return hold_until_closed(response, admissions)
    release_all(admissions)
    return response


async def afinish(response: HttpResponseBase, admissions: Sequence[Admission]) -> HttpResponseBase:
    if getattr(response, "streaming", False):
        return hold_until_closed(response, admissions)
    await arelease_all(admissions)
    return response


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
            # An async iterator exactly when response.is_async; mypy cannot tie the two together.
            async for chunk in content:  # type: ignore[union-attr]
                lost = _lost(permits)
                if lost is not None:
                    cut(lost)
                    return
                yield chunk

        return async_chunks()

    def chunks() -> Iterator[bytes]:
        # A plain iterator: response.is_async is false here.
        for chunk in content:  # type: ignore[union-attr]
            lost = _lost(permits)
            if lost is not None:
                cut(lost)
                return
            yield chunk

    return chunks()


def hold_until_closed(response: HttpResponseBase, admissions: Sequence[Admission]) -> HttpResponseBase:
    """Keep the permits until a streaming response has been sent and closed.

    A plain response is complete when the view returns, but a stream (a
    ``StreamingHttpResponse``, a ``FileResponse``) does its work while it is
    sent. Servers call ``response.close()`` when they are done with a response
    (WSGI and ASGI both, and so does the test client); wrapping it releases
    the permits then, in reverse order. If nobody ever closes the response,
    a finaliser stops renewing the permits so their leases end on their own
    instead of being renewed forever.
    """
    held = [admission for admission in admissions if admission.permit is not None]
    if not held:
        return response
    permits = [admission.permit for admission in held if admission.permit is not None]
    if isinstance(response, StreamingHttpResponse):
        response.streaming_content = _until_lost(response, permits)
    close = response.close

    def close_and_release() -> None:
        try:
            close()
        finally:
            release_all(held)

    # Wrapping the method the server calls; mypy refuses every assignment to a method.
    response.close = close_and_release  # type: ignore[method-assign]
    weakref.finalize(response, _abandoned, held)
    return response
