"""The operators' side of waiting rooms: each room's figures, letting the next visitors in, queueing every new one.

``semaphore_status`` (its ``--json`` under each room's ``room`` key), the
dashboard and ``semaphore_room`` show and act through these. Every figure
says since when it counts (``since_ms``, the server's clock): visitors
inside and in line are counted now; the admission rate (the one estimated
waits divide by), and the estimated wait of the last in line, over the last
minute or since the room's latest change of pace, if that is later;
abandoned places since the room first counted. Pausing a room is the semaphore's own pause
(``ops/pausing.py``: a limit of 0).
"""

from __future__ import annotations

from typing import Any

from ..core import visits
from ..core.semaphore import Semaphore
from ..core.visits import RoomReply


def is_room(sem: Semaphore) -> bool:
    return sem.config.room is not None


def room_dict(reply: RoomReply, sem: Semaphore) -> dict[str, Any]:
    """A room's figures in the documented schema (reference/json-schema.md)."""
    room = sem.config.room
    assert room is not None
    last_ahead = reply.waiting - 1
    window_start = max(reply.window_start_ms, reply.since_ms)
    return {
        "inside": reply.used,
        "waiting": reply.waiting,
        "admitted_per_minute": reply.per_minute,
        "eta_last_seconds": reply.eta_seconds(last_ahead, room.refresh) if reply.waiting else None,
        "abandoned": reply.abandoned,
        "turned_away": reply.turned_away,
        "time_in_line_p50_s": reply.time_percentile(reply.time_in_line, 0.5),
        "time_in_line_p95_s": reply.time_percentile(reply.time_in_line, 0.95),
        "time_inside_p50_s": reply.time_percentile(reply.time_inside, 0.5),
        "time_inside_p95_s": reply.time_percentile(reply.time_inside, 0.95),
        "full_since_ms": reply.full_since_ms or None,
        "since_ms": {
            "inside": reply.now_ms,
            "waiting": reply.now_ms,
            "admitted_per_minute": window_start,
            "eta_last_seconds": window_start,
            "abandoned": reply.since_ms,
            "turned_away": reply.since_ms,
            "time_in_line": reply.since_ms,
            "time_inside": reply.since_ms,
        },
        "admitted": reply.admitted,
        "limit": reply.limit,
        "paused": reply.paused,
        "queue_all": reply.queue_all,
        "refresh_s": room.refresh,
        "abandon_s": room.abandon,
        "lease_s": sem.config.lease,
        "now_ms": reply.now_ms,
    }


def figures(sem: Semaphore) -> dict[str, Any] | None:
    """The room's figures now; None for a semaphore without a room."""
    if not is_room(sem):
        return None
    return room_dict(visits.figures(sem), sem)


def let_in(sem: Semaphore, count: int) -> tuple[int, dict[str, Any]]:
    """Let the next ``count`` visitors in line in, whatever the limit: how many there were, and the figures."""
    reply = visits.let_in(sem, count)
    return reply.let_in, room_dict(reply, sem)


def queue_all(sem: Semaphore, on: bool) -> dict[str, Any]:
    """Every new visitor waits in line (``on``), even when there is room; or back to normal."""
    return room_dict(visits.queue_all(sem, on), sem)
