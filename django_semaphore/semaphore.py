"""The semaphore: acquire, release, renew, inspect, all one script each."""

from __future__ import annotations

import json
import os
import secrets
import socket
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.utils.crypto import salted_hmac
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
from redis.cluster import RedisCluster

from . import registry, scripts, signals
from .conf import MAX_LIMIT, SemaphoreConfig, app_setting, declared, key_prefix
from .connection import aclient, get_client, socket_timeout
from .drivers import OUTAGE_ERRORS, Flow, ReplicaConfirmation, adrive, drive
from .exceptions import BackendUnavailable, SemaphoreFull, UnknownSemaphore, WeightAboveLimit
from .flow import FlowResult, RunScript, acquire_flow
from .keys import SemaphoreKeys, hash_partition
from .permit import Permit
from .renewal import renewer
from .results import HANDED, TOO_HEAVY, AcquireReply, SemaphoreStatus, retry_after_seconds

__all__ = ["OUTAGE_ERRORS", "Attempt", "Semaphore", "all_semaphores", "get_semaphore"]

METADATA_LIMIT = 2000
# Utilisation history (whole semaphores only, not per-partition): one sample
# per 10 s at most, an hour of them.
HISTORY_EVERY_MS = 10_000
HISTORY_KEEP = 360


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


# The permits a `with` / `async with` block entered, innermost last. A context
# variable, not an attribute: threads and tasks sharing one Semaphore object
# must each leave with their own permit.
_entered: ContextVar[tuple[tuple[Semaphore, Permit], ...]] = ContextVar("django_semaphore_entered", default=())


@lru_cache(maxsize=1)
def _host() -> str:
    return socket.gethostname()


def _identity_token(identity: str) -> str:
    """A holder token derived from the identity, keyed with SECRET_KEY.

    Whoever knows an identity but not the site's secret still cannot forge
    the token that releases or renews its permit.
    """
    digest = salted_hmac("django_semaphore.identity", _wire(identity), algorithm="sha256")
    return "id-" + digest.hexdigest()[:32]


def _wire(text: str | bytes) -> bytes:
    """Text as sent to Redis; operators' and callers' input may hold any code point."""
    return text if isinstance(text, bytes) else str(text).encode("utf-8", "surrogatepass")


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
        self.keys = SemaphoreKeys.build(key_prefix(), self.name, self.partition)

    def __repr__(self) -> str:
        part = f" partition={self.partition[:8]}" if self.partition else ""
        return f"<Semaphore {self.name}{part} limit={self.config.limit}>"

    # -- acquire ---------------------------------------------------------

    def _plan(
        self,
        wait: float | None,
        weight: int | None,
        lease: float | None,
        identity: str | None,
        label: str | None,
        metadata: dict[str, Any] | None,
    ) -> tuple[str, int, float, Flow, list[RunScript]]:
        weight = self.config.weight if weight is None else weight
        if weight < 1:
            raise ValueError("weight must be >= 1")
        lease = self.config.lease if lease is None else lease
        wait = self.config.wait if wait is None else wait
        token = _identity_token(identity) if identity is not None else secrets.token_hex(16)
        meta = json.dumps({"host": _host(), "pid": os.getpid(), "label": label, **(metadata or {})}, default=str)[
            :METADATA_LIMIT
        ]
        args = [
            token,
            weight,
            self.config.limit,
            int(lease * 1000),
            "wait" if wait > 0 else "try",
            int(self.config.waiter_ttl * 1000),
            meta,
            self.keys.base,
            self._wake_ttl_ms,
            *self._history_args,
            self._idle_ms,
        ]
        cancel_args = [token, self.config.limit, self.keys.base, self._wake_ttl_ms]
        cancel_keys = [
            self.keys.queue,
            self.keys.alive,
            self.keys.qweight,
            self.keys.state,
            self.keys.wake(token),
            self.keys.holders,
            self.keys.info,
        ]
        flow = acquire_flow(
            [*self.keys.common, self.keys.wake(token)],
            args,
            cancel_keys,
            cancel_args,
            self.keys.wake(token),
            wait,
            self.config.waiter_ttl,
        )
        # If the caller is interrupted, a permit may have been granted unseen
        # and its place in line may still be held: give both back.
        abandon = [
            RunScript("release", *self._release_call(token, unsure=True)),
            RunScript("cancel", cancel_keys, cancel_args),
        ]
        return token, weight, lease, flow, abandon

    @property
    def _history_args(self) -> list[int]:
        return [0 if self.partition else HISTORY_EVERY_MS, HISTORY_KEEP]

    @property
    def _idle_ms(self) -> int:
        """How long a partition's keys outlive its last lease (whole semaphores: forever)."""
        return int(app_setting("SEMAPHORE_PARTITION_IDLE") * 1000) if self.partition else 0

    def _on_claim(self, reply: AcquireReply, lease: float) -> bool:
        """Whether the permit was handed over on a claim shorter than its lease."""
        return reply.code == HANDED and lease * 1000 > self._claim_ms

    def _renews_itself(self, result: FlowResult, lease: float, auto_renew: bool | None) -> bool:
        """A permit on a claim that no background renewal will extend: the caller must."""
        renewing = self.config.auto_renew if auto_renew is None else auto_renew
        return not renewing and self._on_claim(result.reply, lease)

    @property
    def _claim_ms(self) -> int:
        """How long a permit handed to a waiter lives until the waiter renews it."""
        return int(self.config.waiter_ttl * 2000)

    @property
    def _wake_ttl_ms(self) -> int:
        return int(self.config.waiter_ttl * 2000)

    def _finish(
        self,
        token: str,
        weight: int,
        lease: float,
        result: FlowResult,
        auto_renew: bool | None,
        on_lost: Callable[[Permit], Any] | None,
    ) -> Attempt:
        reply = result.reply
        if reply.code == TOO_HEAVY:
            raise WeightAboveLimit(f"Asked {weight} permits of {self.name!r}, whose limit is {reply.limit}.")
        common = {"name": self.name, "partition": self.partition}
        if not reply.granted:
            retry = retry_after_seconds(reply.expected_free_ms)
            signals.emit(
                signals.semaphore_rejected,
                retry_after=retry,
                waited=result.waited,
                used=reply.used,
                limit=reply.limit,
                **common,
            )
            return Attempt(None, reply.used, reply.limit, reply.waiting, retry, result.waited)
        permit = Permit(self, token, reply.fence, weight, lease, reply.lease_deadline_ms, on_lost)
        if self.config.auto_renew if auto_renew is None else auto_renew:
            # A permit handed over on a short claim is renewed at once, in the
            # background: the caller holds it already.
            renewer.track(permit, soon=self._on_claim(reply, lease))
        signals.emit(
            signals.semaphore_acquired, token=token, fence=reply.fence, weight=weight, waited=result.waited, **common
        )
        return Attempt(permit, reply.used, reply.limit, reply.waiting, 0, result.waited)

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
    ) -> Attempt:
        """Acquire and report the details (occupancy, Retry-After) whatever the outcome."""
        token, weight, lease, flow, abandon = self._plan(wait, weight, lease, identity, label, metadata)
        with self._backend():
            client = get_client()
            confirm = self._confirmation(client)
            result = drive(client, flow, abandon, socket_timeout(client), confirm)
            if confirm is not None and confirm.short(result):
                self._release(token)
                raise self._unconfirmed(confirm)
            if result.reply.granted and self.partition is not None and self.key is not None:
                registry.record(client, self.name, self.partition, self.key)
        attempt = self._finish(token, weight, lease, result, auto_renew, on_lost)
        if attempt.permit is not None and self._renews_itself(result, lease, auto_renew):
            attempt.permit.renew()
        return attempt

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
    ) -> Attempt:
        """``attempt`` on the asyncio client, for async views and tasks."""
        token, weight, lease, flow, abandon = self._plan(wait, weight, lease, identity, label, metadata)
        with self._backend():
            client = await aclient()
            confirm = self._confirmation(client)
            result = await adrive(client, flow, abandon, socket_timeout(client), confirm)
            if confirm is not None and confirm.short(result):
                await self._arelease(token)
                raise self._unconfirmed(confirm)
            if result.reply.granted and self.partition is not None and self.key is not None:
                await registry.arecord(client, self.name, self.partition, self.key)
        attempt = self._finish(token, weight, lease, result, auto_renew, on_lost)
        if attempt.permit is not None and self._renews_itself(result, lease, auto_renew):
            await attempt.permit.arenew()
        return attempt

    def _confirmation(self, client: Any) -> ReplicaConfirmation | None:
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

    # -- holder operations (used by Permit) ------------------------------

    def _release_call(self, token: str, *, unsure: bool = False) -> tuple[list[str], list[Any]]:
        return self.keys.common, [
            _wire(token),
            self.config.limit,
            self.keys.base,
            self._wake_ttl_ms,
            *self._history_args,
            self._idle_ms,
            1 if unsure else 0,
            self._claim_ms,
        ]

    def _release(self, token: str) -> bool:
        with self._backend():
            return bool(scripts.run(get_client(), "release", *self._release_call(token))[0])

    async def _arelease(self, token: str) -> bool:
        with self._backend():
            return bool((await scripts.arun(await aclient(), "release", *self._release_call(token)))[0])

    def _renew_call(self, token: str, lease: float) -> tuple[list[str], list[Any]]:
        return [self.keys.holders, self.keys.info, self.keys.state], [_wire(token), int(lease * 1000), self._idle_ms]

    def _renew(self, token: str, lease: float) -> int | None:
        with self._backend():
            ok, deadline, _ = scripts.run(get_client(), "renew", *self._renew_call(token, lease))
        return int(deadline) if ok else None

    async def _arenew(self, token: str, lease: float) -> int | None:
        with self._backend():
            ok, deadline, _ = await scripts.arun(await aclient(), "renew", *self._renew_call(token, lease))
        return int(deadline) if ok else None

    # -- inspection and operator actions ---------------------------------

    def _status_args(self, max_holders: int, history: bool) -> list[Any]:
        return [
            self.config.limit,
            max_holders,
            self.keys.base,
            self._wake_ttl_ms,
            *self._history_args,
            1 if history else 0,
            self._idle_ms,
        ]

    def status(self, max_holders: int = 100, *, history: bool = False) -> SemaphoreStatus:
        """Limit, use, waiters, counters and holders; reclaims expired holders first.

        ``history=True`` adds the last hour of utilisation samples.
        """
        with self._backend():
            reply = scripts.run(get_client(), "status", self.keys.common, self._status_args(max_holders, history))
        return SemaphoreStatus.parse(self.name, self.partition, self.config.limit, reply)

    async def astatus(self, max_holders: int = 100, *, history: bool = False) -> SemaphoreStatus:
        with self._backend():
            reply = await scripts.arun(
                await aclient(), "status", self.keys.common, self._status_args(max_holders, history)
            )
        return SemaphoreStatus.parse(self.name, self.partition, self.config.limit, reply)

    def force_release(self, token: str) -> bool:
        """Take one holder's permit away (an operator's fix for a stuck holder)."""
        return bool(self._force(token))

    def force_release_all(self) -> list[str]:
        """Take every holder's permit away; returns their tokens."""
        return self._force("")

    def _force(self, token: str) -> list[str]:
        with self._backend():
            released = scripts.run(
                get_client(),
                "force_release",
                self.keys.common,
                [
                    _wire(token),
                    self.config.limit,
                    self.keys.base,
                    self._wake_ttl_ms,
                    *self._history_args,
                    self._idle_ms,
                ],
            )
        return [t.decode() if isinstance(t, bytes) else str(t) for t in released]

    def set_limit(self, limit: int | None) -> int:
        """Override the limit at run time (None clears it); returns the limit in force."""
        if limit is not None and (not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= MAX_LIMIT):
            raise ValueError(f"A limit override must be an integer from 1 to {MAX_LIMIT}.")
        with self._backend():
            return int(
                scripts.run(
                    get_client(),
                    "set_limit",
                    [self.keys.state, self.keys.queue, self.keys.holders],
                    [
                        "" if limit is None else limit,
                        self.config.limit,
                        self.keys.base,
                        self._wake_ttl_ms,
                        self._idle_ms,
                    ],
                )
            )

    def partitions(self) -> dict[str, str]:
        """Partitions of a keyed semaphore in use lately: hash -> key (shortened).

        Entries whose partition keys have expired (idle longer than
        ``SEMAPHORE_PARTITION_IDLE``) are pruned from the registry here.
        """
        with self._backend():
            return registry.read(get_client(), self.name)

    def partition_statuses(
        self, max_partitions: int = 1000, max_holders: int = 100, *, partitions: list[str] | None = None
    ) -> list[SemaphoreStatus]:
        """The status of each known partition of a keyed semaphore, pipelined.

        One round trip for all of them, so a dashboard of a per-user limit
        does not cost one call per user; ``max_partitions`` bounds the work.
        Pass ``partitions`` (hashes) when ``partitions()`` was just read.
        """
        known = list(self.partitions()) if partitions is None else partitions
        parts = [Semaphore(self.config, partition=p) for p in known[:max_partitions]]
        with self._backend():
            pipe = get_client().pipeline(transaction=False)
            for part in parts:
                scripts.run(pipe, "status", part.keys.common, part._status_args(max_holders, False))
            replies = pipe.execute()
        return [
            SemaphoreStatus.parse(self.name, part.partition, self.config.limit, reply)
            for part, reply in zip(parts, replies, strict=True)
        ]

    # -- plumbing ---------------------------------------------------------

    @contextmanager
    def _backend(self) -> Iterator[None]:
        try:
            yield
        except OUTAGE_ERRORS as exc:
            signals.emit(signals.semaphore_backend_error, name=self.name, partition=self.partition, error=exc)
            raise BackendUnavailable(
                f"Redis unavailable for semaphore {self.name!r}: {exc}", name=self.name, partition=self.partition
            ) from exc


def get_semaphore(name: str, key: Any = None) -> Semaphore:
    """The semaphore ``name`` from ``settings.SEMAPHORES`` (one partition of it if ``key``)."""
    options = declared().get(name)
    if options is None:
        raise UnknownSemaphore(name, list(declared()))
    return Semaphore(SemaphoreConfig.from_options(name, options), key)


def all_semaphores() -> list[Semaphore]:
    """Every declared semaphore, in settings order."""
    return [get_semaphore(name) for name in declared()]
