"""A Redis outage, logged as an event: a record when it starts, a summary per interval, a record when it ends.

During an outage every guarded request meets the failure policy; a line for
each would be thousands a second at real traffic, burying the one fact an
operator needs (Redis is down, since when, what the policy did) and the
application's own logs with it. So this process keeps one account of the
outage instead, on the ``django_semaphore.outages`` logger, all at WARNING:

- when it starts: the cause, where it was first met, and that semaphore's policy;
- at most once per ``SEMAPHORE_OUTAGE_LOG_INTERVAL`` seconds while it lasts:
  per semaphore, how many requests or tasks were let through unguarded or
  refused, renewals that failed and releases left to the background;
- when Redis answers again: how long it lasted, and the totals.

An outage ends at the first call Redis answers. A server that flaps (one
Cluster node down while the others answer, a connection dropped now and
then) would otherwise start and end an outage per request: an outage that
starts again within one interval of the last recorded end is the same
outage, reported by the next summary, and at most one end is recorded per
interval. Counts are this process's own; ``outcomes.counts()`` and the
signals still see every request.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import Counter
from collections.abc import Callable

from .conf import app_setting, config_for
from .errors import reason
from .safe_text import for_log

logger = logging.getLogger("django_semaphore.outages")

# What happened to one call during the outage (the words the records use).
LET_THROUGH = "let through unguarded"
REFUSED = "refused"
RENEWAL = "renewals failed"
RELEASE = "releases left to retry in the background"
KINDS = (LET_THROUGH, REFUSED, RENEWAL, RELEASE)


def _first_seen(name: str, kind: str, where: str) -> str:
    """Where the outage was first met, and what the semaphore's policy does about it."""
    at = f" on {for_log(where)}" if where else ""
    if kind == LET_THROUGH:
        return f"semaphore {name!r}{at}: on_error='allow' lets guarded work run unguarded"
    if kind == REFUSED:
        return f"semaphore {name!r}{at}: on_error='deny' refuses guarded work (503, or a task retry)"
    config = config_for(name)
    policy = f"; guarded work follows on_error={config.on_error!r}" if config else ""
    if kind == RENEWAL:
        return f"renewing a permit of {name!r} (retried until its lease ends){policy}"
    return f"releasing a permit of {name!r} (retried in the background until its lease ends){policy}"


def _tally(counts: dict[str, Counter[str]]) -> str:
    parts = []
    for name in sorted(counts):
        config = config_for(name)
        policy = f" (on_error={config.on_error!r})" if config else ""
        done = ", ".join(f"{counts[name][kind]} {kind}" for kind in KINDS if counts[name][kind])
        parts.append(f"{name!r}{policy}: {done}")
    return "; ".join(parts) or "nothing guarded was asked for"


class OutageLog:
    """This process's account of the current outage (``clock``: seconds, monotonic)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self.reset()
        # A forked child (gunicorn --preload, Celery prefork) must not inherit a lock held at fork time.
        os.register_at_fork(after_in_child=self.reset)

    def reset(self) -> None:
        """Forget any outage (a forked child; tests, as ``outcomes.reset()``)."""
        self._lock = threading.Lock()
        # When Redis stopped answering (None: it answers), and when the outage being told began.
        self._down_since: float | None = None
        self._started = 0.0
        self._cause = ""
        self._announced = False  # a start or a summary of this outage was recorded
        self._since_record: dict[str, Counter[str]] = {}
        self._total: dict[str, Counter[str]] = {}
        self._last_record = 0.0
        self._flaps = 0
        # When the last outage told ended, and when its end was recorded; an end not recorded yet.
        self._last_end: float | None = None
        self._last_end_record: float | None = None
        self._end_due: float | None = None

    def unavailable(self, name: str, error: BaseException, kind: str, where: str = "") -> None:
        """One call of semaphore ``name`` met an outage and got ``kind`` (``where``: its request line or label)."""
        interval = float(app_setting("SEMAPHORE_OUTAGE_LOG_INTERVAL"))
        records: list[str] = []
        with self._lock:
            now = self._clock()
            if self._down_since is None:
                self._down_since = now
                if self._end_due is not None and now - self._end_due < interval:
                    self._flaps += 1  # it answered briefly: the same outage goes on, and the summary says so
                    self._end_due = None
                else:
                    if self._end_due is not None:
                        records.append(self._end(now))  # an end that waited for its turn
                    self._begin(now, error)
                    if self._last_end is not None and now - self._last_end < interval:
                        self._last_record = self._last_end_record or now  # again so soon: the summary tells it
                    else:
                        self._announced = True
                        records.append(
                            f"Redis unavailable ({self._cause}): an outage begins, first met by "
                            f"{_first_seen(name, kind, where)}. Until Redis answers, this process logs a summary "
                            f"every {interval:g} s (SEMAPHORE_OUTAGE_LOG_INTERVAL), not a line per request."
                        )
            self._since_record.setdefault(name, Counter())[kind] += 1
            self._total.setdefault(name, Counter())[kind] += 1
            if not records and now - self._last_record >= interval:
                records.append(self._summary(now))
        for record in records:
            logger.warning("%s", record)

    def answered(self) -> None:
        """Redis answered a call: the outage, if any, is over (its end is recorded now, or once its turn comes)."""
        if self._down_since is None and self._end_due is None:
            return  # the hot path: two attribute reads per call, no lock
        interval = float(app_setting("SEMAPHORE_OUTAGE_LOG_INTERVAL"))
        record = None
        with self._lock:
            now = self._clock()
            if self._down_since is not None:
                self._down_since = None
                self._end_due = now
            due = self._last_end_record is None or now - self._last_end_record >= interval
            if self._end_due is not None and due:
                record = self._end(now)
        if record:
            logger.warning("%s", record)

    def _begin(self, now: float, error: BaseException) -> None:
        self._started = self._last_record = now
        self._cause = for_log(reason(error)).rstrip(".")
        self._announced = False
        self._since_record, self._total, self._flaps = {}, {}, 0

    def _summary(self, now: float) -> str:
        head = "Redis still unavailable" if self._announced else "Redis unavailable again soon after the last outage"
        flaps = f"; it answered {self._flaps} time(s) in between, briefly" if self._flaps else ""
        text = (
            f"{head}: for {now - self._started:.0f} s ({self._cause}{flaps}). "
            f"In the last {now - self._last_record:.0f} s: {_tally(self._since_record)}."
        )
        self._announced = True
        self._since_record = {}
        self._last_record = now
        return text

    def _end(self, now: float) -> str:
        ended = self._end_due if self._end_due is not None else now
        flaps = f", with {self._flaps} brief recoveries in between" if self._flaps else ""
        late = "" if ended >= now - 1 else f" ({now - ended:.0f} s ago)"
        unannounced = "" if self._announced else " (its start was not logged: it came soon after the last one)"
        text = (
            f"Redis answers again{late} after an outage of {ended - self._started:.1f} s{flaps}{unannounced} "
            f"({self._cause}). During it: {_tally(self._total)}. The limits are enforced again."
        )
        self._last_end, self._last_end_record, self._end_due = ended, now, None
        self._since_record, self._total, self._flaps = {}, {}, 0
        return text


outage_log = OutageLog()
