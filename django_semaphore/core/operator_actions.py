"""What operators do to a semaphore: read its status, take permits away, set or move its limit.

A base of ``Semaphore`` (core/semaphore.py): ``manage.py semaphore_status``,
``semaphore_release``, ``semaphore_limit``, the dashboard and the Python API
all come here. Each action is one script call; on a striped semaphore, one
per stripe, sent together (a limit change in two rounds, those it lowers
first: core/stripe_limits.py).
"""

from __future__ import annotations

import time
from collections.abc import Generator
from dataclasses import replace
from typing import Any

from . import stripe_status, vanished
from .calls import Calls
from .conf import MAX_LIMIT, SemaphoreConfig
from .connection import arun, run
from .flow import server_clock
from .redis_keys import SemaphoreKeys
from .replies import SemaphoreStatus
from .stripe_layout import plan_key
from .stripe_limits import Plan, Scripts, Work, arun_work, change, repair, run_work


class OperatorActions:
    """Status, force release and the runtime limit of one semaphore (or partition)."""

    name: str
    partition: str | None
    config: SemaphoreConfig
    calls: Calls
    keys: SemaphoreKeys
    # A striped semaphore's stripes (core/stripe_layout.py); () for any other.
    stripe_calls: tuple[Calls, ...]

    def status(self, max_holders: int = 100, *, history: bool = False) -> SemaphoreStatus:
        """Limit, use, waiters, counters and holders; reclaims expired holders first.

        ``history=True`` adds the last hour of utilisation samples. A striped
        semaphore's is its stripes' added up (core/stripe_status.py), each
        stripe's own in ``stripes``.
        """
        if self.stripe_calls:
            return self._striped_status(run_work(self._status_work(max_holders, history), self.name), max_holders)
        reply = run(self.calls.status(max_holders, history), self.name, self.partition)
        return self._parsed_status(reply)

    async def astatus(self, max_holders: int = 100, *, history: bool = False) -> SemaphoreStatus:
        if self.stripe_calls:
            found = await arun_work(self._status_work(max_holders, history), self.name)
            return self._striped_status(found, max_holders)
        reply = await arun(self.calls.status(max_holders, history), self.name, self.partition)
        return self._parsed_status(reply)

    def _status_work(self, max_holders: int, history: bool) -> Work[tuple[Plan, list[Any]]]:
        """The stripes' statuses, after finishing a limit change a process left half-applied."""
        plan = yield from repair(self.stripe_calls, plan_key(self.config))
        replies = yield Scripts([calls.status(max_holders, history) for calls in self.stripe_calls])
        return plan, replies

    def _striped_status(self, found: tuple[Plan, list[Any]], max_holders: int) -> SemaphoreStatus:
        plan, replies = found
        statuses = []
        for stripe, (calls, reply) in enumerate(zip(self.stripe_calls, replies, strict=True)):
            vanished.report_status(self.name, None, reply)
            config = self.config
            status = SemaphoreStatus.parse(
                self.name, None, config.stripe_limit(stripe), reply, config.stripe_adaptive(stripe)
            )
            server_clock.observe(calls.keys.base, status.now_ms, time.monotonic())
            statuses.append(status)
        whole = stripe_status.merged(self.name, self.config.limit, plan.override, statuses, self.config.adaptive)
        return replace(whole, holders=whole.holders[:max_holders])

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
        if self.stripe_calls:
            replies = run_work(_each(Scripts([calls.force_release(token) for calls in self.stripe_calls])), self.name)
        else:
            replies = [run(self.calls.force_release(token), self.name, self.partition)]
        return any(len(reply) > 2 for reply in replies)

    def force_release_all(self) -> list[str]:
        """Take away the permit of every holder granted before the call; returns their tokens.

        Passes over the holders, a batch a call (lua/force_release.lua): each
        call's work is bounded, and the passes end however many are granted
        meanwhile (those keep their permits, the line's included).
        """
        work = _everyone(self.stripe_calls or (self.calls,))
        if self.stripe_calls:
            released = run_work(work, self.name)
        else:
            step = next(work)
            try:
                while True:
                    step = work.send([run(call, self.name, self.partition) for call in step.calls])
            except StopIteration as done:
                released = done.value
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
        if self.stripe_calls:
            return run_work(change(self.stripe_calls, plan_key(self.config), operation, value), self.name)
        return int(run(self.calls.set_limit(operation, value), self.name, self.partition))


def _each(step: Scripts) -> Work[list[Any]]:
    """One round trip's replies (every stripe's answer to one operation)."""
    return (yield step)


def _everyone(stripes: tuple[Calls, ...]) -> Generator[Scripts, list[Any], list[Any]]:
    """Each stripe's passes over its holders, the stripes' steps in one round trip; the tokens released.

    A stripe's passes go on until one releases nothing: a pass whose server
    changed under it (a failover, a restart, a slot migrated), where its
    cursor no longer means what it did, may have skipped holders granted
    before it began, and the next pass finds them.
    """
    released: list[Any] = []
    starts = [b"0"] * len(stripes)
    cursors = dict.fromkeys(range(len(stripes)), b"0")
    found = [0] * len(stripes)  # released by the stripe's pass under way
    while cursors:
        pending = list(cursors)
        replies = yield Scripts([stripes[i].force_release_step(cursors[i], starts[i]) for i in pending])
        for i, (cursor, start, *tokens) in zip(pending, replies, strict=True):
            starts[i] = start
            released += tokens
            found[i] += len(tokens)
            if not _pass_over(cursor):
                cursors[i] = cursor
            elif found[i]:
                cursors[i], found[i] = b"0", 0  # another pass
            else:
                del cursors[i]
    return released


def _pass_over(cursor: Any) -> bool:
    return cursor in (b"0", "0", 0)
