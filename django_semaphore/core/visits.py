"""A waiting room in Redis: one visitor's request, and the operators' figures and actions.

Each is one call of ``core/lua/room.lua`` (one round trip), on the
semaphore's own keys: the visitors inside are its holders (one permit each,
renewed by every request and, at the end of each response, by ``Permit.renew``),
the visitors waiting are its first-come, first-served line, and a waiter who
asks nothing for the room's ``abandon`` time loses its place. This module
knows nothing of requests or tickets: ``web/visits.py`` turns a request into a
visitor's token and a reply into an answer.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Any

from . import connection, signals, vanished
from .calls import holder_metadata
from .conf import MAX_LIMIT
from .errors import BackendUnavailable
from .permit import Permit
from .replies import GrantReply, _text
from .semaphore import Semaphore
from .tally import tally

# room.lua's reply codes for a visit; AGAIN (any action): the call purged a batch of lapsed places and
# decided nothing, more are left: it is sent again. REFUSED: a new place its client address may not take.
LET_IN, INSIDE, IN_LINE, AGAIN, REFUSED, NOT_YET, CHALLENGE = 1, 2, 3, 4, 5, 6, 7
# Why a new place was refused (RoomReply.refused): its client holds too many places, or took too many new
# ones in the last minute.
PLACES, NEW = "places", "new"
# The calls one action may take to purge a burst of lapsed places (250 a call: 2.5 million places). Past
# it, something keeps lapsing places faster than the calls purge them: the room is reported unavailable.
MAX_ROUNDS = 10_000
# What the measured rate of admissions needs before it says anything on its own (without a visit length to
# fall back on, eta_seconds is null until then).
MIN_ADMISSIONS = 2
# A window shorter than this (a room just opened) is taken as this long: two visitors let in a millisecond
# apart are no rate of a thousand a second.
MIN_WINDOW_MS = 1000
# The rate the visit length predicts (the limit every average visit) counts as this many admissions beside
# the measured ones: it speaks for a line that has just formed, and the line's own pace soon outweighs it.
PRIOR_ADMISSIONS = 3


def bucket_seconds(bucket: int) -> float:
    """The middle of room.lua's time bucket (seconds): [2^((i-1)/2), 2^(i/2)) s, under 1 s for 0.

    A percentile read from these is right within a factor of 2^(1/4) (19%).
    """
    return 0.5 if bucket == 0 else round(2 ** ((bucket - 0.5) / 2), 1)


@dataclass(frozen=True)
class RoomReply(GrantReply):
    """What room.lua answered: one visit's outcome and the room's figures as the server saw them."""

    now_ms: int
    position: int
    window_admitted: int
    window_from_line: int
    window_ms: int
    queue_all: bool
    admitted: int
    abandoned: int
    since_ms: int
    let_in: int
    vanished: str
    refused: str = ""
    visit_ms: int = 0
    full_since_ms: int = 0
    pace_ms: int = 0
    # The operators' figures (every action but a visit): visitors turned away, and how many waited in line
    # and stayed inside how long, by room.lua's buckets (bucket_seconds).
    turned_away: int = 0
    time_in_line: tuple[int, ...] = ()
    time_inside: tuple[int, ...] = ()

    @classmethod
    def parse(cls, reply: list[Any]) -> RoomReply:
        n = [int(value) for value in reply[:16]]
        return cls(
            code=n[0],
            fence=n[1],
            lease_deadline_ms=n[2],
            used=n[3],
            limit=n[4],
            waiting=n[5],
            now_ms=n[6],
            position=n[7],
            window_admitted=n[8],
            window_from_line=n[9],
            window_ms=n[10],
            queue_all=bool(n[11]),
            admitted=n[12],
            abandoned=n[13],
            since_ms=n[14],
            let_in=n[15],
            vanished=_text(reply[16]) if len(reply) > 16 else "",
            refused=_text(reply[17]) if len(reply) > 17 else "",
            visit_ms=int(reply[18]) if len(reply) > 18 else 0,
            full_since_ms=int(reply[19]) if len(reply) > 19 else 0,
            pace_ms=int(reply[20]) if len(reply) > 20 else 0,
            turned_away=int(reply[21]) if len(reply) > 21 else 0,
            time_in_line=tuple(int(n) for n in reply[22::2]),
            time_inside=tuple(int(n) for n in reply[23::2]),
        )

    def time_percentile(self, counts: tuple[int, ...], fraction: float) -> float | None:
        """The ``fraction`` percentile of ``time_in_line`` or ``time_inside`` (seconds), None before any."""
        total = sum(counts)
        if total == 0:
            return None
        rank = fraction * total
        seen = 0
        for bucket, count in enumerate(counts):
            seen += count
            if seen >= rank:
                return bucket_seconds(bucket)
        return bucket_seconds(len(counts) - 1)

    @property
    def inside(self) -> bool:
        """The visitor is inside: let in by this request, or already."""
        return self.code in (LET_IN, INSIDE)

    @property
    def paused(self) -> bool:
        return self.limit == 0

    @property
    def window_seconds(self) -> float:
        """The length of the window the rates are measured on (the last minute, or since the room's latest
        change of pace; at least one second)."""
        return max(self.window_ms, MIN_WINDOW_MS) / 1000

    @property
    def per_minute(self) -> float:
        """Visitors let in from the line per minute: the rate the estimated waits divide by; 0 while unknown."""
        rate = self.per_second
        return 0.0 if rate is None else round(rate * 60, 2)

    @property
    def expected_per_second(self) -> float | None:
        """The rate the visits predict: the limit's worth of visitors every average visit; None before one ended."""
        if self.visit_ms <= 0 or self.limit <= 0:
            return None
        return self.limit * 1000 / self.visit_ms

    @property
    def per_second(self) -> float | None:
        """Visitors let in from the line per second: measured over the window, weighed with what the visits
        predict; None while neither says anything.

        The window is the last minute, or since the room's latest change of
        pace (its limit changed, or its line first moved since it formed): a
        launch's first seconds are not averaged with the quiet before it, nor
        with the wait for the first visit inside to end. Until the line has
        moved for a while, the visit length speaks (``PRIOR_ADMISSIONS``
        admissions' worth); with no visit ended yet, two admissions from the
        line are needed. Visitors who walked into a room with space say nothing of
        how fast the line moves.
        """
        expected = self.expected_per_second
        if expected is None:
            if self.window_from_line < MIN_ADMISSIONS or self.window_ms <= 0:
                return None
            return self.window_from_line / self.window_seconds
        return (self.window_from_line + PRIOR_ADMISSIONS) / (self.window_ms / 1000 + PRIOR_ADMISSIONS / expected)

    @property
    def window_start_ms(self) -> int:
        """Where the admission rate's window starts (the server's clock, ms)."""
        return self.now_ms - self.window_ms

    def eta_seconds(self, ahead: int, refresh: float = 0.0) -> float | None:
        """The wait of someone with ``ahead`` people ahead: (ahead + 1) / admissions per second, and half a
        ``refresh`` (the visitor hears of its turn at its next poll).

        Its own turn is one more admission: the first in line waits for the
        next place to free, not for nothing. None while the rate is unknown,
        and while the room is paused (limit 0): nobody is let in until an
        operator resumes it, whatever the rate was.
        """
        rate = self.per_second
        if rate is None or self.paused:
            return None
        return round((max(ahead, 0) + 1) / rate + refresh / 2, 1)


def _run(sem: Semaphore, action: str, metadata: bytes = b"", client: str | None = None) -> RoomReply:
    """One action, in as many calls as purging the room's lapsed places takes (one, unless a burst lapsed).

    Each call does a bounded amount of work, so a hundred thousand places
    lapsing at once cost the server many short calls, with every other
    client's commands served between them, and not one long one.
    """
    call = sem.calls.room(action, metadata, client)
    for _ in range(MAX_ROUNDS):
        reply = RoomReply.parse(connection.run(call, sem.name, sem.partition))
        vanished.report_reply(sem.name, sem.partition, reply.vanished or None)
        if reply.code != AGAIN:
            return reply
    raise _unfinished(sem)


async def _arun(sem: Semaphore, action: str, metadata: bytes = b"", client: str | None = None) -> RoomReply:
    call = sem.calls.room(action, metadata, client)
    for _ in range(MAX_ROUNDS):
        reply = RoomReply.parse(await connection.arun(call, sem.name, sem.partition))
        vanished.report_reply(sem.name, sem.partition, reply.vanished or None)
        if reply.code != AGAIN:
            return reply
    raise _unfinished(sem)


def _unfinished(sem: Semaphore) -> BackendUnavailable:
    return BackendUnavailable(
        f"Waiting room {sem.name!r}: lapsed places still to purge after {MAX_ROUNDS} calls; "
        "the request follows the room's on_error."
    )


def _room(sem: Semaphore) -> None:
    if sem.config.room is None:
        raise ValueError(f"Semaphore {sem.name!r} has no waiting room (set 'waiting_room' in its SEMAPHORES entry).")


def visit_lease(sem: Semaphore) -> float:
    """How long a visit of room ``sem`` lasts after a request that renews it (its session, without renewal)."""
    room = sem.config.room
    return sem.config.lease if room is None else room.visit_lease(sem.config.lease)


def _ms(seconds: float | None) -> int:
    return 0 if seconds is None else max(int(seconds * 1000), 1)


@dataclass(frozen=True)
class VisitAsk:
    """What one request of the visitor ``token`` asks the room.

    ``label``: what operators see next to its visit. ``renew``: a visit
    inside is renewed (``lease`` from now, the end of a response); False for
    a request the room answers itself (the queue page's poll), which leaves
    a visit inside as it is. ``client``: the visitor's client address,
    hashed, whose places and new places the room's bounds count.
    ``shuffled``: the place (1 to 2^40) a keyed hash of the visitor's ticket
    gives it before a launch's opening, or in a random-order room.
    ``proven``: the request carries a proof of work its caller verified (a
    room that asks one gives a newcomer without it no place: ``CHALLENGE``).
    """

    token: str
    label: str = ""
    renew: bool = True
    client: str | None = None
    shuffled: int = 0
    proven: bool = False

    def action(self, sem: Semaphore) -> str:
        room = sem.config.room
        assert room is not None
        hold_ms = _ms(room.visit_cap(sem.config.max_hold))
        places = room.client_places or 0 if self.client is not None else 0
        per_minute = room.client_tickets_per_minute or 0 if self.client is not None else 0
        proof = "-" if not room.proof_of_work else "1" if self.proven else "0"
        launch = f"{self.shuffled} {room.prequeue_ms} {int(room.queueing == 'random')} {proof}"
        return f"visit {self.token} {_ms(visit_lease(sem))} {hold_ms} {int(self.renew)} {places} {per_minute} {launch}"


def visit(sem: Semaphore, ask: VisitAsk | str) -> tuple[RoomReply, Permit | None]:
    """One request of a visitor (``ask``, or just its token): the reply, and the visit's permit when it is inside.

    The permit renews the visit or ends it (``release``: the next in line is let in).
    """
    ask = VisitAsk(ask) if isinstance(ask, str) else ask
    _room(sem)
    sent = time.monotonic()
    try:
        reply = _run(sem, ask.action(sem), holder_metadata(ask.label, None), ask.client)
    except BaseException as exc:
        tally.failed(sem.name, sem.config.on_error, exc, sent)
        raise
    return reply, _visited(sem, ask.token, reply, sent)


async def avisit(sem: Semaphore, ask: VisitAsk | str) -> tuple[RoomReply, Permit | None]:
    """``visit`` on the asyncio client."""
    ask = VisitAsk(ask) if isinstance(ask, str) else ask
    _room(sem)
    sent = time.monotonic()
    try:
        reply = await _arun(sem, ask.action(sem), holder_metadata(ask.label, None), ask.client)
    except BaseException as exc:
        tally.failed(sem.name, sem.config.on_error, exc, sent)
        raise
    return reply, _visited(sem, ask.token, reply, sent)


def _visited(sem: Semaphore, token: str, reply: RoomReply, sent: float) -> Permit | None:
    """Count and signal the request's outcome: acquired inside, rejected when its new place was refused; its permit.

    A visitor in line asking again is no refusal: its polls are not
    counted as attempts (the room's own figures count people).
    """
    if reply.inside or reply.refused:
        tally.ended(sem.name, reply.inside, False, False, sent)
    if not reply.inside and not reply.refused:
        return None
    if not reply.inside:
        retry = sem.config.room.retry_after if sem.config.room else 1
        signals.emit_for(
            signals.semaphore_rejected, sem, retry_after=retry, waited=0.0, used=reply.used, limit=reply.limit
        )
        return None
    signals.emit_for(signals.semaphore_acquired, sem, token=token, fence=reply.fence, weight=1, waited=0.0)
    return Permit(
        sem,
        reply,
        calls=sem.calls,
        token=token,
        weight=1,
        lease=visit_lease(sem),
        expires_at=sent + max(reply.lease_deadline_ms - reply.now_ms, 0) / 1000,
    )


def figures(sem: Semaphore) -> RoomReply:
    """The room's figures now (the line served with whatever ended, as a status read does)."""
    _room(sem)
    return _run(sem, "figures")


def let_in(sem: Semaphore, count: int) -> RoomReply:
    """Let the next ``count`` visitors in line in, whatever the limit; ``let_in`` says how many there were."""
    _room(sem)
    if not isinstance(count, int) or isinstance(count, bool) or not 1 <= count <= MAX_LIMIT:
        raise ValueError(
            f"The number of visitors to let in must be a whole number from 1 to {MAX_LIMIT}, not {count!r}."
        )
    reply = _run(sem, f"let_in {count}")
    total = reply.let_in
    # A call lets a batch in at most: the next ones go on until `count` are in or the line is empty.
    while reply.let_in > 0 and total < count and reply.waiting > 0:
        reply = _run(sem, f"let_in {count - total}")
        total += reply.let_in
    return replace(reply, let_in=total)


def queue_all(sem: Semaphore, on: bool) -> RoomReply:
    """Every new visitor waits in line even when there is room (``on``), or no longer."""
    _room(sem)
    return _run(sem, f"queue_all {int(bool(on))}")


def _ended(reply: Any) -> bool:
    """release.lua's reply: 1 (or a list starting with 1) when the token held a permit, now given back."""
    first = reply[0] if isinstance(reply, list) else reply
    return bool(int(first))


def end(sem: Semaphore, token: str) -> bool:
    """End the visit of ``token`` now (the next in line is let in); False when it was not inside."""
    _room(sem)
    return _ended(connection.run(sem.calls.release(token), sem.name, sem.partition))


async def aend(sem: Semaphore, token: str) -> bool:
    _room(sem)
    return _ended(await connection.arun(sem.calls.release(token), sem.name, sem.partition))
