"""Channels consumers guarded per connection: ``SemaphoreConsumerMixin``, before a consumer class.

"At most 3 open WebSockets per user", "at most 500 live dashboards": a
connection takes a permit when it connects and holds it while it is open,
which may be hours. So:

- **Connect.** The permit is asked for on ``websocket.connect``, before the
  consumer's ``connect()`` runs. Refused (or Redis down under ``on_error:
  "deny"``), the socket is closed with code 1013, "Try Again Later": the
  handshake completes and the close follows at once, since a close code
  exists only on an open socket (a close before the accept is, in ASGI, an
  HTTP 403 that browsers report as 1006). The consumer's ``connect()``,
  ``receive()`` and ``disconnect()`` never run for it.
- **Let through.** Redis down under ``on_error: "allow"``: the socket
  connects unguarded, and tries for its permit every third of its lease
  until Redis answers; it then holds it, or is closed with 1013 when the
  limit is full by then. A socket may stay open for hours: it must not stay
  over the limit after the limits are enforced again.
- **While open.** The permit is renewed in the background every third of
  its lease, for as long as the socket lives: no ``SEMAPHORE_WEB_MAX_HOLD``
  (a request's bound). ``semaphore_max_hold`` (or the semaphore's own
  ``max_hold``) caps it: the socket is then closed with 1013, as it is when
  an operator force-releases its permit.
- **Gone.** Given back when the consumer ends: after ``disconnect()``, when a
  handler raises, when the server cancels it. A process killed outright
  renews nothing: its permits are back within one lease (``SEMAPHORE_WEB_LEASE``,
  10 s, or the semaphore's ``lease``).

The whole guard runs on the event loop, with the asyncio client, for sync
consumers (``WebsocketConsumer``) and async ones alike: it wraps the
consumer's ``__call__`` and ``dispatch``, which are async in both.

Needs Channels: ``pip install "django-semaphore[channels]"``. Nothing else in
this package imports this module.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from asgiref.sync import iscoroutinefunction, sync_to_async
from asgiref.typing import ASGIReceiveCallable, ASGISendCallable
from django.core.exceptions import ImproperlyConfigured
from django.utils.module_loading import import_string

from .core.errors import WeightAboveLimit
from .core.failure_policy import let_through
from .core.permit import Permit
from .core.semaphore import Semaphore, get_semaphore
from .exceptions import BackendUnavailable
from .web import request_outcomes
from .web.addresses import client_network, parse_address
from .web.admission import ENFORCE, LABEL_LIMIT, Admission, request_lease
from .web.conf import web_setting
from .web.partition_keys import NOT_LIMITED, ip_key, partition_value, user_key
from .web.responses import refusal_detail

try:
    from channels.consumer import AsyncConsumer
    from channels.exceptions import StopConsumer
except ImportError as exc:  # pragma: no cover - the message is the point
    raise ImportError('django_semaphore.channels needs Channels: pip install "django-semaphore[channels]"') from exc

if TYPE_CHECKING:
    from channels.consumer import _ChannelScope

__all__ = ["TRY_AGAIN_LATER", "SemaphoreConsumerMixin", "scope_key"]

logger = logging.getLogger("django_semaphore.requests")

# RFC 6455's registry: "Try Again Later", the server is overloaded.
TRY_AGAIN_LATER = 1013
# A socket let through during an outage tries for its permit this many times per lease, as renewals go.
RETRIES_PER_LEASE = 3
LOST_REASON = "This connection's permit ended (its max hold, or an operator's release)."
KINDS = ("user", "user_or_ip", "ip")


def _scope_ip(scope: _ChannelScope) -> str | None:
    """The client's address as the server saw it (behind a proxy: the server's ``--proxy-headers``)."""
    client = scope.get("client")
    if not client:
        return None
    address = parse_address(str(client[0]))
    return None if address is None else client_network(address, int(web_setting("SEMAPHORE_IPV6_PREFIX")))


async def scope_key(scope: _ChannelScope, spec: Any) -> Any:
    """A connection's partition value under ``spec``: ``"user"`` (``AuthMiddlewareStack``'s ``scope["user"]``),
    ``"user_or_ip"``, ``"ip"``, or a function of the scope (sync or async) or its dotted path.

    The values are the same as a request's (``user:<pk>``, ``ip:<address>``),
    so a per-user semaphore counts a user's requests and sockets together. A
    scope without ``"user"`` (no ``AuthMiddlewareStack``) is not an anonymous
    user: the user kinds refuse it with ``ImproperlyConfigured`` rather than
    pass every socket.
    """
    if spec in KINDS:
        if spec != "ip" and "user" not in scope:
            raise ImproperlyConfigured(
                f"A {spec!r} key reads scope['user'], which this connection's scope does not have: wrap its route in "
                "channels.auth.AuthMiddlewareStack (or a middleware of yours that sets it), or key it by a function "
                "of the scope."
            )
        user = user_key(scope.get("user")) if spec != "ip" else None
        return partition_value(user or (ip_key(_scope_ip(scope)) if spec != "user" else None), spec)
    function = import_string(spec) if isinstance(spec, str) and "." in spec else spec
    if not callable(function):
        raise ImproperlyConfigured(
            f"A connection's key is one of {', '.join(KINDS)} or a function of the scope (or its dotted path), "
            f"not {spec!r}."
        )
    value = function(scope) if iscoroutinefunction(function) else await sync_to_async(function)(scope)
    return partition_value(await value if inspect.isawaitable(value) else value, spec)


class SemaphoreConsumerMixin(AsyncConsumer):
    """At most ``limit`` open connections (per partition) of a consumer: put it first among the bases.

    ``semaphore`` names the semaphore; ``semaphore_key`` (default: the
    semaphore's ``key``), ``semaphore_wait`` and ``semaphore_weight``
    (default: the semaphore's) as for views; ``semaphore_max_hold``:
    seconds a connection may stay open at most (default: the semaphore's
    ``max_hold``, else no bound). ``semaphore_admission`` is the
    connection's ``Admission`` once it connected.
    """

    semaphore: str | None = None
    semaphore_key: Any = None
    semaphore_wait: float | None = None
    semaphore_weight: int | None = None
    semaphore_max_hold: float | None = None
    semaphore_admission: Admission | None = None

    async def __call__(self, scope: _ChannelScope, receive: ASGIReceiveCallable, send: ASGISendCallable) -> None:
        # The server's own send: a sync consumer's base_send is a sync wrapper, not for the event loop.
        self._semaphore_send = send
        self._semaphore_loop = asyncio.get_running_loop()
        self._semaphore_closing: asyncio.Task[None] | None = None
        self._semaphore_catching_up: asyncio.Task[None] | None = None
        try:
            await super().__call__(scope, receive, send)
        finally:
            try:
                catching_up = self._semaphore_catching_up
                if catching_up is not None and not catching_up.done():
                    catching_up.cancel()  # a permit it was granted as it is cancelled goes back (core/flow.py)
                    await asyncio.wait([catching_up])
            finally:
                if self.semaphore_admission is not None:
                    await self.semaphore_admission.arelease()

    async def dispatch(self, message: dict[str, Any]) -> None:
        if message.get("type") == "websocket.connect" and self.semaphore is not None:
            admission = self.semaphore_admission = await self._admit(self.semaphore)
            if admission.rejected:
                await self._close(accept=True, reason=refusal_detail(admission.exception()))
                raise StopConsumer
        await super().dispatch(message)

    async def _admit(self, name: str) -> Admission:
        """This connection's admission: the permit, or why there is none (the failure policy applied)."""
        whole = get_semaphore(name)
        if whole.config.room is not None:
            raise ImproperlyConfigured(f"Semaphore {name!r} is a waiting room, which guards pages, not connections.")
        spec = whole.config.key if self.semaphore_key is None else self.semaphore_key
        value = None if spec is None else await scope_key(self.scope, spec)
        if value is NOT_LIMITED:
            return self._noted(Admission(name=name, outcome=request_outcomes.NOT_LIMITED))
        semaphore = whole if value is None else get_semaphore(name, value)
        path = str(self.scope.get("path", ""))[:LABEL_LIMIT]
        held_for = self.semaphore_max_hold
        if held_for is None and "max_hold" in whole.config.options:
            held_for = whole.config.max_hold
        common: dict[str, Any] = {"name": name, "key": value, "partition": semaphore.partition}
        lease = request_lease(whole.config).lease
        options: dict[str, Any] = {
            "wait": self.semaphore_wait,
            "weight": self.semaphore_weight,
            "lease": lease,
            "max_hold": held_for,
            "label": f"WEBSOCKET {path}"[:LABEL_LIMIT],
            "metadata": {"path": path, "method": "WEBSOCKET"},
            "on_lost": self._lost,
        }
        try:
            attempt = await semaphore.aattempt(**options)
        except BackendUnavailable as error:
            allowed = let_through(semaphore.config, error, where=path)
            if allowed:
                later = self._catch_up(semaphore, {**options, "wait": 0}, lease / RETRIES_PER_LEASE)
                self._semaphore_catching_up = asyncio.ensure_future(later)
            outcome = request_outcomes.ERROR_ALLOWED if allowed else request_outcomes.ERROR_DENIED
            return self._noted(Admission(outcome=outcome, error=None if allowed else error, **common))
        except WeightAboveLimit:  # an operator lowered the limit below the weight: answered as full
            return self._noted(Admission(outcome=request_outcomes.FULL, **common))
        outcome = request_outcomes.ACQUIRED if attempt.granted else request_outcomes.FULL
        return self._noted(Admission(outcome=outcome, permit=attempt.permit, attempt=attempt, **common))

    async def _catch_up(self, semaphore: Semaphore, options: dict[str, Any], every: float) -> None:
        """A socket let through unguarded during an outage (``on_error: "allow"``) takes its permit once Redis
        answers, or is closed with 1013 when the limit is full by then.

        A request let through ends within its max hold; a socket may stay open
        for hours, which would keep its user over the limit long after the
        limits are enforced again. Tried every third of the lease, as a held
        socket's permit is renewed; its outcome stays the one counted when it
        connected.
        """
        while True:
            await asyncio.sleep(every)
            try:
                attempt = await semaphore.aattempt(**options)
            except BackendUnavailable:
                continue  # still down: it stays open unguarded, as the policy says
            except WeightAboveLimit:
                attempt = None
            except Exception:  # a bug must not end the connection: it stays as it was let in
                logger.exception("A socket let through during an outage could not take its permit of %r", semaphore)
                return
            admission = self.semaphore_admission
            if admission is None:  # pragma: no cover - set before this task starts
                return
            if attempt is not None and attempt.granted:
                self.semaphore_admission = replace(
                    admission, outcome=request_outcomes.ACQUIRED, permit=attempt.permit, attempt=attempt
                )
                return
            self.semaphore_admission = refused = replace(admission, outcome=request_outcomes.FULL, attempt=attempt)
            with contextlib.suppress(Exception):  # the socket may be closing already
                await self._close(accept=False, reason=refusal_detail(refused.exception()))
            return

    def _noted(self, admission: Admission) -> Admission:
        details = {"partition": admission.partition, "mode": ENFORCE, "request": None, "scope": self.scope}
        request_outcomes.record(admission.name, admission.outcome, **details)
        return admission

    async def _close(self, *, accept: bool, reason: str) -> None:
        """Close the socket with 1013 (accepted first when it is not yet: only an open socket has a close code)."""
        if accept:
            await self._semaphore_send({"type": "websocket.accept", "subprotocol": None, "headers": []})
        await self._semaphore_send({"type": "websocket.close", "code": TRY_AGAIN_LATER, "reason": reason})

    def _lost(self, permit: Permit) -> None:
        """The permit ended under an open socket (its max hold, a force release): close it. On the renewal thread."""
        self._semaphore_loop.call_soon_threadsafe(self._close_soon)

    def _close_soon(self) -> None:
        async def close() -> None:
            with contextlib.suppress(Exception):  # the socket may be closing already
                await self._close(accept=False, reason=LOST_REASON)

        self._semaphore_closing = asyncio.ensure_future(close())
