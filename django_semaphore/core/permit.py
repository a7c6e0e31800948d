"""A held permit: the proof of ownership that release and renew need."""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from typing import Any

from . import bounded, connection, signals, vanished
from .adaptive import release_reply
from .calls import Calls, ScriptCall
from .clients import SyncClient
from .conf import MAX_SECONDS
from .renewal import renewer
from .replies import GrantReply, RenewReply, SemaphoreStatus
from .tally import EXPIRED, MAX_HOLD, RELEASED, REVOKED, tally

logger = logging.getLogger("django_semaphore.permits")

# Holders ``is_held`` reads at first; more only when the semaphore has more and this one was not among them.
HOLDERS_LISTED = 1000


def _positive_seconds(value: object, name: str) -> float:
    """A duration as ``acquire`` takes one: a finite number of seconds above 0, ten years at most."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        raise TypeError(f"{name} must be a number of seconds, not {type(value).__name__}.")
    if not math.isfinite(value) or not 0 < value <= MAX_SECONDS:
        raise ValueError(f"{name} must be a finite number of seconds > 0 (ten years at most), not {value!r}.")
    return float(value)


class Permit:
    """``weight`` permits of one semaphore, owned through ``token``.

    ``fence`` strictly increases with every grant of the semaphore: hand it
    to the resource you protect so it can refuse a holder whose lease ran out
    while it was paused (see README, "Fencing tokens"). A striped semaphore's
    fences increase per stripe: ``stripe`` says which, and ``(stripe, fence)``
    is what a resource compares (docs/guides/leases-and-fencing.md).
    """

    # How every permit starts: class attributes, which an instance overrides once its own changes, so that
    # a grant (the busiest path) writes only what it was given.
    released = False
    lost = False
    # The lease reached the max hold: no renewal extends it any more.
    final = False
    # Set before the release script runs, so a renewal racing with it
    # (and finding the token gone) is not mistaken for a lost lease.
    _releasing = False
    # The release failed or was cut short: the background retries it until the lease would end.
    _unconfirmed = False
    # When its holder let it go (monotonic): the end of its hold time.
    _let_go_at = 0.0
    # What frees the lane a striped semaphore's permit holds in its process once it ends
    # (core/stripe_lanes.py); None for any other.
    lane: Callable[[], object] | None = None

    def __init__(
        self,
        source: signals.Source,
        grant: GrantReply,
        *,
        calls: Calls,
        token: str,
        weight: int,
        lease: float,
        expires_at: float,
        on_lost: Callable[[Permit], Any] | None = None,
        client: SyncClient | None = None,
    ) -> None:
        """The permit ``grant`` (the server's reply) gave ``token`` of ``source``, a semaphore or one partition.

        The name and partition come from the semaphore, the fence and the
        lease's deadline from the reply, as both the acquire and a waiting
        room's visit have them: neither writes them out again.
        """
        self.name = source.name
        self.partition = source.partition
        self.token = token
        self.fence = grant.fence
        self.weight = weight
        self.lease = lease
        self.lease_deadline_ms = grant.lease_deadline_ms
        # When the lease ends at the earliest, on this process's monotonic clock.
        self.expires_at = expires_at
        self.on_lost = on_lost
        self.acquired_at = time.monotonic()
        self._calls = calls
        # The sync client the permit was granted through (None: the settings' at the time of the call).
        # Its release, renewals and clean-ups use it: no settings lookup per call, and a background
        # renewal never follows the settings to another server (a test's, a reconfigured site's).
        self._client = client
        # A striped semaphore's stripe (its fence is that stripe's); None for any other.
        self.stripe = calls.stripe

    def __repr__(self) -> str:
        state = (
            "release unconfirmed"
            if self._unconfirmed
            else "released"
            if self.released
            else "lost"
            if self.lost
            else "held"
        )
        return f"<Permit {self.name} {self.token[:8]} fence={self.fence} {state}>"

    @property
    def held(self) -> bool:
        """True until released or found lost (the server may have reclaimed it since)."""
        return not (self.released or self.lost)

    def renew(self, lease: float | None = None) -> bool:
        """Restart the lease: it now ends ``lease`` seconds from now; False (and marked lost) if it was gone.

        ``lease`` (default: the permit's own) becomes the permit's lease, so
        the background renewal keeps using it. The server never moves a
        deadline earlier, so a shorter lease shows from the renewal after
        the current deadline has come closer than it.
        """
        if not self.held:
            return False
        lease_ms = self._lease_ms(lease)
        sent = time.monotonic()
        reply = connection.run(self._calls.renew(self.token, lease_ms), self.name, self.partition, self._client)
        return self._renewed(RenewReply.parse(reply), sent, lease_ms)

    async def arenew(self, lease: float | None = None) -> bool:
        if not self.held:
            return False
        lease_ms = self._lease_ms(lease)
        sent = time.monotonic()
        reply = await connection.arun(self._calls.renew(self.token, lease_ms), self.name, self.partition)
        return self._renewed(RenewReply.parse(reply), sent, lease_ms)

    def release(self) -> bool:
        """Give the permit back; False if the lease had already been lost. Idempotent.

        If Redis cannot be reached, ``BackendUnavailable`` is raised and the
        release is retried in the background until Redis answers.
        """
        if self.released:
            return False
        self._start_release()
        try:
            reply = connection.run(self._calls.release(self.token), self.name, self.partition, self._client)
        except BaseException:
            self._settle_later()
            raise
        return self._released(reply)

    async def arelease(self) -> bool:
        if self.released:
            return False
        self._start_release()
        try:
            reply = await connection.arun(self._calls.release(self.token), self.name, self.partition)
        except BaseException:
            self._settle_later()
            raise
        return self._released(reply)

    def post_release(self) -> bool:
        """Give the permit back without waiting for Redis's answer; False (nothing done): use ``release``.

        For a caller with nothing left to wait for (a guarded response already
        sent): the release is sent, and its answer is read by this process's
        next call on that connection, or by the background thread within two
        seconds, which then does what ``release`` does with it (the signal,
        the counts). A release that cannot be sent, or whose answer does not
        come, is retried in the background until Redis answers, as after a
        failed ``release`` (which raised ``BackendUnavailable`` too). False
        when the way this server runs scripts is not known yet (a process's
        first calls).
        """
        if self.released:
            return True
        self._start_release()
        try:
            if not self._post(self._calls.release(self.token), self._released, self._settle_later):
                return False
        except BaseException:
            self._settle_later()
            raise
        self.released = True
        return True

    def _post(self, call: ScriptCall, on_reply: Callable[[Any], object], on_failure: Callable[[], object]) -> bool:
        """Send ``call`` without waiting for its answer (``bounded.post``); False: not sent, the way not decided yet.

        The background thread reads the answer, should no call on that connection read it first.
        """
        with connection.translated(self.name, self.partition):
            client = connection.get_client() if self._client is None else self._client
            if not bounded.post(client, call, on_reply, on_failure):
                return False
        renewer.run_unhurried("collect posted replies", bounded.collect_posted_aside)
        return True

    def release_in_background(self, *, soon: bool = False) -> None:
        """Give the permit back from the background thread, retried until Redis answers; return at once.

        For a caller that must not wait on Redis (a request whose earlier
        call timed out: a hung server would cost it another timeout), which
        the thread tries again after a pause; ``soon``: at once (nothing
        suggests Redis is in trouble, the caller only cannot do I/O itself).
        """
        if self.released:
            return
        self._start_release()
        self._settle_later(soon=soon)

    def next_renewal(self) -> float:
        """When the background renewal should next extend this lease (monotonic clock)."""
        if self.final:
            return self.expires_at
        return min(time.monotonic() + self.lease / 3, self.expires_at - self.lease / 3)

    def __enter__(self) -> Permit:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    async def __aenter__(self) -> Permit:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.arelease()

    def _renewed(self, reply: RenewReply, sent: float, lease_ms: int) -> bool:
        if not reply.held:
            self.mark_lost("vanished" if self._keys_lost(reply.vanished, sent) else "expired")
            return False
        self.lease_deadline_ms = reply.lease_deadline_ms
        self.expires_at = sent + (reply.lease_deadline_ms - reply.now_ms) / 1000
        self.final = reply.final
        if lease_ms != round(self.lease * 1000):
            self.lease = lease_ms / 1000
            renewer.reschedule(self)
        return True

    # -- the API of redis-py's Lock and Redisson's permits (issue 15) -------

    def _lease_ms(self, lease: float | None) -> int:
        """A lease in ms as the renew script takes it, checked as ``acquire`` checks one."""
        if lease is None:
            return max(round(self.lease * 1000), 1)
        return max(round(_positive_seconds(lease, "lease") * 1000), 1)

    def _extended_ms(self, seconds: float) -> int:
        """What is left of the lease (as this process knows it, at the earliest) plus ``seconds``."""
        left = max(self.expires_at - time.monotonic(), 0.0)
        return max(round((left + _positive_seconds(seconds, "seconds")) * 1000), 1)

    def extend(self, seconds: float) -> bool:
        """Add ``seconds`` to what is left of the lease, once (redis-py's ``Lock.extend``).

        The lease length for later renewals stays as it was; ``renew(lease=...)``
        changes it. False (and marked lost) if the permit was gone.
        """
        if not self.held:
            return False
        sent = time.monotonic()
        call = self._calls.renew(self.token, self._extended_ms(seconds))
        reply = connection.run(call, self.name, self.partition, self._client)
        return self._renewed(RenewReply.parse(reply), sent, round(self.lease * 1000))

    async def aextend(self, seconds: float) -> bool:
        if not self.held:
            return False
        sent = time.monotonic()
        call = self._calls.renew(self.token, self._extended_ms(seconds))
        reply = await connection.arun(call, self.name, self.partition)
        return self._renewed(RenewReply.parse(reply), sent, round(self.lease * 1000))

    def is_held(self) -> bool:
        """Ask the server whether this permit is still held (``held`` is only what this process last saw).

        An operator's force release, or a lease that ran out while this
        process was stalled, shows here at once; the permit is then marked lost.
        """
        if not self.held:
            return False
        status = self._status(HOLDERS_LISTED)
        if not self._listed(status) and status.holder_count > len(status.holders):
            status = self._status(status.holder_count)
        return self._confirmed(status)

    async def ais_held(self) -> bool:
        if not self.held:
            return False
        status = await self._astatus(HOLDERS_LISTED)
        if not self._listed(status) and status.holder_count > len(status.holders):
            status = await self._astatus(status.holder_count)
        return self._confirmed(status)

    def stop_renewal(self) -> None:
        """Keep the permit but stop renewing it in the background: it ends with its lease unless renewed by hand.

        For work that should hold the permit only for a bounded time from
        now on, whatever this process's renewal thread would do.
        """
        renewer.forget(self)

    def _status(self, listed: int) -> SemaphoreStatus:
        reply = connection.run(self._calls.status(listed, False), self.name, self.partition, self._client)
        vanished.report_status(self.name, self.partition, reply)
        return SemaphoreStatus.parse(self.name, self.partition, 0, reply)

    async def _astatus(self, listed: int) -> SemaphoreStatus:
        reply = await connection.arun(self._calls.status(listed, False), self.name, self.partition)
        vanished.report_status(self.name, self.partition, reply)
        return SemaphoreStatus.parse(self.name, self.partition, 0, reply)

    def _listed(self, status: SemaphoreStatus) -> bool:
        return any(holder.token == self.token for holder in status.holders)

    def _confirmed(self, status: SemaphoreStatus) -> bool:
        if self._listed(status):
            return True
        self.mark_lost()
        return False

    def _start_release(self) -> None:
        self._releasing = True
        self._let_go_at = time.monotonic()
        renewer.forget(self)
        self._free_lane()

    def _free_lane(self) -> None:
        lane, self.lane = self.lane, None
        if lane is not None:
            lane()

    def _settle_later(self, *, soon: bool = False) -> None:
        """The release's outcome is unknown (an outage, an interruption): give the permit back once Redis answers."""
        self.released = True
        self._unconfirmed = True
        call = self._calls.release(self.token, fence=self.fence)
        renewer.reconcile(call, within=self.lease, on_reply=self._report_change, client=self._client, soon=soon)

    def _keys_lost(self, found: Any, sent: float) -> bool:
        """Report keys a script found gone (core/vanished.py); True if they took this permit's live lease.

        "all" (the semaphore has no keys left) is a loss only while this
        permit's lease had not ended when the call was sent: after that its
        keys may simply have expired.
        """
        what = vanished.found_in(found)
        if what is None:
            return False
        live = sent < self.expires_at
        kind, permits = what
        if kind == "all":
            if not live:
                return False
            permits = self.weight
        vanished.report(self.name, self.partition, kind, permits)
        return live

    def _report_change(self, reply: Any) -> bool:
        """Signal a limit change this release made, and keys it found gone; whether the lease was held."""
        if isinstance(reply, (list, tuple)) and len(reply) > 4 and reply[4]:
            self._keys_lost(reply[4], time.monotonic())
        was_held, change = release_reply(reply)
        if not self.lost:
            self._ended(RELEASED if was_held else None, self._let_go_at)
        if change is not None:
            # Only the release that ended the window hears of the change (its retry, if the reply was
            # lost, hears it again from the server): once per change, site-wide.
            signals.emit_for(
                signals.semaphore_limit_adapted,
                self,
                old_limit=change.old_limit,
                new_limit=change.new_limit,
                reason=change.reason,
            )
        return was_held

    def _released(self, reply: Any) -> bool:
        self.released = True
        was_held = self._report_change(reply)
        if not signals.listened(signals.semaphore_released):
            return was_held
        held_for = self._let_go_at - self.acquired_at
        signals.emit_for(signals.semaphore_released, self, token=self.token, held_for=held_for, was_held=was_held)
        return was_held

    def mark_lost(self, reason: str = "expired") -> None:
        """Record that the lease is gone: stop renewing, tell the owner, fire the signal.

        ``reason`` is "expired" (a renewal found the lease gone), "max_hold"
        (the permit was held as long as its semaphore's ``max_hold`` allows)
        or "vanished" (its keys vanished from Redis before its lease ended:
        evicted, deleted, lost in a failover; see ``core/vanished.py``).
        ``on_lost`` runs on the renewal thread, which serves every permit of
        the process: keep it quick (set a flag, cancel a task). One that
        raises is logged, as a signal's receiver is: the thread goes on
        renewing the process's other permits.
        """
        if self.lost or self.released or self._releasing:
            return
        self.lost = True
        renewer.forget(self)
        self._free_lane()
        self._ended(MAX_HOLD if reason == "max_hold" else REVOKED if reason == "vanished" else None, time.monotonic())
        if reason == "max_hold":
            logger.warning("%r was held for its whole max_hold and is now lost.", self)
        signals.emit_for(signals.semaphore_lost, self, token=self.token, reason=reason)
        if self.on_lost is not None:
            try:
                self.on_lost(self)
            except Exception:
                logger.exception("on_lost of %r failed", self)

    def _ended(self, reason: str | None, at: float) -> None:
        """The permit ended at ``at`` (monotonic), for ``reason``; None: found gone, so expired or revoked.

        Found gone before its lease could have ended (``expires_at`` is this
        process's earliest reckoning of that end), someone took it away: an
        operator's force release, or its keys vanished. Otherwise its lease ran
        out, and its hold time is taken to its end, not to when this process
        found out. Counted for the metrics (core/tally.py): one call.
        """
        if reason is None:
            reason = MAX_HOLD if self.final and at >= self.expires_at else REVOKED if at < self.expires_at else EXPIRED
        end = min(at, self.expires_at) if reason in (EXPIRED, MAX_HOLD) else at
        tally.permit(self.name, reason, max(end - self.acquired_at, 0.0), self.weight)
