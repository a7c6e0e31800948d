"""One background thread per process: it keeps held permits' leases alive, and
settles calls whose outcome Redis never confirmed.

**Renewal.** A permit is renewed every third of its lease, so a single slow or
failed renewal still leaves time for another before the server reclaims it. A
renewal that finds the lease gone marks the permit lost and never re-acquires:
someone else may hold that permit by now. A permit that reached its max hold
is not renewed past it, and is marked lost when its last lease ends.

**Reconciliation.** An acquire or release that timed out or lost its
connection may still run in Redis (a hung server runs what it buffered when it
resumes), or may never have run. Either way a permit could be left held by
nobody until its lease ends, which for a long lease means minutes of
turned-away requests. Such a call's clean-up (leave the line and give back
what that call was granted; or the release itself) is retried here until Redis
answers, so capacity comes back within moments of Redis doing so.

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

from . import bounded, scripts
from .calls import ScriptCall
from .clients import SyncClient
from .connection import get_client
from .errors import BackendUnavailable, is_outage
from .outages import RENEWAL, outage_log

logger = logging.getLogger("django_semaphore.renewal")

# After a failed round (Redis unreachable), try again this soon: the lease
# still has two thirds of its time left.
RETRY_AFTER_ERROR = 0.5
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
        self._pending: deque[Settlement] = deque()
        # The clean-up taken off ``_pending`` and not over yet: still pending to whoever waits for its effect.
        # drop_pending forgets it too, so an outage does not put it back.
        self._settling: Settlement | None = None
        self._wakeup = threading.Condition()
        self._thread: threading.Thread | None = None
        # When the thread will next look on its own (within LOOK_EVERY); waking
        # it earlier is only needed for work due before then (rare: leases are
        # alike), which keeps short-lived permits from paying a thread switch each.
        self._asleep_until = 0.0
        # Jobs run once at a time of their own, by name: the metrics' next batch (core/tally.py), the
        # reading of replies that releases sent without waiting for (core/bounded.py's posts).
        self._jobs: dict[str, tuple[float, Callable[[], object]]] = {}

    # -- renewal ----------------------------------------------------------

    def track(self, permit: Renewable, at: float | None = None) -> None:
        """Renew ``permit`` every third of its lease (``next_renewal``), first at ``at`` if given."""
        self._schedule(permit, permit.next_renewal() if at is None else at)

    def reschedule(self, permit: Renewable) -> None:
        """Its lease length changed: renew on the new schedule, if this thread renews it at all."""
        with self._wakeup:  # reentrant: _schedule takes it too, and a forget() cannot slip in between
            if permit in self._due:
                self._schedule(permit, permit.next_renewal())

    def forget(self, permit: Renewable) -> None:
        if permit not in self._due:  # never renewed here (auto_renew off): no lock to take
            return
        with self._wakeup:
            self._due.pop(permit, None)

    def _schedule(self, permit: Renewable, at: float) -> None:
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
        with self._wakeup:
            if len(self._pending) >= MAX_PENDING:
                dropped = self._pending.popleft()
                logger.warning("Too many unsettled calls; dropping %s (its lease or heartbeat ends it)", dropped.call)
            self._pending.append(Settlement(call, now + within, first_try, on_reply, client))
            self._ensure_thread()
            if first_try < self._asleep_until:
                self._wakeup.notify()

    # -- jobs at a time of their own --------------------------------------------

    def run_at(self, name: str, at: float, job: Callable[[], object]) -> None:
        """Run ``job`` on this thread once, at ``at`` (monotonic); it replaces the job of that name not yet run.

        The metrics' counts (core/tally.py) are written so, once per interval.
        """
        with self._wakeup:
            self._jobs[name] = (at, job)
            self._ensure_thread()
            if at < self._asleep_until:
                self._wakeup.notify()

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
                next_at = time.monotonic() + RETRY_AFTER_ERROR
            except Exception:  # a bug must not kill the thread that guards every permit
                logger.exception("Renewing %r failed", permit)
                next_at = time.monotonic() + RETRY_AFTER_ERROR
            else:
                if not renewed:  # released or lost meanwhile: due no more, whoever tracked it again
                    with self._wakeup:
                        self._due.pop(permit, None)
                    continue
                next_at = permit.next_renewal()
            with self._wakeup:
                if permit in self._due:
                    self._due[permit] = next_at

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
            if job.on_reply is not None:
                job.on_reply(reply)
        except Exception as exc:
            if not is_outage(exc):  # a bug must not kill the thread that guards every permit
                logger.exception("Settling %s failed", job.call)
                return True
            with self._wakeup:
                if self._settling is not job:  # dropped meanwhile: neither put back nor a reason to wait
                    return True
                self._pending.appendleft(job)
                self._settling = None  # back in the queue: counted once
                for waiting in self._pending:
                    waiting.next_try = now + RETRY_AFTER_ERROR
            return False
        return True


def _current_client() -> SyncClient | None:
    """The settings' sync client now; None if they name none (the clean-up then asks again when it runs)."""
    try:
        client: SyncClient = get_client()
    except Exception:  # a clean-up is queued from error paths: a bad setting must not mask their error
        return None
    return client


renewer = Background()
