"""Typed views of what the scripts reply, so callers never index raw lists."""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field, replace
from typing import Any, cast

from .adaptive import AdaptiveLimit, AdaptiveStatus, state_int

# The acquire script's reply codes (see core/lua/acquire.lua).
GRANTED, RENEWED, QUEUED, FULL, TOO_HEAVY, TOO_LATE, OTHER_WEIGHT = 1, 2, 3, 0, -1, -2, -3
# Granted by a release while waiting (a note on the wake list), on the waiter's own claim.
HANDED = 4


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def acquire_fields(reply: Any) -> list[Any]:
    """An acquire's reply as a list: the fast paths answer a grant with its integers in one text.

    A text costs the server a fraction of an array of integers (one reply
    rather than eight), and splitting it here costs less than reading eight
    integers through redis-py's reply parser.
    """
    if isinstance(reply, (bytes, str)):
        return [int(field) for field in reply.split()]
    return cast(list[Any], reply)


def retry_after_seconds(expected_free_ms: int) -> int:
    """Whole seconds a turned-away client should wait: at least 1, since none is free now."""
    return max(1, math.ceil(expected_free_ms / 1000))


@dataclass(frozen=True)
class GrantReply:
    """What a script granting permits answers first, in this order: an acquire's (``AcquireReply``) and a
    waiting room visit's (core/visits.py's ``RoomReply``)."""

    code: int
    fence: int
    lease_deadline_ms: int
    used: int
    limit: int
    waiting: int


@dataclass(frozen=True)
class AcquireReply(GrantReply):
    """What one acquire ended with (a script's reply, or a grant handed over while waiting)."""

    position: int
    nearest_expiry_ms: int
    expected_free_ms: int
    now_ms: int
    waited: float = 0.0
    # When the request that read `now_ms` was sent (monotonic clock): with the
    # two, the lease's end is known on this process's clock, conservatively.
    sent_at: float = 0.0
    # Keys the script found gone under held permits ("holders|N", "state|N"; core/vanished.py), or "".
    vanished: str = ""
    # The call found the partition without keys (new, evicted or expired): see core/registry.py.
    fresh: bool = False

    def finished(self, waited: float, vanished: str, code: int | None = None) -> AcquireReply:
        """This reply as the call ends with it: how long it waited, every key loss it saw, its final code.

        ``dataclasses.replace`` would do, at several times the cost, on every acquire.
        """
        return AcquireReply(
            self.code if code is None else code,
            self.fence,
            self.lease_deadline_ms,
            self.used,
            self.limit,
            self.waiting,
            self.position,
            self.nearest_expiry_ms,
            self.expected_free_ms,
            self.now_ms,
            waited,
            self.sent_at,
            vanished,
            self.fresh,
        )

    @classmethod
    def parse(cls, reply: Any, sent_at: float) -> AcquireReply:
        # A grant's reply ends with `fresh` after now_ms: the rest only matters to a caller turned away or
        # waiting, or when the script found keys gone (acquire.lua's header).
        code, fence, deadline, used, limit, waiting, now, *rest = acquire_fields(reply)
        if len(rest) == 1:
            position, nearest, expected, vanished, fresh = 0, 0, 0, "", bool(rest[0])
        else:
            position, nearest, expected, *tail = rest or (0, 0, 0)
            vanished = _text(tail[0]) if tail else ""
            fresh = len(tail) > 1 and bool(tail[1])
        return cls(
            code,
            fence,
            deadline,
            used,
            limit,
            waiting,
            position,
            nearest,
            expected,
            now,
            sent_at=sent_at,
            vanished=vanished,
            fresh=fresh,
        )

    @property
    def expires_at(self) -> float:
        """The earliest moment, on this process's monotonic clock, that the lease granted may end."""
        return self.sent_at + (self.lease_deadline_ms - self.now_ms) / 1000

    def handed(self, handover: Handover, vanished: str, waited: float = 0.0) -> AcquireReply:
        """The permit ``handover`` granted, in place of this "queued" reply (``vanished``: keys the call found gone)."""
        return replace(
            self,
            code=HANDED,
            fence=handover.fence,
            lease_deadline_ms=handover.lease_deadline_ms,
            position=0,
            vanished=vanished,
            waited=waited,
        )

    @property
    def granted(self) -> bool:
        return self.code in (GRANTED, RENEWED, HANDED)


@dataclass(frozen=True)
class Handover:
    """A permit a release handed to a waiter: the note "G|fence|deadline|granted_at" on its wake list."""

    fence: int
    lease_deadline_ms: int
    granted_at_ms: int

    @classmethod
    def parse(cls, note: Any) -> Handover | None:
        """The grant in a wake note; None for a plain wake-up ("W") or the caller's own unblock ("X")."""
        text = _text(note)
        if not text.startswith("G|"):
            return None
        _, fence, deadline, granted_at = text.split("|")
        return cls(int(fence), int(deadline), int(granted_at))


@dataclass(frozen=True)
class RenewReply:
    """The renew script's answer: 1 renewed, 2 renewed up to the max hold (final), 0 not held."""

    status: int
    lease_deadline_ms: int
    now_ms: int
    # Not held: keys the script found gone ("holders|N", "state|N", "all|0"; core/vanished.py), or "".
    vanished: str = ""

    @classmethod
    def parse(cls, reply: list[Any]) -> RenewReply:
        status, deadline, now, *lost = reply
        return cls(status, deadline, now, _text(lost[0]) if lost else "")

    @property
    def held(self) -> bool:
        return self.status > 0

    @property
    def final(self) -> bool:
        """The lease reached the permit's max hold: it ends for good at ``lease_deadline_ms``."""
        return self.status == 2


@dataclass(frozen=True)
class Holder:
    """One current holder as ``status()`` sees it (times in server ms)."""

    token: str
    weight: int
    fence: int
    acquired_at_ms: int
    lease_deadline_ms: int
    metadata: dict[str, Any] = field(default_factory=dict)
    # The stripe it holds a permit of, in a striped semaphore's status (core/stripe_status.py); else None.
    stripe: int | None = None

    @classmethod
    def parse(cls, token: Any, deadline: Any, info: Any) -> Holder:
        # "weight|acquired_ms|fence|nonce|hold_until_ms|metadata" (core/lua/common.lua)
        parts = _text(info).split("|", 5) if info else []
        weight, acquired, fence, _nonce, _hold_until, meta = parts if len(parts) == 6 else ["1", "0", "0", "", "0", ""]
        try:
            metadata = json.loads(meta) if meta else {}
        except ValueError:
            metadata = {"raw": meta}
        return cls(
            _text(token),
            int(weight),
            int(fence),
            int(acquired),
            int(float(deadline)),
            metadata if isinstance(metadata, dict) else {"raw": metadata},
        )

    @property
    def token_prefix(self) -> str:
        return self.token[:8]


@dataclass(frozen=True)
class Sample:
    """Peak permits in use since the previous sample, the line and the limit in force at sample time.

    ``limit`` is None in samples written before it was recorded (a server
    that ran an older version of the scripts).
    """

    at_ms: int
    peak_used: int
    waiting: int
    limit: int | None = None

    @classmethod
    def parse(cls, raw: Any) -> Sample:
        at, peak, waiting, *rest = _text(raw).split("|")
        return cls(int(at), int(peak), int(waiting), int(rest[0]) if rest else None)


# State fields that are not integers: the adaptive rule's reason and best average hold (ms, a decimal).
TEXT_FIELDS = ("alimit_why", "best")
# What the scripts count in a partition's state: what only the server sees (leases it reclaimed, renewals and
# releases of a lease or a token gone, operators' force releases, permits ended at their max hold). How each
# attempt ended and each permit was given back is counted by the process that made the call (core/tally.py),
# per semaphore name, and not kept per partition (ops/overview.py shows those as OUTCOMES).
COUNTERS = ("expired", "lost", "forced", "refused", "max_hold")


@dataclass(frozen=True)
class SemaphoreStatus:
    """A consistent snapshot of one semaphore partition."""

    name: str
    partition: str | None
    limit: int
    configured_limit: int
    override: int | None
    used: int
    holder_count: int
    waiting: int
    fence: int
    counters: dict[str, int]
    holders: list[Holder]
    now_ms: int
    history: list[Sample] = field(default_factory=list)
    # Where an adaptive limit stands (None for a fixed one).
    adaptive: AdaptiveStatus | None = None
    # A striped semaphore's stripes, each as a status of its own (core/stripe_status.py); () for any other.
    stripes: tuple[SemaphoreStatus, ...] = ()

    @classmethod
    def parse(
        cls,
        name: str,
        partition: str | None,
        configured: int,
        reply: list[Any],
        adaptive: AdaptiveLimit | None = None,
    ) -> SemaphoreStatus:
        # An eighth element says what keys vanished (core/vanished.py reports it; not a status field).
        now, limit, flat, holder_count, waiting, listed, samples, *_vanished = reply
        text = {_text(flat[i]): _text(flat[i + 1]) for i in range(0, len(flat), 2)}
        # Garbled fields read as missing, as the scripts read them.
        numbers = {key: state_int(value) for key, value in text.items() if key not in TEXT_FIELDS}
        state = {key: number for key, number in numbers.items() if number is not None}
        holders = [Holder.parse(*listed[i : i + 3]) for i in range(0, len(listed), 3)]
        return cls(
            name=name,
            partition=partition,
            limit=int(limit),
            configured_limit=configured,
            override=state.get("limit"),
            used=state.get("used", 0),
            holder_count=int(holder_count),
            waiting=int(waiting),
            fence=state.get("fence", 0),
            counters={c: state.get(c, 0) for c in COUNTERS},
            holders=holders,
            now_ms=int(now),
            history=[Sample.parse(sample) for sample in samples],
            adaptive=AdaptiveStatus.read(adaptive, text) if adaptive else None,
        )

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)
