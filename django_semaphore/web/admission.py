"""One request's admission to one semaphore, shared by the decorator and the middleware.

``admit`` / ``aadmit`` read the body ahead, pick the partition from the
request, take a permit (the async one on the native asyncio client), apply
the failure policy, and return an ``Admission``: what the view sees as
``request.semaphore``, and what gives the permit back once the response is
finished (web/holding.py).

What admitting decides is written once, without I/O (``_admission``, a
generator that yields the I/O it needs: the key, the body, the permit, a
permit to give back), and run by two thin drivers, as the acquire's waiting
loop is (core/flow.py).

**The body first.** A guarded request's body is read before its permit is
asked for, so a slow sender holds none. Under a threaded WSGI server with nothing buffering in front (gunicorn
``gthread`` or ``sync`` facing clients), Django is called once the headers have
arrived and reads the body from the socket only when something asks for it.
A guard that took its permit first would hold it for as long as the client
takes to send the body: at a byte a second, a handful of clients drain a
site-wide limit. So the body is read first, as far as Django would keep it in
memory anyway: ``Content-Length`` of at most ``DATA_UPLOAD_MAX_MEMORY_SIZE``
(Django's default, 2.5 MiB, when that setting is None).

Everything else is left to the view, exactly as without the guard: a
chunked body (no ``Content-Length``), one above the limit (reading
``request.body`` would raise ``RequestDataTooBig``, a 400, where a streaming or
file-upload view works), or a stream something already started to read.
Under ASGI, Django has read the whole body before the request exists, so
nothing is done there (docs/security.md, "Slow clients").
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Generator
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import redis.exceptions
from asgiref.sync import sync_to_async
from django.conf import settings
from django.http import HttpRequest

from ..core import bounded, failure_policy
from ..core.ascii_numbers import ascii_int
from ..core.conf import SemaphoreConfig
from ..core.errors import BackendUnavailable, SemaphoreFull, WeightAboveLimit
from ..core.failure_policy import agive_back, give_back
from ..core.flow import Stepping
from ..core.permit import Permit
from ..core.safe_text import for_log
from ..core.semaphore import Attempt, Semaphore, get_semaphore, refused
from ..core.tally import in_dry_run
from . import request_outcomes, visits
from .conf import web_setting
from .partition_keys import NOT_LIMITED, UserOf, akey_for, key_for
from .visits import Visit

logger = logging.getLogger("django_semaphore.requests")

ENFORCE, DRY_RUN, OFF = "enforce", "dry-run", "off"
MODES = (ENFORCE, DRY_RUN, OFF)
LABEL_LIMIT = 200
T = TypeVar("T")


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
    # A waiting room's semaphore: the request's visit (web/visits.py) instead of a permit.
    room: Visit | None = None
    _released: bool = field(default=False, repr=False)

    @property
    def limited(self) -> bool:
        return self.outcome in (request_outcomes.FULL, request_outcomes.DRY_RUN_FULL, request_outcomes.ERROR_DENIED)

    @property
    def rejected(self) -> bool:
        """True when the request must be turned away (enforce mode only), or a room answers it itself."""
        return self.mode == ENFORCE and (self.limited or (self.room is not None and self.room.answers))

    @property
    def retry_after(self) -> int:
        # An outage, or a weight above the limit in force, has no lease to measure.
        if self.room is not None and self.limited:
            return self.room.options.retry_after
        if self.outcome == request_outcomes.ERROR_DENIED or (self.limited and self.attempt is None):
            return failure_policy.ERROR_RETRY_AFTER
        return self.attempt.retry_after if self.attempt is not None else 0

    def exception(self) -> SemaphoreFull | BackendUnavailable:
        """The exception a rejected request stands for, for ``raise_exception`` and the 503 view."""
        if self.error is not None:
            return self.error
        return refused(self.name, self.partition, self.attempt, max(self.retry_after, 1))

    @property
    def released(self) -> bool:
        """Its permit was given back (or it had none to give)."""
        return self._released

    def release(self, *, posted: bool = False) -> None:
        """Give the permit back (idempotent); an outage only logs, the release is retried in the background.

        ``posted``: without waiting for Redis's answer (``Permit.post_release``),
        for a response already sent. A room's visit is renewed from now
        instead (or ended: web/visits.py).
        """
        if self.room is not None and self.hung.error is None:
            self.room.close()
        elif self.room is not None:
            self.room.forget()  # after a hung Redis: its visit ends a lease from its last renewal
        self.hung.note(give_back(self._leaving(), posted=posted))

    async def arelease(self) -> None:
        if self.room is not None and self.hung.error is None:
            await self.room.aclose()
        elif self.room is not None:
            self.room.forget()
        self.hung.note(await agive_back(self._leaving()))

    def release_in_background(self) -> None:
        """Give the permit back from the background thread at once (idempotent), without waiting for Redis."""
        if self.permit is not None and not self._released:
            self._released = True
            self.permit.release_in_background(soon=True)

    def _leaving(self) -> Permit | None:
        """The permit to give back now, once; None when there is none, or it goes from the background.

        After a request met a hung Redis, its permits go back from the
        background: it pays one timeout at most.
        """
        if self.permit is None or self._released:
            return None
        self._released = True
        if self.hung.error is not None:
            self.permit.release_in_background()
            return None
        return self.permit


def _partition(whole: Semaphore, value: Any) -> Semaphore | None:
    """The semaphore (partition) for this key value, or None when it says "not limited"."""
    if value is NOT_LIMITED:
        return None
    return whole if value is None else get_semaphore(whole.name, value)


def _options(
    request: HttpRequest, semaphore: Semaphore, mode: str, wait: float | None, weight: int | None
) -> dict[str, Any]:
    label = f"{request.method} {request.path}"[:LABEL_LIMIT]
    held = request_lease(semaphore.config)
    return {
        # A dry run must not change latency, so it never waits in line.
        "wait": 0 if mode == DRY_RUN else wait,
        "weight": weight,
        # Short, and renewed while the request lives: a killed worker's permit is back within it.
        "lease": held.lease,
        "label": label,
        "metadata": {"path": request.path[:LABEL_LIMIT], "method": request.method},
        # A request never holds a permit for good (a client that stops reading a stream).
        "max_hold": held.max_hold,
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
        allowed = failure_policy.let_through(semaphore.config, error, where=request.path, dry_run=mode == DRY_RUN)
        outcome = request_outcomes.ERROR_ALLOWED if allowed else request_outcomes.ERROR_DENIED
        admission = Admission(outcome=outcome, error=None if allowed else error, **common)
    elif attempt is not None and attempt.permit is not None:
        admission = Admission(outcome=request_outcomes.ACQUIRED, permit=attempt.permit, attempt=attempt, **common)
    elif mode == DRY_RUN:
        logger.info("Dry run: semaphore %r is full; would reject %s", semaphore.name, _request_line(request))
        admission = Admission(outcome=request_outcomes.DRY_RUN_FULL, attempt=attempt, **common)
    else:
        admission = Admission(outcome=request_outcomes.FULL, attempt=attempt, **common)
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
    request_outcomes.record(
        admission.name, admission.outcome, partition=admission.partition, mode=admission.mode, request=request
    )
    seen = getattr(request, "semaphores", None)
    if seen is None:
        seen = request.semaphores = {}  # type: ignore[attr-defined]
    seen[admission.name] = admission
    request.semaphore = admission  # type: ignore[attr-defined]
    return admission


def skipped(request: HttpRequest, name: str, outcome: str, mode: str = ENFORCE) -> Admission:
    """Record a request this semaphore does not apply to (not limited, bypassed)."""
    return _noted(request, Admission(name=name, outcome=outcome, mode=mode))


# -- what admitting decides, without I/O -------------------------------------------------------


@dataclass(frozen=True)
class Guarded:
    """What one guard (a decorated view, a middleware rule) asks of a request.

    The semaphore by name; ``key`` (None: the semaphore's own key setting),
    ``wait`` and ``weight`` (None: the semaphore's), and the ``mode``.
    """

    name: str
    key: Any = None
    wait: float | None = None
    weight: int | None = None
    mode: str = ENFORCE
    # Where the user kinds of key read the request's user (None: request.user); web/partition_keys.py.
    user_of: UserOf | None = None


@dataclass(frozen=True)
class _KeyOf:
    """The request's partition value under ``spec`` (the user from ``user_of``, if given); reply: the value."""

    spec: Any
    user_of: UserOf | None = None

    def run(self, request: HttpRequest) -> Any:
        return key_for(request, self.spec, self.user_of)

    async def arun(self, request: HttpRequest) -> Any:
        return await akey_for(request, self.spec, self.user_of)


@dataclass(frozen=True)
class _ReadBody:
    """Read the request's body now (in a thread, from an async view under WSGI); reply ignored."""

    def run(self, request: HttpRequest) -> None:
        read_ahead(request)

    async def arun(self, request: HttpRequest) -> None:
        await sync_to_async(read_ahead)(request)


@dataclass(frozen=True)
class _Take:
    """Attempt ``semaphore`` with ``options``; reply: the ``Attempt``, or its error thrown in.

    ``dry_run``: a dry-run rule's, whose refusal the metrics count as one (core/tally.py).
    """

    semaphore: Semaphore
    options: dict[str, Any]
    dry_run: bool = False

    def run(self, request: HttpRequest) -> Attempt:
        marked = in_dry_run.set(True) if self.dry_run else None
        try:
            mark = bounded.rerun_mark()
            attempt = self.semaphore.attempt(**self.options)
            if attempt.granted or not bounded.maybe_rerun(mark) or not bounded.rerun_since(mark):
                return attempt
            return self.semaphore.attempt(**self._once_more)
        finally:
            if marked is not None:
                in_dry_run.reset(marked)

    async def arun(self, request: HttpRequest) -> Attempt:
        marked = in_dry_run.set(True) if self.dry_run else None
        try:
            mark = bounded.rerun_mark()
            attempt = await self.semaphore.aattempt(**self.options)
            if attempt.granted or not bounded.maybe_rerun(mark):
                return attempt
            if not await sync_to_async(bounded.rerun_since, thread_sensitive=False)(mark):
                return attempt
            return await self.semaphore.aattempt(**self._once_more)
        finally:
            if marked is not None:
                in_dry_run.reset(marked)

    @property
    def _once_more(self) -> dict[str, Any]:
        """Refused while a release of this process's that had not run (a lost library: its reply said so) was
        being run again: asked once more, without waiting (bounded.rerun_since), as a release that waited
        for its answer would have left the permit back before this request came."""
        return {**self.options, "wait": 0}


@dataclass(frozen=True)
class _AskRoom(Generic[T]):
    """Ask web/visits.py about the room ``semaphore``: ``ask``, or ``aask`` on the asyncio path; reply: its answer.

    Whether the request passes the room by (a bool), or the request's visit
    (the ``Visit``, or its error thrown in).
    """

    ask: Callable[[HttpRequest, Semaphore], T]
    aask: Callable[[HttpRequest, Semaphore], Awaitable[T]]
    semaphore: Semaphore

    def run(self, request: HttpRequest) -> T:
        return self.ask(request, self.semaphore)

    async def arun(self, request: HttpRequest) -> T:
        return await self.aask(request, self.semaphore)


@dataclass(frozen=True)
class _GiveBack:
    """Give ``permit`` back (what went wrong after the grant is raised on); reply ignored."""

    permit: Permit | None

    def run(self, request: HttpRequest) -> None:
        give_back(self.permit)

    async def arun(self, request: HttpRequest) -> None:
        await agive_back(self.permit)


_Step = _KeyOf | _ReadBody | _Take | _GiveBack | _AskRoom[Any]
_READ_BODY = _ReadBody()


def _admission(request: HttpRequest, guarded: Guarded) -> Generator[_Step, Any, Admission]:
    """Admit ``request`` as ``guarded`` says: the I/O it needs is yielded, an error of it thrown back in."""
    name, mode = guarded.name, guarded.mode
    whole = get_semaphore(name)
    if whole.config.room is not None:
        return (yield from _visiting(request, whole, mode))
    spec = whole.config.key if guarded.key is None else guarded.key
    value = None if spec is None else (yield _KeyOf(spec, guarded.user_of))
    semaphore = _partition(whole, value)
    if semaphore is None:
        return skipped(request, name, request_outcomes.NOT_LIMITED, mode)
    if must_read_ahead(request):
        yield _READ_BODY  # a slow sender holds no permit while its body arrives
    hung = _hung(request)
    if hung.error is not None:
        return _decide(request, semaphore, value, mode, None, hung.error)
    try:
        options = _options(request, semaphore, mode, guarded.wait, guarded.weight)
        attempt: Attempt = yield _Take(semaphore, options, mode == DRY_RUN)
    except BackendUnavailable as exc:
        hung.note(exc)
        return _decide(request, semaphore, value, mode, None, exc)
    except WeightAboveLimit as exc:
        return _too_heavy(request, semaphore, value, mode, exc)
    try:
        return _decide(request, semaphore, value, mode, attempt, None)
    except BaseException:
        # Recording the outcome may fail after the grant: nobody else would release it.
        yield _GiveBack(attempt.permit)
        raise


def _visiting(request: HttpRequest, room: Semaphore, mode: str) -> Generator[_Step, Any, Admission]:
    """A waiting room's admission: passed by, inside (let in now or already), or in line (web/visits.py).

    Each request that asks the room is one outcome: acquired when its
    visitor is inside, full when it waits in line (a dry run's visitors are
    counted and queued as any, and the view runs anyway).
    """
    if (yield _AskRoom(visits.bypassed, visits.abypassed, room)):
        return skipped(request, room.name, request_outcomes.BYPASSED, mode)
    hung = _hung(request)
    if hung.error is not None:
        return _decide(request, room, None, mode, None, hung.error)
    try:
        visit: Visit = yield _AskRoom(visits.visit, visits.avisit, room)
    except BackendUnavailable as exc:
        hung.note(exc)
        return _decide(request, room, None, mode, None, exc)
    if visit.inside:
        outcome = request_outcomes.ACQUIRED
    else:
        outcome = request_outcomes.DRY_RUN_FULL if mode == DRY_RUN else request_outcomes.FULL
    return _noted(request, Admission(name=room.name, outcome=outcome, mode=mode, hung=hung, room=visit))


def admit(request: HttpRequest, guarded: Guarded) -> Admission:
    """Take a permit of ``guarded.name`` for ``request``."""
    admitting: Stepping[_Step, Admission] = Stepping(_admission(request, guarded))
    while admitting.step is not None:
        try:
            admitting.reply(admitting.step.run(request))
        except BaseException as error:
            admitting.throw(error)
    return admitting.returned


async def aadmit(request: HttpRequest, guarded: Guarded) -> Admission:
    """``admit`` on the asyncio client, for async views and the async middleware path."""
    admitting: Stepping[_Step, Admission] = Stepping(_admission(request, guarded))
    while admitting.step is not None:
        try:
            admitting.reply(await admitting.step.arun(request))
        except BaseException as error:
            admitting.throw(error)
    return admitting.returned


# -- a request's lease -----------------------------------------------------------------------------


@dataclass(frozen=True)
class RequestLease:
    """How a request holds a permit of one semaphore: its lease, and how long at most (None: no bound)."""

    lease: float
    max_hold: float | None


def _request_lease(config: SemaphoreConfig) -> RequestLease:
    options = config.options
    # A request's permit is renewed while the request lives, so its lease only says how long a
    # killed worker's permit stays taken; without renewal it must cover the whole request.
    renewed = config.auto_renew
    lease = config.lease if "lease" in options or not renewed else float(web_setting("SEMAPHORE_WEB_LEASE"))
    # Requests are bounded even when nothing is set; an explicit None lifts the bound.
    cap = web_setting("SEMAPHORE_WEB_MAX_HOLD")
    max_hold = config.max_hold if "max_hold" in options else None if cap is None else float(cap)
    return RequestLease(lease, max_hold)


# Per semaphore name, for the configuration it was worked out for: a settings change makes new
# configurations (core/conf.py), and so new leases here.
_leases: dict[str, tuple[SemaphoreConfig, RequestLease]] = {}


def request_lease(config: SemaphoreConfig) -> RequestLease:
    """The lease and hold cap of a request's permit of ``config``'s semaphore (``SEMAPHORE_WEB_*``)."""
    cached = _leases.get(config.name)
    if cached is None or cached[0] is not config:
        cached = _leases[config.name] = (config, _request_lease(config))
    return cached[1]


# -- the body first --------------------------------------------------------------------------------

# Django's own default for DATA_UPLOAD_MAX_MEMORY_SIZE: what is read ahead when a site set None (no limit).
DJANGO_DEFAULT_MEMORY_SIZE = 2_621_440


def read_ahead_limit() -> int:
    limit = getattr(settings, "DATA_UPLOAD_MAX_MEMORY_SIZE", DJANGO_DEFAULT_MEMORY_SIZE)
    return DJANGO_DEFAULT_MEMORY_SIZE if limit is None else int(limit)


def must_read_ahead(request: HttpRequest) -> bool:
    """A WSGI request whose whole body, of a declared length Django keeps in memory, is still on the socket.

    Cheap on purpose (a dict lookup first): it runs on every guarded request,
    and under ASGI it answers False at once.
    """
    meta = request.META
    if "wsgi.input" not in meta or hasattr(request, "_body") or getattr(request, "_read_started", True):
        return False
    declared = meta.get("CONTENT_LENGTH")
    if not declared:
        return False  # no body, or a chunked one: nothing to wait for here
    try:
        length = ascii_int(declared)
    except ValueError:
        return False  # not a length Django would read either; the view sees the request as it came
    return 0 < length <= read_ahead_limit()


def read_ahead(request: HttpRequest) -> None:
    """Wait for the body here, before any permit is taken (``request.body`` keeps it for the view).

    A client that disconnects half-way raises ``UnreadablePostError`` here, as
    it would in the view, with no permit taken.
    """
    if must_read_ahead(request):
        request.body  # noqa: B018 - read for its effect: the body is now in memory
