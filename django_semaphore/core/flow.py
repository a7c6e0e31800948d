"""The acquire protocol, written once without I/O.

``acquire_flow`` is a generator that yields the Redis steps it needs (acquire,
block on the waiter's wake list, confirm a handed permit, leave the line) and
receives their replies. The sync and asyncio drivers run the same generator,
so both wait in line the same way and neither hops to a thread; the unit tests
run it with scripted replies.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Generator
from dataclasses import dataclass, replace
from typing import Any

from .calls import Calls, ScriptCall
from .replies import FULL, QUEUED, TOO_LATE, AcquireReply, Grant, RenewReply

# Never block for less: BLPOP treats 0 as "forever".
MIN_BLOCK = 0.001
# A waiter blocks for at most a third of its time-to-live between heartbeats.
HEARTBEATS_PER_TTL = 3
# A handed permit counts as alive without asking the server only while its claim has this much
# time left (or a quarter of the claim, if shorter): enough for the renewal to arrive.
ALIVE_MARGIN = 0.1


@dataclass(frozen=True)
class AcquireRequest:
    """Everything one acquire call sends, decided once, before the first round trip."""

    calls: Calls
    token: str
    nonce: str
    weight: int
    lease_ms: int
    hold_ms: int
    metadata: bytes
    wait: float
    waiter_ttl: float
    # The background renewal will extend a permit handed over on a claim; else the flow must.
    renewed_in_background: bool
    # Grants count only once replicas confirm them: a handed permit is confirmed by a renewal.
    replicated: bool

    @property
    def claim_ms(self) -> int:
        """Two of its own TTLs, as the acquire script takes it: how long it keeps its ticket after a missed beat."""
        return max(int(self.waiter_ttl * 2000), 1)

    @property
    def handed_claim_ms(self) -> int:
        """How long a permit a release hands this waiter lives until it renews it: one of its own TTLs.

        A waiter that died in line ties the permit that long at most; a live
        one renews within a round trip of reading the grant.
        """
        return max(self.claim_ms // 2, 1)

    def must_confirm(self, alive: bool) -> bool:
        """Whether a handed permit must be renewed before it is reported granted."""
        on_claim = self.lease_ms > self.handed_claim_ms
        return not alive or self.replicated or (on_claim and not self.renewed_in_background)

    @property
    def wake_key(self) -> str:
        return self.calls.keys.wake(self.token)

    def acquire_call(self, not_after_ms: int, grant_before_ms: int = 0) -> ScriptCall:
        return self.calls.acquire(
            self.token,
            weight=self.weight,
            lease_ms=self.lease_ms,
            waiting=self.wait > 0,
            claim_ms=self.claim_ms,
            hold_ms=self.hold_ms,
            nonce=self.nonce,
            not_after_ms=not_after_ms,
            grant_before_ms=grant_before_ms,
            metadata=self.metadata,
        )

    def cancel_call(self, *, unblock: bool = False, tombstone: bool = False) -> ScriptCall:
        return self.calls.cancel(self.token, self.nonce, unblock=unblock, tombstone=tombstone)

    def confirm_call(self) -> ScriptCall:
        return self.calls.renew(self.token, self.lease_ms)


@dataclass(frozen=True)
class Acquire:
    """Run the acquire script; reply: the raw list.

    The driver adds, on the server's clock, when the caller gives up on the
    reply, and ``remaining`` (seconds left of the wait, None when not
    waiting): a call that runs after either grants nothing.
    """

    remaining: float | None = None


@dataclass(frozen=True)
class Block:
    """Wait for a note on the wake list for up to ``timeout`` s; reply: a ``Woken``.

    ``precise``: this wait ends at the caller's deadline, so the driver must not
    let Redis's timer make it late (it leaves the line itself if need be).
    ``at_expiry``: this wait ends when the earliest lease does, and the waiter
    then asks again (which reclaims it); the driver must not let Redis's timer
    make that late either (it ends its own wait, staying in line).
    """

    timeout: float
    precise: bool
    at_expiry: bool = False


@dataclass(frozen=True)
class Woken:
    note: Any = None  # the note popped, or None when the wait timed out
    left: bool = False  # the driver already left the line: the wait overran the deadline


@dataclass(frozen=True)
class Confirm:
    """Renew a handed permit to its full lease; reply: the raw renew list."""


@dataclass(frozen=True)
class Leave:
    """Leave the line, giving back a permit granted to this call meanwhile; reply ignored."""


Step = Acquire | Block | Confirm | Leave
Flow = Generator[Step, Any, AcquireReply]
CONFIRM, LEAVE = Confirm(), Leave()


def next_block(remaining: float, nearest_expiry_ms: int, waiter_ttl: float) -> float:
    """How long a waiter may sleep before it must look again.

    The wake note usually arrives first; the timer is the backstop for a lost
    note, the earliest lease running out, and the heartbeat that keeps the
    waiter in line (a third of its time-to-live, so one late beat is safe).
    A lease ending within two heartbeats is waited for instead: asking again
    then is the heartbeat, and the permit it frees is taken when it ends, not
    at a heartbeat that Redis's timer may make late.
    """
    beat = waiter_ttl / HEARTBEATS_PER_TTL
    block = min(remaining, beat)
    if nearest_expiry_ms > 0 and _until_expiry(nearest_expiry_ms) <= 2 * beat:
        block = min(remaining, _until_expiry(nearest_expiry_ms))
    return max(block, MIN_BLOCK)


def _until_expiry(nearest_expiry_ms: int) -> float:
    """Seconds until the earliest lease has certainly ended on the server (its clock counts whole ms)."""
    return nearest_expiry_ms / 1000 + 0.002


def block_step(remaining: float, nearest_expiry_ms: int, waiter_ttl: float) -> Block:
    """The next wait: until a note, a heartbeat, the earliest lease's end or the caller's deadline."""
    block = next_block(remaining, nearest_expiry_ms, waiter_ttl)
    precise = block >= remaining
    at_expiry = not precise and nearest_expiry_ms > 0 and block == max(_until_expiry(nearest_expiry_ms), MIN_BLOCK)
    return Block(block, precise=precise, at_expiry=at_expiry)


def provably_alive(reply: AcquireReply, since_sent: float, grant: Grant, claim_ms: int) -> bool:
    """Whether a handed permit is certainly still held, with time left to renew it.

    The grant came after ``reply`` (which said "queued" at the server's
    ``now_ms``); the server's clock now reads at most ``now_ms`` plus the time
    since that acquire was sent. A waiter stalled past its claim cannot show
    that, and must ask the server instead.
    """
    margin_ms = min(ALIVE_MARGIN * 1000, claim_ms / 4)
    return reply.now_ms + since_sent * 1000 + margin_ms < grant.lease_deadline_ms


def acquire_flow(request: AcquireRequest, clock: Callable[[], float] = time.monotonic) -> Flow:
    """Ask once; while queued, sleep on the wake list and ask again, until ``request.wait`` runs out.

    Nothing is granted after the deadline: a permit handed over too late goes
    back with the waiter's leaving the line.
    """
    started = clock()
    deadline = started + request.wait
    sent = started
    reply = AcquireReply.parse((yield Acquire(request.wait if request.wait > 0 else None)), sent)
    # Keys any of this call's acquires found gone (reported once, with the result).
    lost = reply.vanished
    while reply.code == QUEUED:
        remaining = deadline - clock()
        if remaining <= 0:
            yield LEAVE
            break
        woken: Woken = yield block_step(remaining, reply.nearest_expiry_ms, request.waiter_ttl)
        if woken.left:
            break
        if clock() >= deadline:
            yield LEAVE
            break
        grant = Grant.parse(woken.note) if woken.note is not None else None
        if grant is not None:
            handed = replace(reply.handed(grant), vanished=lost)
            alive = provably_alive(reply, clock() - sent, grant, request.handed_claim_ms)
            if not request.must_confirm(alive):
                return replace(handed, waited=clock() - started)
            confirming = clock()
            renewed = RenewReply.parse((yield CONFIRM))
            if renewed.held:
                return replace(
                    handed,
                    lease_deadline_ms=renewed.lease_deadline_ms,
                    now_ms=renewed.now_ms,
                    sent_at=confirming,
                    waited=clock() - started,
                )
            # The claim ran out before this waiter could renew it: it asks again, like a newcomer.
        sent = clock()
        reply = AcquireReply.parse((yield Acquire(deadline - sent)), sent)
        lost = lost or reply.vanished
    reply = replace(reply, vanished=lost)
    if reply.code == QUEUED:
        reply = replace(reply, code=FULL)
    elif reply.code == TOO_LATE:
        # Redis ran this call after its caller gave up on it: refused. A first attempt that the
        # client library retried may have run in time, though: give back what it was granted.
        yield LEAVE
    return replace(reply, waited=clock() - started)
