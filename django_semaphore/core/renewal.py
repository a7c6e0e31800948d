"""One background thread per process: it keeps held permits' leases alive, and
settles calls whose outcome Redis never confirmed.

**Renewal.** A permit is renewed every third of its lease, so a single slow or
failed renewal still leaves time for another before the server reclaims it. A
renewal that finds the lease gone marks the permit lost and never re-acquires:
someone else may hold that permit by now. A permit that reached its max hold
is not renewed past it, and is marked lost when its last lease ends. A
renewal Redis does not answer (or refuses) is tried again after
``RETRY_AFTER_ERROR``, then twice as long each time, at most an eighth of the
lease apart (jittered: core/backoff.py), until the lease ends as this process
last learned it from the server; then nothing can renew it any more, and the
permit is marked lost ("expired") rather than tried for good.

**Reconciliation.** An acquire or release that timed out or lost its
connection may still run in Redis (a hung server runs what it buffered when it
resumes), or may never have run. Either way a permit could be left held by
nobody until its lease ends, which for a long lease means minutes of
turned-away requests. Such a call's clean-up (leave the line and give back
what that call was granted; or the release itself) is retried here until Redis
answers, within its window (the permit's lease: after it the server has
reclaimed what the call may hold). The retries back off as renewals do, at
most an eighth of the shortest window waiting apart.

**After an outage.** While Redis fails, each retry waits longer than the one
before; once any call of the process finds Redis answering, every postponed
renewal and clean-up is tried at once, so capacity comes back within moments
of Redis doing so whenever the process is in use. And the thread keeps the
outage log's account (core/outages.py): it looks at Redis itself while an
outage lasts and nothing else does (core/outage_watch.py), and records the
outage's end when it is due. Once no permit is left to renew, no clean-up
waits and the watch has ended, it calls Redis for nothing.

**Jobs of their own.** It writes the metrics' counts once per interval
(core/tally.py), and has the answers of releases sent without waiting for
them, that no call of the process has read since, read on a thread of their
own (core/bounded.py's posts): what signal receivers do with them must not
hold up the renewals.

Permits taken on the asyncio path are served here too, through the sync
client: one worker per process, whatever mix of sync and async code it runs.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from redis.exceptions import RedisError

from . import bounded, scripts
from .backoff import retry_delay
from .calls import ScriptCall
from .clients import SyncClient
from .connection import get_client
from .errors import BackendUnavailable, is_outage
from .outage_watch import OutageWatch
from .outages import RENEWAL, outage_log

logger = logging.getLogger("django_semaphore.renewal")

# After a failed renewal or clean-up (Redis unreachable, or refusing), try again this soon, then twice
# as long each time (core/backoff.py), at most this fraction of the lease or window apart: a renewal
# still has two thirds of its lease left when it first fails, and a handful of tries fit in each.
RETRY_AFTER_ERROR = 0.5
RETRY_SPREAD = 8
# Clean-ups kept at most; beyond, the oldest is dropped (its lease or heartbeat ends it).
MAX_PENDING = 10_000
# The thread looks at least this often (seconds), even with nothing due: a permit whose first
# renewal is due later than that (any lease of 3 s or more) is then tracked without waking it, so
# a request's permit does not pay a thread switch (and the GIL changing hands) on the way in.
LOOK_EVERY = 1.0


class Renewable(Protocol):
    """What this thread needs of a permit (core/permit.py's ``Permit``).

    Named here, so that permit.py imports this module and this one knows no
    permit class: no import cycle, not even a type-only one.
    """

    name: str
    final: bool
    expires_at: float
    lease: float

    def renew(self) -> bool: ...

    def next_renewal(self) -> float: ...

    def mark_lost(self, reason: str = "expired") -> None: ...


@dataclass
class Settlement:
    """A clean-up to run once Redis answers again; pointless after ``give_up_at``."""

    call: ScriptCall
    give_up_at: float
    next_try: float
    # What to do with the reply once it comes (a release's: report a limit change it made).
    on_reply: Callable[[Any], object] | None = None
    # The sync client of the call it cleans up after (None: the settings' when it runs).
    client: SyncClient | None = None
    # Seconds it was given: an eighth of it is the longest pause between two of its tries.
    window: float = 0.0


class Background:
    def __init__(self) -> None:
        self._reset()
        # A forked child (gunicorn --preload, Celery prefork) must not inherit
        # a lock that was held at fork time, nor renew its parent's permits.
        os.register_at_fork(after_in_child=self._reset)

    def _reset(self) -> None:
        # Weak: a permit its owner dropped without releasing is no longer
        # renewed, so the server reclaims it when its lease ends.
        self._due: weakref.WeakKeyDictionary[Renewable, float] = weakref.WeakKeyDictionary()
        # Failed renewals in a row, of the permits whose last renewal failed.
        self._failing: weakref.WeakKeyDictionary[Renewable, int] = weakref.WeakKeyDictionary()
        self._pending: deque[Settlement] = deque()
        # Failed rounds of clean-ups in a row (each round stops at its first failure).
        self._settle_failures = 0
        # The clean-up taken off ``_pending`` and not over yet: still pending to whoever waits for its effect.
        # drop_pending forgets it too, so an outage does not put it back.
        self._settling: Settlement | None = None
        self._wakeup = threading.Condition()
        # The threading module's Lock when the condition was made (see _lock_for_now).
        self._made_under = threading.Lock
        self._thread: threading.Thread | None = None
        # When the thread will next look on its own (within LOOK_EVERY); waking
        # it earlier is only needed for work due before then (rare: leases are
        # alike), which keeps short-lived permits from paying a thread switch each.
        self._asleep_until = 0.0
        # Jobs run once at a time of their own, by name: the metrics' next batch (core/tally.py), the
        # reading of replies that releases sent without waiting for (core/bounded.py's posts), the
        # outage watch's next look and the outage's end (core/outage_watch.py).
        self._jobs: dict[str, tuple[float, Callable[[], object]]] = {}
        # Jobs to run once a call of this process finds Redis answering after an outage, by name.
        self._after_outage: dict[str, Callable[[], object]] = {}
        self.watch = OutageWatch(self.run_at)

    def _lock_for_now(self) -> None:
        """Make the lock again if threading was monkey-patched since it was made, and no thread runs yet.

        gunicorn's gevent worker patches threading after forking, so with
        ``--preload`` the lock made at import (and again at fork) is the C
        RLock, which takes every greenlet of the thread for its owner: the
        thread, started from under it, got in beside the greenlet that held
        it, and every guarded request met "cannot release un-acquired lock"
        (a 500, its permit kept). Made after the patch, it is gevent's. The
        thread starts with the first permit, job or clean-up, so nothing is
        queued before it.
        """
        if threading.Lock is self._made_under or self._thread is not None:
            return
        self._reset()

    # -- renewal ----------------------------------------------------------

    def track(self, permit: Renewable, at: float | None = None) -> None:
        """Renew ``permit`` every third of its lease (``next_renewal``), first at ``at`` if given."""
        self._schedule(permit, permit.next_renewal() if at is None else at)

    def reschedule(self, permit: Renewable) -> None:
        """Its lease length changed: renew on the new schedule, if this thread renews it at all."""
        self._lock_for_now()
        with self._wakeup:  # reentrant: _schedule takes it too, and a forget() cannot slip in between
            if permit in self._due:
                self._schedule(permit, permit.next_renewal())

    def forget(self, permit: Renewable) -> None:
        if permit not in self._due:  # never renewed here (auto_renew off): no lock to take
            return
        with self._wakeup:
            self._due.pop(permit, None)
            self._failing.pop(permit, None)

    def _schedule(self, permit: Renewable, at: float) -> None:
        self._lock_for_now()
        with self._wakeup:
            self._due[permit] = at
            self._ensure_thread()
            if at < self._asleep_until:
                self._wakeup.notify()

    # -- reconciliation ---------------------------------------------------

    def reconcile(
        self,
        call: ScriptCall,
        within: float,
        on_reply: Callable[[Any], object] | None = None,
        client: SyncClient | None = None,
        *,
        soon: bool = False,
    ) -> None:
        """Run ``call`` once Redis answers, retrying for at most ``within`` seconds; then ``on_reply(reply)``.

        It runs on ``client``, the call's own; without one, on the client the settings name now, while
        the call is being cleaned up: never on whatever they name when the thread gets to it (a
        test's settings restored meanwhile, a site reconfigured), which may be another server.
        The first try comes after a pause (the call failed: Redis may be in trouble), or at once
        with ``soon``.
        """
        if client is None:
            client = _current_client()
        now = time.monotonic()
        first_try = now if soon else now + RETRY_AFTER_ERROR
        self._lock_for_now()
        with self._wakeup:
            if len(self._pending) >= MAX_PENDING:
                dropped = self._pending.popleft()
                logger.warning("Too many unsettled calls; dropping %s (its lease or heartbeat ends it)", dropped.call)
            self._pending.append(Settlement(call, now + within, first_try, on_reply, client, within))
            self._ensure_thread()
            if first_try < self._asleep_until:
                self._wakeup.notify()

    # -- jobs at a time of their own --------------------------------------------

    def run_at(self, name: str, at: float, job: Callable[[], object]) -> None:
        """Run ``job`` on this thread once, at ``at`` (monotonic); it replaces the job of that name not yet run.

        The metrics' counts (core/tally.py) are written so, once per interval.
        """
        self._lock_for_now()
        with self._wakeup:
            self._jobs[name] = (at, job)
            self._ensure_thread()
            if at < self._asleep_until:
                self._wakeup.notify()

    def after_outage(self, name: str, job: Callable[[], object]) -> None:
        """Run ``job`` on this thread once a call of this process finds Redis answering after an outage.

        For work that can wait for that rather than try Redis on a timer (the
        metrics' counts a flush could not write): with no traffic and no
        outage ending, it never calls Redis.
        """
        with self._wakeup:
            self._after_outage[name] = job

    # -- the outage log's account (core/outages.py's Watcher) -------------------------------------

    def outage_down(self) -> None:
        """Redis stopped answering: the watch looks at it now and then."""
        self.watch.down()

    def outage_answered(self, end_due: float) -> None:
        """Redis answered after failing: every postponed renewal, clean-up and job is tried now."""
        with self._wakeup:
            now = time.monotonic()
            for permit in list(self._failing):
                if permit in self._due:
                    self._due[permit] = min(self._due[permit], now)
            self._failing.clear()
            for waiting in self._pending:
                waiting.next_try = min(waiting.next_try, now)
            self._settle_failures = 0
            for name, job in self._after_outage.items():
                self._jobs[name] = (now, job)
            self._after_outage.clear()
            self._ensure_thread()
            self._wakeup.notify()
        self.watch.answered(end_due)

    def run_unhurried(self, name: str, job: Callable[[], object]) -> None:
        """Run ``job`` when this thread next looks on its own (within two ``LOOK_EVERY``), unless one of that
        name is already due: it never wakes the thread, so a caller on every request pays no thread switch.
        """
        if name in self._jobs:  # a read without the lock: at worst the job is set twice
            return
        self.run_at(name, time.monotonic() + LOOK_EVERY, job)

    def pending(self) -> int:
        """Clean-ups not over yet, the one being run included (for tests and metrics): at 0, each has had its effect."""
        with self._wakeup:
            return len(self._pending) + (self._settling is not None)

    def drop_pending(self) -> None:
        """Forget every clean-up still waiting (for tests: one left for a server a test stopped is not the next's).

        Each runs on its own call's client, so one for a server that is gone
        retries until its lease would have ended; a test that waits for
        ``pending()`` to reach 0 must not wait for another test's.
        """
        with self._wakeup:
            self._pending.clear()
            self._settling = None

    # -- the thread -------------------------------------------------------

    def _ensure_thread(self) -> None:
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(target=self._run, name="django-semaphore-renewer", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        bounded.hand_elsewhere()  # what receivers of the releases' signals do must not hold up the renewals
        while True:
            with self._wakeup:
                now = time.monotonic()
                due = [p for p, at in list(self._due.items()) if at <= now]
                settle = bool(self._pending) and self._pending[0].next_try <= now
                ready = [name for name, (at, _) in self._jobs.items() if at <= now]
                jobs = [self._jobs.pop(name)[1] for name in ready]
                if not due and not settle and not jobs:
                    later = [at for at, _ in self._jobs.values()]
                    wake_at = min(
                        [*self._due.values(), *(s.next_try for s in self._pending), *later], default=now + LOOK_EVERY
                    )
                    self._asleep_until = min(max(wake_at, now + 0.01), now + LOOK_EVERY)
                    self._wakeup.wait(timeout=self._asleep_until - now)
                    self._asleep_until = 0.0
                    continue
            self._renew(due)
            if settle:
                self._settle()
            for job in jobs:
                try:
                    job()
                except Exception:  # a bug must not kill the thread that guards every permit
                    logger.exception("The background job %r failed", job)

    def _renew(self, due: list[Renewable]) -> None:
        for permit in due:
            if permit.final and time.monotonic() >= permit.expires_at:
                permit.mark_lost(reason="max_hold")
                continue
            try:
                renewed = permit.renew()
            except BackendUnavailable as exc:
                outage_log.unavailable(permit.name, exc, RENEWAL)  # one account of the outage, not a line per try
                next_at = self._retry_renewal(permit)
            except Exception:  # a bug must not kill the thread that guards every permit
                logger.exception("Renewing %r failed", permit)
                next_at = self._retry_renewal(permit)
            else:
                with self._wakeup:
                    self._failing.pop(permit, None)
                if not renewed:  # released or lost meanwhile: due no more, whoever tracked it again
                    with self._wakeup:
                        self._due.pop(permit, None)
                    continue
                next_at = permit.next_renewal()
            if next_at is None:  # its lease is over: no renewal can save it now
                permit.mark_lost(reason="expired")
                continue
            with self._wakeup:
                if permit in self._due:
                    self._due[permit] = next_at

    def _retry_renewal(self, permit: Renewable) -> float | None:
        """When to try a failed renewal again (backing off, the lease's end at the latest); None: it has ended."""
        now = time.monotonic()
        if now >= permit.expires_at:
            return None
        with self._wakeup:
            failures = self._failing[permit] = self._failing.get(permit, 0) + 1
        pause = retry_delay(failures, RETRY_AFTER_ERROR, max(RETRY_AFTER_ERROR, permit.lease / RETRY_SPREAD))
        return min(now + pause, permit.expires_at)

    def _settle(self) -> None:
        """Run the due clean-ups in order; the first outage postpones the rest (they would fail too)."""
        while True:
            now = time.monotonic()
            with self._wakeup:
                if not self._pending or self._pending[0].next_try > now:
                    return
                job = self._settling = self._pending.popleft()
            try:
                if not self._settle_one(job, now):
                    return
            finally:
                with self._wakeup:
                    if self._settling is job:
                        self._settling = None

    def _settle_one(self, job: Settlement, now: float) -> bool:
        """Run one clean-up; False on an outage, with it put back first and every one postponed (unless it was
        dropped meanwhile: then the queue holds only later ones, which the outage says nothing of)."""
        if now > job.give_up_at:
            return True
        try:
            reply = scripts.run(get_client() if job.client is None else job.client, job.call)
        except Exception as exc:
            if not is_outage(exc):  # a bug must not kill the thread that guards every permit
                logger.exception("Settling %s failed", job.call)
                return True
            outage_log.observed_down(exc)
            return not self._postpone(job, now)
        outage_log.answered()
        with self._wakeup:
            self._settle_failures = 0
        if job.on_reply is not None:
            try:
                job.on_reply(reply)
            except Exception:  # a bug must not kill the thread that guards every permit
                logger.exception("Settling %s failed", job.call)
        return True

    def _postpone(self, job: Settlement, now: float) -> bool:
        """Put a clean-up that met an outage back, and every one after a longer pause; False if it was dropped."""
        with self._wakeup:
            if self._settling is not job:  # dropped meanwhile: neither put back nor a reason to wait
                return False
            self._pending.appendleft(job)
            self._settling = None  # back in the queue: counted once
            self._settle_failures += 1
            window = min(waiting.window for waiting in self._pending)
            pause = retry_delay(self._settle_failures, RETRY_AFTER_ERROR, max(RETRY_AFTER_ERROR, window / RETRY_SPREAD))
            for waiting in self._pending:
                waiting.next_try = now + pause
        return True


def _current_client() -> SyncClient | None:
    """The settings' sync client now; None if they name none (the clean-up then asks again when it runs)."""
    try:
        client: SyncClient = get_client()
    except RedisError:  # a clean-up is queued from error paths: settings that make no client must not mask theirs
        return None
    return client


renewer = Background()
outage_log.watcher = renewer
