"""Which stripe a call of a striped semaphore asks: its process's own first, one other when that one is full.

Each process keeps to its stripes (``Lanes``): a call asks the stripe its
process prefers, so a process whose calls fit in one stripe talks to one
stripe (one master, its connection) and meets only the callers that share it.
A process holds a *lane* on a stripe for each permit it may hold there at
once: a call takes a free lane (the stripe first in the process's own random
order that has one), or adds one on its first stripe; a lane follows its call
to the stripe that granted it. So a process whose calls outgrow one stripe
spreads them over as many as they need, and keeps to them, and processes that
crowd one stripe move, lane by lane, to stripes with room. That is what keeps
the share of calls that need a second stripe small at a steady load (the
figures: docs/performance.md, "Stripes").

A call its stripe turns away asks one other, at once (``StripedCall``): one
more round trip of wall time at most, and FIFO only within a stripe. The other
is drawn at random among the stripes this process has not seen without room
lately (``SEEN_FOR``), so that callers turned away together do not all pile
onto the same one. A call with an ``identity`` always asks the one stripe its
identity maps to: acquiring again under it must find the permit it holds.
"""

from __future__ import annotations

import hashlib
import os
import random
import threading
import time
from collections.abc import Callable
from dataclasses import replace

from .calls import IDENTITY_PREFIX, AcquireRequest, Calls
from .replies import FULL, TOO_HEAVY, TOO_LATE, AcquireReply

# Seconds a reply saying a stripe had no room keeps it out of a second choice.
SEEN_FOR = 0.2
# Lanes one process keeps on one semaphore at most: past it (permits dropped unreleased leave their lanes
# busy for good) the counts start again; they are only a preference.
MAX_LANES = 100_000


class Lanes:
    """One process's lanes on the stripes of one semaphore, and what its replies said about each stripe.

    ``shares``: each stripe's share of the limit in settings, the most lanes this process puts on a stripe
    until a reply says what the stripe's limit is now.
    """

    def __init__(self, shares: list[int]) -> None:
        self.stripes = len(shares)
        self._shares = list(shares)
        self._lock = threading.Lock()
        self._pid = 0
        self._reset()
        # Calls that asked a second stripe, and of those, how many it granted (benchmarks/stripes.py reads them).
        self.calls = self.second = self.second_granted = 0

    def _reset(self) -> None:
        """A fresh process (or one forked from a process that had lanes): a random order, no lane yet."""
        self._pid = os.getpid()
        self._order = random.sample(range(self.stripes), self.stripes)
        self._lanes = [0] * self.stripes
        self._busy = [0] * self.stripes
        self._no_room_at = [float("-inf")] * self.stripes
        self._limits = list(self._shares)

    def take(self) -> int:
        """The stripe a new call asks first: a free lane's, or a new lane on this process's first stripe with room.

        With room: fewer of this process's lanes than the stripe's limit, and
        not seen full lately, so a process whose calls outgrow its stripe adds
        its next lanes on its next stripes, in its own order.
        """
        now = time.monotonic()
        with self._lock:
            self._fresh()
            self.calls += 1
            stripe, new_lane = self._choice(now)
            if new_lane:
                self._lanes[stripe] += 1
            self._busy[stripe] += 1
            return stripe

    def likely(self) -> int:
        """The stripe the next ``take`` gives, unless another thread takes one first (nothing is taken)."""
        with self._lock:
            self._fresh()
            return self._choice(time.monotonic())[0]

    def _fresh(self) -> None:
        if self._pid != os.getpid() or sum(self._lanes) >= MAX_LANES:
            self._reset()

    def _choice(self, now: float) -> tuple[int, bool]:
        """``take``'s stripe, and whether it is a new lane there (no lane of this process is free)."""
        lanes, busy = self._lanes, self._busy
        for stripe in self._order:
            if lanes[stripe] > busy[stripe]:
                return stripe, False
        stripe = next(
            (s for s in self._order if lanes[s] < self._limits[s] and now - self._no_room_at[s] > SEEN_FOR),
            self._order[0],
        )
        return stripe, True

    def other(self, first: int) -> int:
        """The stripe a call turned away by ``first`` asks next: a random one not seen without room lately."""
        now = time.monotonic()
        with self._lock:
            self.second += 1
            others = [s for s in range(self.stripes) if s != first]
            fresh = [s for s in others if now - self._no_room_at[s] > SEEN_FOR]
        return random.choice(fresh or others)

    def seen(self, stripe: int, reply: AcquireReply, weight: int) -> None:
        """What a reply said: the stripe's limit now, and whether it had less room than this call's weight
        (it is then left out of second choices and new lanes for a while)."""
        if reply.code == TOO_LATE:
            return  # a call refused unread: its reply says nothing of the stripe
        self._limits[stripe] = reply.limit
        if reply.limit - reply.used < weight:
            self._no_room_at[stripe] = time.monotonic()

    def ended(self, first: int, granted_by: int | None) -> None:
        """The call that took a lane on ``first`` ended: granted by ``granted_by`` (its lane goes there), or not."""
        with self._lock:
            if self._pid != os.getpid():
                return
            self._busy[first] -= 1
            if granted_by is None:
                return
            if granted_by != first:
                self.second_granted += 1
                self._lanes[first] -= 1
                self._lanes[granted_by] += 1
            self._busy[granted_by] += 1

    def released(self, stripe: int, pid: int) -> None:
        """A permit granted on ``stripe`` in process ``pid`` ended: its lane is free again."""
        with self._lock:
            if self._pid == pid:
                self._busy[stripe] -= 1


def asked_first(lanes: Lanes, token: str, stripes: int) -> int:
    """The stripe a call with ``token`` likely asks first, no lane taken: the one whose connections it opens
    ahead (core/bounded.py ``open_ahead``)."""
    return identity_stripe(token, stripes) if token.startswith(IDENTITY_PREFIX) else lanes.likely()


def identity_stripe(token: str, stripes: int) -> int:
    """The one stripe an identity's calls ask, from its token (an HMAC already: evenly spread)."""
    return int.from_bytes(hashlib.blake2b(token.encode(), digest_size=4).digest(), "big") % stripes


class StripedCall:
    """One acquire of a striped semaphore: at most two requests, each to one stripe.

    The semaphore's drivers send ``first``, then ``second(reply)`` if it is
    not None, and say how the call ended (``ended``) however it did: the lane
    it took is given back, or follows the permit (``lane_of``).
    """

    def __init__(self, lanes: Lanes, stripes: tuple[Calls, ...], request: AcquireRequest) -> None:
        self.lanes, self.stripes, self.request = lanes, stripes, request
        self.by_identity = request.token.startswith(IDENTITY_PREFIX)
        self.lane = identity_stripe(request.token, len(stripes)) if self.by_identity else lanes.take()
        asks = request if self.by_identity else replace(request, wait=0.0)
        self.first = replace(asks, calls=stripes[self.lane])

    def second(
        self, reply: AcquireReply, left_to_wait: Callable[[AcquireRequest], AcquireRequest]
    ) -> AcquireRequest | None:
        """The request to another stripe when the first turned the call away (full, or too small); else None.

        ``left_to_wait``: the caller's wait, less what the first request took.
        """
        if self.by_identity:
            return None
        self.lanes.seen(self.lane, reply, self.request.weight)
        if reply.code not in (FULL, TOO_HEAVY):
            return None
        stripe = self.lanes.other(self.lane)
        return left_to_wait(replace(self.request, calls=self.stripes[stripe]))

    def ended(self, request: AcquireRequest | None, reply: AcquireReply | None) -> None:
        """The call ended with ``reply`` to ``request`` (None: it raised): its lane is free, or went with its permit."""
        if self.by_identity:
            return
        stripe = None if request is None else request.calls.stripe
        if stripe is not None and reply is not None and stripe != self.lane:
            self.lanes.seen(stripe, reply, self.request.weight)
        self.lanes.ended(self.lane, stripe if reply is not None and reply.granted else None)

    def lane_of(self, stripe: int) -> Callable[[], None] | None:
        """What a permit granted on ``stripe`` calls when it ends, to free its lane (None: it holds none)."""
        if self.by_identity:
            return None
        lanes, pid = self.lanes, os.getpid()
        return lambda: lanes.released(stripe, pid)
