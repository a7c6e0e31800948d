"""The acquire protocol, written once without I/O.

``acquire_flow`` is a generator that yields the Redis steps it needs (run a
script, block on the waiter's wake list) and receives their replies. The sync
and asyncio front ends drive the same generator, so both wait in line the
same way and neither hops to a thread.
"""

from __future__ import annotations

import time
from collections.abc import Generator
from dataclasses import dataclass
from typing import Any

from .results import QUEUED, AcquireReply

# Never block for less than this: BLPOP treats 0 as "forever".
MIN_BLOCK = 0.01


@dataclass(frozen=True)
class RunScript:
    name: str
    keys: list[str]
    args: list[Any]


@dataclass(frozen=True)
class BlockOnWake:
    key: str
    timeout: float


@dataclass(frozen=True)
class FlowResult:
    reply: AcquireReply
    waited: float


def next_block(remaining: float, nearest_expiry_ms: int, waiter_ttl: float) -> float:
    """How long a waiter may sleep before it must look again.

    The wake note usually arrives first; the timer is the backstop for a lost
    note, the earliest lease running out, and the heartbeat that keeps the
    waiter in line (a third of its time-to-live, so one late beat is safe).
    """
    block = min(remaining, waiter_ttl / 3)
    if nearest_expiry_ms > 0:
        block = min(block, nearest_expiry_ms / 1000 + 0.002)
    return max(block, MIN_BLOCK)


def acquire_flow(
    acquire_keys: list[str],
    acquire_args: list[Any],
    cancel_keys: list[str],
    cancel_args: list[Any],
    wake_key: str,
    wait: float,
    waiter_ttl: float,
) -> Generator[RunScript | BlockOnWake, Any, FlowResult]:
    """Try once; if queued, sleep on the wake list and try again until ``wait`` runs out.

    ``acquire_args[4]`` is the mode: 'wait' when there is time to wait.
    """
    started = time.monotonic()
    deadline = started + wait
    leave = RunScript("cancel", cancel_keys, cancel_args)
    reply = AcquireReply.parse((yield RunScript("acquire", acquire_keys, acquire_args)))
    while reply.code == QUEUED:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            yield leave
            return FlowResult(reply, time.monotonic() - started)
        woken = yield BlockOnWake(wake_key, next_block(remaining, reply.nearest_expiry_ms, waiter_ttl))
        handed = reply.handed(woken[1]) if woken else None
        if handed is not None:
            # A release granted us the permit: we hold it already.
            return FlowResult(handed, time.monotonic() - started)
        reply = AcquireReply.parse((yield RunScript("acquire", acquire_keys, acquire_args)))
    return FlowResult(reply, time.monotonic() - started)
