"""One background thread per process keeps every held permit's lease alive.

A permit is renewed every third of its lease, so a single slow or failed
renewal still leaves time for another before the server reclaims it. A renewal that finds the
lease gone marks the permit lost and never re-acquires: someone else may
hold that permit by now.

Permits taken on the asyncio path are renewed here too, through the sync
client: one worker per process, whatever mix of sync and async code it runs.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import weakref
from typing import TYPE_CHECKING

from .exceptions import BackendUnavailable

if TYPE_CHECKING:
    from .permit import Permit

logger = logging.getLogger("django_semaphore.renewal")

# After a failed round (Redis unreachable), try again this soon: the lease
# still has two thirds of its time left.
RETRY_AFTER_ERROR = 0.5


class Renewer:
    def __init__(self) -> None:
        self._reset()
        # A forked child (gunicorn --preload, Celery prefork) must not inherit
        # a lock that was held at fork time, nor renew its parent's permits.
        os.register_at_fork(after_in_child=self._reset)

    def _reset(self) -> None:
        # Weak: a permit its owner dropped without releasing is no longer
        # renewed, so the server reclaims it when its lease ends.
        self._due: weakref.WeakKeyDictionary[Permit, float] = weakref.WeakKeyDictionary()
        self._wakeup = threading.Condition()
        self._thread: threading.Thread | None = None
        # When the thread will next look on its own; waking it earlier is only
        # needed for a permit due before then (rare: leases are alike), which
        # keeps short-lived permits from paying a thread switch each.
        self._asleep_until = 0.0

    def track(self, permit: Permit, *, soon: bool = False) -> None:
        """Renew ``permit`` every third of its lease (``soon``: first at once)."""
        due_at = time.monotonic() + (0 if soon else permit.lease / 3)
        with self._wakeup:
            self._due[permit] = due_at
            self._ensure_thread()
            if due_at < self._asleep_until:
                self._wakeup.notify()

    def forget(self, permit: Permit) -> None:
        with self._wakeup:
            self._due.pop(permit, None)

    def _ensure_thread(self) -> None:
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(target=self._run, name="django-semaphore-renewer", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        while True:
            with self._wakeup:
                now = time.monotonic()
                due = [p for p, at in list(self._due.items()) if at <= now]
                if not due:
                    self._asleep_until = max(min(self._due.values(), default=now + 60), now + 0.01)
                    self._wakeup.wait(timeout=self._asleep_until - now)
                    self._asleep_until = 0.0
                    continue
            self._renew(due)

    def _renew(self, due: list[Permit]) -> None:
        for permit in due:
            try:
                renewed = permit.renew()
            except BackendUnavailable as exc:
                logger.warning("Could not renew %r: %s", permit, exc)
                next_at = time.monotonic() + RETRY_AFTER_ERROR
            except Exception:  # a bug must not kill the thread that guards every permit
                logger.exception("Renewing %r failed", permit)
                next_at = time.monotonic() + RETRY_AFTER_ERROR
            else:
                if not renewed:
                    continue
                next_at = time.monotonic() + permit.lease / 3
            with self._wakeup:
                if permit in self._due:
                    self._due[permit] = next_at


renewer = Renewer()
