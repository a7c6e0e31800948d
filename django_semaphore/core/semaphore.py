"""The semaphore: acquire, release, renew, inspect, all one script each."""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass, replace
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
from redis.cluster import RedisCluster

from .. import signals
from ..exceptions import BackendUnavailable, SemaphoreFull, UnknownSemaphore, WeightAboveLimit, WeightMismatch
from . import backend, bounded, registry, scripts, vanished
from .bounded import Deadline
from .calls import Calls
from .cancel import CancellableClock, watching
from .clients import AsyncClient, SyncClient
from .conf import MAX_LIMIT, MAX_SECONDS, SemaphoreConfig, config_for, declared, key_prefix
from .connection import aclient, get_client, socket_timeout
from .drivers import OUTAGE_ERRORS, ReplicaConfirmation, adrive, drive, server_clock
from .flow import AcquireRequest, acquire_flow
from .keys import SemaphoreKeys, hash_partition
from .permit import Permit
from .renewal import renewer
from .results import FULL, OTHER_WEIGHT, TOO_HEAVY, TOO_LATE, AcquireReply, SemaphoreStatus, retry_after_seconds
from .tokens import holder_metadata, identity_token, new_nonce, new_token

__all__ = ["OUTAGE_ERRORS", "PAUSED_RETRY_AFTER", "Attempt", "Semaphore", "all_semaphores", "get_semaphore"]


class _Default:
    """The semaphore's own setting applies (None means something else: "no bound")."""

    def __repr__(self) -> str:
        return "DEFAULT"


DEFAULT: Any = _Default()

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


# The permits a `with` / `async with` block entered, innermost last. A context
# variable, not an attribute: threads and tasks sharing one Semaphore object
# must each leave with their own permit.
_entered: ContextVar[tuple[tuple[Semaphore, Permit], ...]] = ContextVar("django_semaphore_entered", default=())


def _seconds(value: object, name: str, *, zero_allowed: bool) -> float:
    """A per-call duration, checked as the settings are: a finite number, at most ten years."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        raise TypeError(f"{name} must be a number of seconds, not {type(value).__name__}.")
    if not math.isfinite(value) or value < 0 or (value == 0 and not zero_allowed) or value > MAX_SECONDS:
        bound = ">= 0" if zero_allowed else "> 0"
        raise ValueError(f"{name} must be a finite number of seconds {bound} (ten years at most), not {value!r}.")
    return float(value)


def _weight(value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"weight must be an integer, not {type(value).__name__}.")
    if not 1 <= value <= MAX_LIMIT:
        raise ValueError(f"weight must be an integer from 1 to {MAX_LIMIT}, not {value!r}.")
    return value


class Semaphore:
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
        self.keys = SemaphoreKeys.build(key_prefix(), self.name, self.partition)
        self.calls = Calls(self.keys, config.wire(self.partition is not None))

    def __repr__(self) -> str:
        part = f" partition={self.partition[:8]}" if self.partition else ""
        return f"<Semaphore {self.name}{part} limit={self.config.limit}>"

    # -- acquire ---------------------------------------------------------

    def _request(
        self,
        *,
        wait: float | None = None,
        weight: int | None = None,
        lease: float | None = None,
        identity: str | None = None,
        label: str | None = None,
        metadata: dict[str, Any] | None = None,
        auto_renew: bool | None = None,
        max_hold: float | None = DEFAULT,
    ) -> AcquireRequest:
        """Check every per-call value (no caller may corrupt the shared state) and fix the call."""
        config = self.config
        weight = _weight(config.weight if weight is None else weight)
        lease = _seconds(config.lease if lease is None else lease, "lease", zero_allowed=False)
        wait = _seconds(config.wait if wait is None else wait, "wait", zero_allowed=True)
        hold = config.max_hold if max_hold is DEFAULT else max_hold
        hold_ms = 0 if hold is None else max(int(_seconds(hold, "max_hold", zero_allowed=False) * 1000), 1)
        if identity is not None and not isinstance(identity, str):
            raise TypeError(f"identity must be a string, not {type(identity).__name__}.")
        renewing = config.auto_renew if auto_renew is None else auto_renew
        return AcquireRequest(
            calls=self.calls,
            token=identity_token(identity) if identity is not None else new_token(),
            nonce=new_nonce(),
            weight=weight,
            lease_ms=max(int(lease * 1000), 1),
            hold_ms=hold_ms,
            metadata=holder_metadata(label, metadata),
            wait=wait,
            waiter_ttl=config.waiter_ttl,
            renewed_in_background=renewing,
            replicated=config.replicas > 0,
        )

    def attempt(
        self,
        *,
        wait: float | None = None,
        weight: int | None = None,
        lease: float | None = None,
        identity: str | None = None,
        label: str | None = None,
        metadata: dict[str, Any] | None = None,
        auto_renew: bool | None = None,
        on_lost: Callable[[Permit], Any] | None = None,
        max_hold: float | None = DEFAULT,
        cancel: threading.Event | None = None,
    ) -> Attempt:
        """Acquire and report the details (occupancy, Retry-After) whatever the outcome.

        ``cancel``: setting this event (from any thread) ends the wait now, as
        if it had run out; no permit is returned once it is set (core/cancel.py).
        """
        request = self._request(
            wait=wait,
            weight=weight,
            lease=lease,
            identity=identity,
            label=label,
            metadata=metadata,
            auto_renew=auto_renew,
            max_hold=max_hold,
        )
        with backend.translated(self.name, self.partition):
            client = get_client()
            # The whole call, recording a new partition included, ends by its wait (or one socket timeout).
            deadline = bounded.budget(client, request.wait)
            recording = registry.SKIPPED
            if self.partition is not None and self.key is not None:
                recording = registry.admit(client, self.config, self.partition, self.key, deadline)
            request = _left_to_wait(request, deadline)
            confirm = self._confirmation(client)
            if cancel is None:
                reply = drive(client, request, acquire_flow(request), socket_timeout(client), confirm, deadline)
            else:
                reply = self._drive_cancellable(client, request, confirm, cancel, deadline)
            if confirm is not None and confirm.short(reply):
                scripts.run(client, self.calls.release(request.token, nonce=request.nonce))
                raise self._unconfirmed(confirm)
        self._record_again(recording, reply)
        return self._finish(request, reply, auto_renew, on_lost)

    def _record_again(self, recording: registry.Recording, reply: AcquireReply) -> None:
        """A partition this process had recorded, found evicted by its acquire, goes back in the registry."""
        if self.partition is not None and self.key is not None and recording.must_record_again(reply.fresh):
            registry.record_again(self.config, self.partition, self.key)

    def _drive_cancellable(
        self,
        client: SyncClient,
        request: AcquireRequest,
        confirm: ReplicaConfirmation | None,
        cancel: threading.Event,
        deadline: Deadline,
    ) -> AcquireReply:
        """``drive`` with a wait that ``cancel`` ends (see core/cancel.py); a grant that raced it goes back."""
        started = time.monotonic()
        flow = acquire_flow(request, CancellableClock(cancel))
        with watching(cancel, lambda: scripts.run(client, request.cancel_call(unblock=True))):
            reply = drive(client, request, flow, socket_timeout(client), confirm, deadline)
        if cancel.is_set() and reply.granted:
            scripts.run(client, self.calls.release(request.token, nonce=request.nonce))
            reply = replace(reply, code=FULL)
        return replace(reply, waited=time.monotonic() - started)

    async def aattempt(
        self,
        *,
        wait: float | None = None,
        weight: int | None = None,
        lease: float | None = None,
        identity: str | None = None,
        label: str | None = None,
        metadata: dict[str, Any] | None = None,
        auto_renew: bool | None = None,
        on_lost: Callable[[Permit], Any] | None = None,
        max_hold: float | None = DEFAULT,
    ) -> Attempt:
        """``attempt`` on the asyncio client, for async views and tasks."""
        request = self._request(
            wait=wait,
            weight=weight,
            lease=lease,
            identity=identity,
            label=label,
            metadata=metadata,
            auto_renew=auto_renew,
            max_hold=max_hold,
        )
        with backend.translated(self.name, self.partition):
            client = await aclient()
            deadline = bounded.budget(client, request.wait)
            recording, reply = await bounded.by(deadline, self._aacquire(client, request, deadline))
        self._record_again(recording, reply)
        return self._finish(request, reply, auto_renew, on_lost)

    async def _aacquire(
        self, client: AsyncClient, request: AcquireRequest, deadline: Deadline
    ) -> tuple[registry.Recording, AcquireReply]:
        """``aattempt``'s round trips, which its caller ends at ``deadline``."""
        recording = registry.SKIPPED
        if self.partition is not None and self.key is not None:
            recording = await registry.aadmit(client, self.config, self.partition, self.key)
        request = _left_to_wait(request, deadline)
        confirm = self._confirmation(client)
        reply = await adrive(client, request, acquire_flow(request), socket_timeout(client), confirm, deadline)
        if confirm is not None and confirm.short(reply):
            await scripts.arun(client, self.calls.release(request.token, nonce=request.nonce))
            raise self._unconfirmed(confirm)
        return recording, reply

    def _finish(
        self,
        request: AcquireRequest,
        reply: AcquireReply,
        auto_renew: bool | None,
        on_lost: Callable[[Permit], Any] | None,
    ) -> Attempt:
        common: dict[str, Any] = {"name": self.name, "partition": self.partition}
        vanished.report_reply(self.name, self.partition, reply.vanished)
        if reply.code == TOO_HEAVY:
            raise WeightAboveLimit(f"Asked {request.weight} permits of {self.name!r}, whose limit is {reply.limit}.")
        if reply.code == OTHER_WEIGHT:
            raise WeightMismatch(
                f"This identity already holds or waits for permits of {self.name!r} with another weight "
                f"than {request.weight}; release it first."
            )
        if reply.code == TOO_LATE:
            error = BackendUnavailable(
                f"Redis ran the acquire of semaphore {self.name!r} after its caller had given up on it.", **common
            )
            signals.emit(signals.semaphore_backend_error, error=error, **common)
            raise error
        if not reply.granted:
            retry = PAUSED_RETRY_AFTER if reply.limit == 0 else retry_after_seconds(reply.expected_free_ms)
            signals.emit(
                signals.semaphore_rejected,
                retry_after=retry,
                waited=reply.waited,
                used=reply.used,
                limit=reply.limit,
                **common,
            )
            return Attempt(None, reply.used, reply.limit, reply.waiting, retry, reply.waited)
        permit = Permit(
            name=self.name,
            partition=self.partition,
            calls=self.calls,
            token=request.token,
            fence=reply.fence,
            weight=request.weight,
            lease=request.lease_ms / 1000,
            lease_deadline_ms=reply.lease_deadline_ms,
            expires_at=reply.expires_at,
            on_lost=on_lost,
        )
        if self.config.auto_renew if auto_renew is None else auto_renew:
            # A permit handed over on a short claim is renewed at once: its caller holds it already.
            renewer.track(permit)
        signals.emit(
            signals.semaphore_acquired,
            token=request.token,
            fence=reply.fence,
            weight=request.weight,
            waited=reply.waited,
            **common,
        )
        return Attempt(permit, reply.used, reply.limit, reply.waiting, 0, reply.waited)

    def _confirmation(self, client: SyncClient | AsyncClient) -> ReplicaConfirmation | None:
        if not self.config.replicas:
            return None
        if isinstance(client, (RedisCluster, AsyncRedisCluster)):
            raise ImproperlyConfigured(
                f"SEMAPHORES[{self.name!r}]['replicas'] needs a standalone or Sentinel connection, not Redis Cluster."
            )
        return ReplicaConfirmation(self.config.replicas, int(self.config.replica_timeout * 1000))

    def _unconfirmed(self, confirm: ReplicaConfirmation) -> BackendUnavailable:
        error = BackendUnavailable(
            f"Only {confirm.acked} of {confirm.replicas} replicas confirmed the permit of semaphore {self.name!r} "
            f"within {confirm.timeout_ms} ms; it was given back.",
            name=self.name,
            partition=self.partition,
        )
        signals.emit(signals.semaphore_backend_error, name=self.name, partition=self.partition, error=error)
        return error

    def acquire(self, **options: Any) -> Permit | None:
        """A ``Permit``, or None when the semaphore stayed full for ``wait`` seconds."""
        return self.attempt(**options).permit

    async def aacquire(self, **options: Any) -> Permit | None:
        return (await self.aattempt(**options)).permit

    def _full(self, attempt: Attempt) -> SemaphoreFull:
        return SemaphoreFull(
            self.name,
            self.partition,
            attempt.retry_after,
            used=attempt.used,
            limit=attempt.limit,
            waiting=attempt.waiting,
        )

    def __enter__(self) -> Permit:
        attempt = self.attempt()
        if attempt.permit is None:
            raise self._full(attempt)
        _entered.set((*_entered.get(), (self, attempt.permit)))
        return attempt.permit

    def __exit__(self, *exc: object) -> None:
        self._leave().release()

    async def __aenter__(self) -> Permit:
        attempt = await self.aattempt()
        if attempt.permit is None:
            raise self._full(attempt)
        _entered.set((*_entered.get(), (self, attempt.permit)))
        return attempt.permit

    async def __aexit__(self, *exc: object) -> None:
        await self._leave().arelease()

    def _leave(self) -> Permit:
        """The permit this thread or task entered last with this semaphore."""
        stack = _entered.get()
        for index in range(len(stack) - 1, -1, -1):
            if stack[index][0] is self:
                _entered.set(stack[:index] + stack[index + 1 :])
                return stack[index][1]
        raise RuntimeError(f"{self!r} was not entered in this thread or task.")

    # -- inspection and operator actions ---------------------------------

    def status(self, max_holders: int = 100, *, history: bool = False) -> SemaphoreStatus:
        """Limit, use, waiters, counters and holders; reclaims expired holders first.

        ``history=True`` adds the last hour of utilisation samples.
        """
        reply = backend.run(self.calls.status(max_holders, history), self.name, self.partition)
        return self._parsed_status(reply)

    async def astatus(self, max_holders: int = 100, *, history: bool = False) -> SemaphoreStatus:
        reply = await backend.arun(self.calls.status(max_holders, history), self.name, self.partition)
        return self._parsed_status(reply)

    def _parsed_status(self, reply: Any) -> SemaphoreStatus:
        """The status, and the server's clock it read: a later acquire is then refused once abandoned.

        Without a reading, an acquire carries no "not after" bound: a caller
        who gave up on a stalled server (its command already in the server's
        buffers, as Redis 6.2 runs a paused client's) would leave a permit
        granted to nobody until the background clean-up returns it. Keys
        found gone under held permits are reported here too (core/vanished.py).
        """
        vanished.report_status(self.name, self.partition, reply)
        status = SemaphoreStatus.parse(self.name, self.partition, self.config.limit, reply, self.config.adaptive)
        server_clock.observe(self.keys.base, status.now_ms, time.monotonic())
        return status

    def force_release(self, token: str) -> bool:
        """Take one holder's permit away (an operator's fix for a stuck holder); an empty token takes nothing."""
        if not token:
            return False
        return bool(self._force(token))

    def force_release_all(self) -> list[str]:
        """Take every holder's permit away; returns their tokens."""
        return self._force(None)

    def _force(self, token: str | None) -> list[str]:
        released = backend.run(self.calls.force_release(token), self.name, self.partition)
        return [t.decode() if isinstance(t, bytes) else str(t) for t in released]

    def set_limit(self, limit: int | None) -> int:
        """Override the limit at run time (0 pauses; None clears the override); returns the limit in force."""
        if limit is None:
            return self._limit("clear")
        if not isinstance(limit, int) or isinstance(limit, bool) or not 0 <= limit <= MAX_LIMIT:
            raise ValueError(f"A limit override must be an integer from 0 to {MAX_LIMIT}.")
        return self._limit("set", limit)

    def add_permits(self, change: int) -> int:
        """Raise (or, negative, lower) the limit in force atomically; returns the new limit.

        Two operators or an autoscaler adding at once never lose an update;
        the result stays between 0 (paused) and the maximum.
        """
        if not isinstance(change, int) or isinstance(change, bool) or not -MAX_LIMIT <= change <= MAX_LIMIT:
            raise ValueError(f"A change of the limit must be an integer from -{MAX_LIMIT} to {MAX_LIMIT}.")
        return self._limit("add", change)

    def _limit(self, operation: str, value: int = 0) -> int:
        return int(backend.run(self.calls.set_limit(operation, value), self.name, self.partition))

    def partitions(self, limit: int = 1000) -> dict[str, str]:
        """A keyed semaphore's partitions used most recently, newest first: hash -> key (shortened).

        At most ``limit``: keys a client chooses can make millions, and this
        read must not grow with them. ``partition_count()`` says how many
        there are, ``iter_partitions()`` pages through them all. Entries read
        whose partition has expired (idle longer than
        ``SEMAPHORE_PARTITION_IDLE``) are pruned from the registry here.
        """
        with backend.translated(self.name, self.partition):
            return registry.recent(get_client(), self.name, limit)

    def partition_count(self) -> int:
        """How many partitions the registry holds (recorded within two idle periods)."""
        with backend.translated(self.name, self.partition):
            return registry.count(get_client(), self.name)

    def partition_label(self, partition: str) -> str | None:
        """The key of a registered partition, by hash; None if the registry does not know it."""
        with backend.translated(self.name, self.partition):
            return registry.label(get_client(), self.name, partition)

    def iter_partitions(self, page: int = 1000) -> Iterator[tuple[str, str]]:
        """Every registered partition (hash, key), read in cursor pages of about ``page``."""
        seen: set[str] = set()
        with backend.translated(self.name, self.partition):
            for listed in registry.pages(get_client(), self.name, page):
                for partition, label in listed.items():
                    if partition not in seen:
                        seen.add(partition)
                        yield partition, label

    def partition_statuses(
        self, max_partitions: int = 1000, max_holders: int = 100, *, partitions: list[str] | None = None
    ) -> list[SemaphoreStatus]:
        """The status of each known partition of a keyed semaphore, pipelined.

        One round trip for all of them, so a dashboard of a per-user limit
        does not cost one call per user; ``max_partitions`` bounds the work.
        Pass ``partitions`` (hashes) when ``partitions()`` was just read.
        """
        known = list(self.partitions(max_partitions)) if partitions is None else partitions
        parts = [Semaphore(self.config, partition=p) for p in known[:max_partitions]]
        with backend.translated(self.name, self.partition):
            replies = scripts.run_pipeline(get_client(), [part.calls.status(max_holders, False) for part in parts])
        for part, reply in zip(parts, replies, strict=True):
            if isinstance(reply, Exception):
                raise reply
            vanished.report_status(self.name, part.partition, reply)
        return [
            SemaphoreStatus.parse(self.name, part.partition, self.config.limit, reply)
            for part, reply in zip(parts, replies, strict=True)
        ]


def _left_to_wait(request: AcquireRequest, deadline: Deadline) -> AcquireRequest:
    """The wait, less what recording a new partition took: the call as a whole ends by its deadline."""
    if request.wait <= 0 or deadline.at is None:
        return request
    return replace(request, wait=max(min(request.wait, deadline.left() - bounded.LEAVING), 0.0))


def get_semaphore(name: str, key: Any = None) -> Semaphore:
    """The semaphore ``name`` from ``settings.SEMAPHORES`` (one partition of it if ``key``)."""
    config = config_for(name)
    if config is None:
        raise UnknownSemaphore(name, list(declared()))
    return Semaphore(config, key)


def all_semaphores() -> list[Semaphore]:
    """Every declared semaphore, in settings order."""
    return [get_semaphore(name) for name in declared()]
