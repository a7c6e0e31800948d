"""The semaphore: one declared semaphore, found by name, and how it is acquired.

A ``Semaphore`` holds no connection, only its name, settings, keys and script
calls. Its other jobs live in modules of their own, named for them, and come
in as its bases or helpers: the acquire's values (core/calls.py), cancelling a
wait (core/cancel.py), replica confirmation (core/replicas.py), the
``with`` / ``async with`` stack (core/entered.py), the operators' actions
(core/operator_actions.py) and the browsing of a keyed semaphore's
partitions (core/partition_browsing.py).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, replace
from typing import Any

from django.core.signals import setting_changed

from . import bounded, cancel, entered, registry, replicas, scripts, signals, stripe_layout, vanished
from .bounded import Deadline
from .calls import (
    AcquireOptions,
    AcquireRequest,
    Calls,
    SyncAcquireOptions,
    akeyword_options,
    keyword_options,
)
from .clients import AsyncClient, SyncClient
from .conf import SemaphoreConfig, config_for, declared
from .connection import aclient, get_client, translated
from .errors import BackendUnavailable, SemaphoreFull, UnknownSemaphore, WeightAboveLimit, WeightMismatch
from .flow import Driver
from .operator_actions import OperatorActions
from .partition_browsing import PartitionBrowsing
from .permit import Permit
from .redis_keys import hash_partition
from .renewal import renewer
from .replicas import ReplicaConfirmation
from .replies import OTHER_WEIGHT, TOO_HEAVY, TOO_LATE, AcquireReply, retry_after_seconds
from .stripe_lanes import Lanes, StripedCall, asked_first
from .stripe_options import shares
from .tally import tally

__all__ = ["PAUSED_RETRY_AFTER", "Attempt", "Semaphore", "all_semaphores", "get_semaphore", "granted", "refused"]

# Seconds a paused semaphore (limit 0) asks callers to wait: no lease or typical hold says when an
# operator resumes it, and asking for one second would turn every paused client into a poller.
PAUSED_RETRY_AFTER = 10


@dataclass(frozen=True)
class Attempt:
    """The outcome of one acquire: the permit, or why there is none."""

    permit: Permit | None
    used: int
    limit: int
    waiting: int
    retry_after: int
    waited: float

    @property
    def granted(self) -> bool:
        return self.permit is not None

    @property
    def paused(self) -> bool:
        """The limit in force is 0: an operator paused the semaphore."""
        return self.limit == 0


def refused(name: str, partition: str | None, attempt: Attempt | None, retry_after: int | None = None) -> SemaphoreFull:
    """The ``SemaphoreFull`` an acquire that got no permit stands for: the one place it is built.

    ``retry_after`` defaults to the attempt's; a caller turned away without
    an attempt (a weight above the limit in force) gives its own.
    """
    if retry_after is None:
        retry_after = attempt.retry_after if attempt is not None else 1
    return SemaphoreFull(
        name,
        partition,
        retry_after,
        used=attempt.used if attempt else None,
        limit=attempt.limit if attempt else None,
        waiting=attempt.waiting if attempt else None,
    )


class Semaphore(OperatorActions, PartitionBrowsing):
    """One declared semaphore, or one partition of it when ``key`` is given.

    Cheap to create: it holds no connection, only key names and settings.
    Used as a context manager it acquires on entry and raises
    ``SemaphoreFull`` when no permit came within ``wait``.
    """

    def __init__(self, config: SemaphoreConfig, key: Any = None, *, partition: str | None = None) -> None:
        self.config = config
        self.name = config.name
        self.key = key
        self.partition = partition if partition is not None else (None if key is None else hash_partition(key))
        if config.adaptive is not None and self.partition is not None:
            # One rule per key would move one limit per key, each with its own signals (what E017 refuses
            # in settings); a key given at the call site must not do it either.
            raise ValueError(
                f"Semaphore {config.name!r} has an adaptive limit, which applies to the whole semaphore only: "
                "it cannot be partitioned by a key."
            )
        if config.stripes > 1 and self.partition is not None:
            # A keyed semaphore spreads over the cluster by its keys already (E022 refuses the two in settings).
            raise ValueError(f"Semaphore {config.name!r} is striped: it cannot be partitioned by a key.")
        # A striped semaphore's stripes (core/stripe_layout.py); its own calls are its first stripe's.
        self.stripe_calls = stripe_layout.stripe_calls(config) if self.partition is None else ()
        self.calls = self.stripe_calls[0] if self.stripe_calls else Calls.of(config, self.partition)
        self.keys = self.calls.keys
        self.lanes = Lanes(shares(config.limit, config.stripes)) if self.stripe_calls else None

    def __repr__(self) -> str:
        part = f" partition={self.partition[:8]}" if self.partition else ""
        return f"<Semaphore {self.name}{part} limit={self.config.limit}>"

    # -- acquire ---------------------------------------------------------

    @keyword_options(SyncAcquireOptions)
    def acquire(self, options: SyncAcquireOptions) -> Permit | None:
        """A ``Permit``, or None when the semaphore stayed full for ``wait`` seconds.

        Takes the keyword arguments of ``SyncAcquireOptions`` (core/calls.py,
        where each is documented): ``wait``, ``weight``, ``lease``,
        ``identity``, ``label``, ``metadata``, ``auto_renew``, ``on_lost``,
        ``max_hold`` and ``cancel``.
        """
        return self._attempt(options).permit

    @akeyword_options(AcquireOptions)
    async def aacquire(self, options: AcquireOptions) -> Permit | None:
        """``acquire`` on the asyncio client, for async views and tasks: the same keyword arguments but ``cancel``."""
        return (await self._aattempt(options)).permit

    @keyword_options(SyncAcquireOptions)
    def attempt(self, options: SyncAcquireOptions) -> Attempt:
        """Acquire and report the details (occupancy, Retry-After) whatever the outcome (``acquire``'s arguments).

        ``cancel``: setting that event, from any thread, ends the wait now as
        if it had run out; no permit is returned once it is set (core/cancel.py).
        """
        return self._attempt(options)

    @akeyword_options(AcquireOptions)
    async def aattempt(self, options: AcquireOptions) -> Attempt:
        """``attempt`` on the asyncio client (``aacquire``'s arguments)."""
        return await self._aattempt(options)

    def _attempt(self, options: SyncAcquireOptions) -> Attempt:
        request = options.request(self.config, self.calls)
        started = time.monotonic()
        try:
            attempt = self._attempted(request, options)
        except BaseException as exc:
            tally.failed(self.name, self.config.on_error, exc, started)
            raise
        event = options.cancel
        tally.ended(
            self.name, attempt.granted, request.wait > 0 < attempt.limit, bool(event and event.is_set()), started
        )
        return attempt

    def _attempted(self, request: AcquireRequest, options: SyncAcquireOptions) -> Attempt:
        with translated(self.name, self.partition):
            client = get_client()
            # The whole call, recording a new partition included, ends by its wait (or one socket timeout),
            # which starts once it has a connection: opening one has that bound of its own.
            bounded.open_ahead(client, self._asked_first(request), request.wait)
            deadline = bounded.budget(client, request.wait)
            recording = registry.SKIPPED
            if self.partition is not None and self.key is not None:
                recording = registry.admit(client, self.config, self.partition, self.key, deadline)
            request = _left_to_wait(request, deadline)
            confirm = replicas.confirmation(self.config, client) if self.config.replicas else None
            striped = None
            if self.lanes is not None:
                striped = StripedCall(self.lanes, self.stripe_calls, request)
                request, reply = self._striped(striped, client, confirm, options.cancel, deadline)
            elif options.cancel is None:
                reply = Driver(client, request, confirm, deadline).drive()
            else:
                reply = cancel.drive_cancellable(client, request, confirm, options.cancel, deadline)
            if confirm is not None and confirm.short(reply):
                scripts.run(client, request.release_call())
                _lane_freed(striped, request)
                raise replicas.unconfirmed(self.name, self.partition, confirm)
        return self._finish(request, reply, recording, options, client, striped=striped)

    def _asked_first(self, request: AcquireRequest) -> str:
        """A key on the server this call asks first (a striped one's likely stripe): whose connections it
        opens ahead. On a Cluster the stripes live on several masters; opening the name's own node's left
        the stripe's connection to be opened within the call's time, the cold start this is there to avoid."""
        if self.lanes is None:
            return self.keys.base
        return self.stripe_calls[asked_first(self.lanes, request.token, len(self.stripe_calls))].keys.base

    def _striped(
        self,
        call: StripedCall,
        client: SyncClient,
        confirm: ReplicaConfirmation | None,
        event: threading.Event | None,
        deadline: Deadline,
    ) -> tuple[AcquireRequest, AcquireReply]:
        """A striped semaphore's acquire: its own stripe, then one other if that one turned it away."""

        def drive(request: AcquireRequest) -> AcquireReply:
            if event is None:
                return Driver(client, request, confirm, deadline).drive()
            return cancel.drive_cancellable(client, request, confirm, event, deadline)

        sent, reply = call.first, None
        try:
            reply = drive(sent)
            second = call.second(reply, lambda asked: _left_to_wait(asked, deadline))
            if second is not None and not deadline.passed():  # passed: a slow leaving went to the background
                sent, reply = second, None
                reply = drive(sent)
        finally:
            call.ended(sent, reply)
        return sent, reply

    async def _aattempt(self, options: AcquireOptions) -> Attempt:
        """``_attempt`` on the asyncio client.

        It keeps its own body rather than sharing a driven core with
        ``_attempt``: the two differ in how the deadline is kept (the sync one
        passes it to each round trip on its own connections, this one cancels
        the task at it, core/bounded.py), and what they share (checking the
        call, recording a partition, reporting the outcome) is shared.
        """
        request = options.request(self.config, self.calls)
        started = time.monotonic()
        try:
            with translated(self.name, self.partition):
                client = await aclient()
                # The renewal thread renews on the sync client: settings that make none are an outage now,
                # not a permit granted that nobody can renew.
                renewing = get_client() if options.renewed(self.config) else None
                await bounded.aopen_ahead(client, request.wait)
                deadline = bounded.budget(client, request.wait)
                recording, request, reply, striped = await bounded.by(
                    deadline, self._aacquire(client, request, deadline)
                )
            attempt = self._finish(request, reply, recording, options, None, renewing=renewing, striped=striped)
        except BaseException as exc:
            tally.failed(self.name, self.config.on_error, exc, started)
            raise
        tally.ended(self.name, attempt.granted, request.wait > 0 < attempt.limit, False, started)
        return attempt

    async def _aacquire(
        self, client: AsyncClient, request: AcquireRequest, deadline: Deadline
    ) -> tuple[registry.Recording, AcquireRequest, AcquireReply, StripedCall | None]:
        """``aattempt``'s round trips, which its caller ends at ``deadline``; the request that got the reply."""
        recording = registry.SKIPPED
        if self.partition is not None and self.key is not None:
            recording = await registry.aadmit(client, self.config, self.partition, self.key)
        request = _left_to_wait(request, deadline)
        confirm: ReplicaConfirmation | None = (
            replicas.confirmation(self.config, client) if self.config.replicas else None
        )
        striped = None
        if self.lanes is None:
            reply = await Driver(client, request, confirm, deadline).adrive()
        else:
            striped = StripedCall(self.lanes, self.stripe_calls, request)
            request, reply = await self._astriped(striped, client, confirm, deadline)
        if confirm is not None and confirm.short(reply):
            await scripts.arun(client, request.release_call())
            _lane_freed(striped, request)
            raise replicas.unconfirmed(self.name, self.partition, confirm)
        return recording, request, reply, striped

    async def _astriped(
        self, call: StripedCall, client: AsyncClient, confirm: ReplicaConfirmation | None, deadline: Deadline
    ) -> tuple[AcquireRequest, AcquireReply]:
        """``_striped`` on the asyncio client."""
        sent, reply = call.first, None
        try:
            reply = await Driver(client, sent, confirm, deadline).adrive()
            second = call.second(reply, lambda asked: _left_to_wait(asked, deadline))
            if second is not None and not deadline.passed():  # passed: a slow leaving went to the background
                sent, reply = second, None
                reply = await Driver(client, sent, confirm, deadline).adrive()
        finally:
            call.ended(sent, reply)
        return sent, reply

    def _finish(
        self,
        request: AcquireRequest,
        reply: AcquireReply,
        recording: registry.Recording,
        options: AcquireOptions,
        client: SyncClient | None,
        *,
        renewing: SyncClient | None = None,
        striped: StripedCall | None = None,
    ) -> Attempt:
        """The attempt a reply stands for: a permit (renewed, signalled) or why there is none; errors raised.

        ``client`` is the sync client the call used (None on the asyncio path): the permit keeps it, so
        its release, renewals and clean-ups go where it was granted without asking the settings again.
        ``renewing``: on the asyncio path, the sync client of the settings the call was made under, for the
        renewal thread (None when the permit is not renewed). ``striped``: a striped semaphore's call, which
        says the stripe's lane the permit keeps.
        """
        if self.partition is not None and self.key is not None and recording.must_record_again(reply.fresh):
            # A partition this process had recorded, found evicted by its acquire, goes back in the registry.
            registry.record_again(self.config, self.partition, self.key)
        if reply.vanished:
            vanished.report_reply(self.name, self.partition, reply.vanished)
        if reply.code == TOO_HEAVY:
            if request.calls.stripe is not None:
                raise WeightAboveLimit(
                    f"Asked {request.weight} permits of {self.name!r}, whose stripes hold {reply.limit} or so each: "
                    "one call's permits come from one stripe."
                )
            raise WeightAboveLimit(f"Asked {request.weight} permits of {self.name!r}, whose limit is {reply.limit}.")
        if reply.code == OTHER_WEIGHT:
            raise WeightMismatch(
                f"This identity already holds or waits for permits of {self.name!r} with another weight "
                f"than {request.weight}; release it first."
            )
        if reply.code == TOO_LATE:
            error = BackendUnavailable(
                f"Redis ran the acquire of semaphore {self.name!r} after its caller had given up on it.",
                name=self.name,
                partition=self.partition,
            )
            signals.emit_for(signals.semaphore_backend_error, self, error=error)
            raise error
        if not reply.granted:
            retry = PAUSED_RETRY_AFTER if reply.limit == 0 else retry_after_seconds(reply.expected_free_ms)
            signals.emit_for(
                signals.semaphore_rejected,
                self,
                retry_after=retry,
                waited=reply.waited,
                used=reply.used,
                limit=reply.limit,
            )
            return Attempt(None, reply.used, reply.limit, reply.waiting, retry, reply.waited)
        renewed = options.renewed(self.config)
        if client is None:
            # The asyncio path: the renewal thread renews on the sync client of the settings the call was made under.
            client = renewing
        permit = Permit(
            self,
            reply,
            calls=request.calls,
            token=request.token,
            weight=request.weight,
            lease=request.lease_ms / 1000,
            expires_at=reply.expires_at,
            on_lost=options.on_lost,
            client=client,
        )
        if striped is not None and request.calls.stripe is not None:
            permit.lane = striped.lane_of(request.calls.stripe)
        if renewed:
            renewer.track(permit)
        if signals.listened(signals.semaphore_acquired):
            signals.emit_for(
                signals.semaphore_acquired,
                self,
                token=request.token,
                fence=reply.fence,
                weight=request.weight,
                waited=reply.waited,
            )
        return Attempt(permit, reply.used, reply.limit, reply.waiting, 0, reply.waited)

    # -- with / async with (the stack of entered permits: core/entered.py) -----------------------

    def __enter__(self) -> Permit:
        return entered.push(self, granted(self, self.attempt()))

    def __exit__(self, *exc: object) -> None:
        entered.pop(self).release()

    async def __aenter__(self) -> Permit:
        return entered.push(self, granted(self, await self.aattempt()))

    async def __aexit__(self, *exc: object) -> None:
        await entered.pop(self).arelease()


def granted(semaphore: Semaphore, attempt: Attempt) -> Permit:
    """The attempt's permit; ``SemaphoreFull`` raised when it got none (a ``with`` block, ``@limit``)."""
    if attempt.permit is None:
        raise refused(semaphore.name, semaphore.partition, attempt)
    return attempt.permit


def _lane_freed(striped: StripedCall | None, request: AcquireRequest) -> None:
    """A striped grant given back before it became a permit (replicas did not confirm it): its lane is free."""
    if striped is not None and request.calls.stripe is not None:
        lane = striped.lane_of(request.calls.stripe)
        if lane is not None:
            lane()


def _left_to_wait(request: AcquireRequest, deadline: Deadline) -> AcquireRequest:
    """The wait, less what recording a new partition took: the call as a whole ends by its deadline."""
    if request.wait <= 0 or deadline.at is None:
        return request
    return replace(request, wait=max(min(request.wait, deadline.left() - bounded.LEAVING), 0.0))


# Whole semaphores, looked up on every guarded request, are made once per settings: a settings change
# (the prefix, a semaphore's options) makes them anew, as it makes their configurations (core/conf.py).
_whole: dict[str, Semaphore] = {}
_whole_lock = threading.Lock()


def get_semaphore(name: str, key: Any = None) -> Semaphore:
    """The semaphore ``name`` from ``settings.SEMAPHORES`` (one partition of it if ``key``)."""
    if key is None:
        found = _whole.get(name)
        if found is not None:
            return found
    config = config_for(name)
    if config is None:
        raise UnknownSemaphore(name, list(declared()))
    if key is not None:
        return Semaphore(config, key)
    with _whole_lock:
        return _whole.setdefault(name, Semaphore(config))


def _forget_whole(**kwargs: Any) -> None:
    with _whole_lock:
        _whole.clear()


setting_changed.connect(_forget_whole, dispatch_uid="django_semaphore.semaphore")


def all_semaphores() -> list[Semaphore]:
    """Every declared semaphore, in settings order."""
    return [get_semaphore(name) for name in declared()]
