"""A Redis outage, logged as an event: a record when it starts, a summary per interval, a record when it ends.

During an outage every guarded request meets the failure policy; a line for
each would be thousands a second at real traffic, burying the one fact an
operator needs (Redis is down, since when, what the policy did) and the
application's own logs with it. So this process keeps one account per
outage instead (an *episode*), on the ``django_semaphore.outages`` logger,
all at WARNING:

- when it starts (the first call of this process that Redis fails): the
  cause, where it was first met, and that semaphore's policy;
- at most once per ``SEMAPHORE_OUTAGE_LOG_INTERVAL`` seconds while it lasts:
  per semaphore, how many requests or tasks were let through unguarded or
  refused, renewals that failed and releases left to the background;
- when it ends: how long it lasted, how much of that Redis was down, and
  the totals.

**An episode ends** once Redis has answered for ``RECOVERED_AFTER`` seconds
with no call of this process failing meanwhile; the end is recorded then
(by the call that finds it so, or by the background thread, which wakes for
it), and names the moment Redis first answered. A call that fails sooner
continues the same episode: the answers in between were a brief recovery,
which the end record counts apart from the time Redis was down. So a server
that flaps (one Cluster node down while the others answer, a connection
dropped now and then) is one episode, and two outages further apart than
that are two, each with its own start and end.

**What is observed.** Only calls tell: the requests and tasks this process
guards, its permits' renewals and releases, and the background thread's
retries. A process that calls nothing during an outage logs nothing of it.
Once one has met an outage, the background thread looks at Redis on its own
(core/outage_watch.py) until it answers or nothing in this process has
needed Redis for one interval: its first answer is then seen within a
bounded pause, and the end recorded without waiting for a request. A
process that stopped looking says so; its next call Redis answers starts the
end. Counts are this process's own; ``outcomes.counts()`` and the signals
still see every request.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from .conf import app_setting, config_for
from .errors import is_refusal, reason
from .safe_text import for_log

logger = logging.getLogger("django_semaphore.outages")

# What happened to one call during the outage (the words the records use).
LET_THROUGH = "let through unguarded"
REFUSED = "refused"
RENEWAL = "renewals failed"
RELEASE = "releases left to retry in the background"
KINDS = (LET_THROUGH, REFUSED, RENEWAL, RELEASE)

# Seconds Redis must answer, with no call failing, for an episode to end: a call failing sooner
# continues it (a brief recovery). Shorter than the gaps between outages an operator tells apart,
# longer than a flapping server's.
RECOVERED_AFTER = 3.0
# Seconds between the last failure seen and the first answer above which the end record says how
# closely the end was seen (calls were rare, or the background thread's looks far apart).
SEEN_CLOSELY = 1.0


class Watcher(Protocol):
    """What the background thread does for the account (core/renewal.py)."""

    def outage_down(self) -> None:
        """Redis stopped answering (an episode began, or a brief recovery ended): look at it now and then."""

    def outage_answered(self, end_due: float) -> None:
        """Redis answered after failing: retry what was postponed, and call ``tick()`` at ``end_due``."""


@dataclass(frozen=True)
class Look:
    """What to look at: the semaphore (and partition) that met the outage last, and whether Redis refused it."""

    name: str
    partition: str | None
    refusal: bool


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
    """This process's account of the current episode (``clock``: seconds, monotonic)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        # The background thread, once core/renewal.py is imported (it imports this module).
        self.watcher: Watcher | None = None
        self.reset()
        # A forked child (gunicorn --preload, Celery prefork) must not inherit a lock held at fork time.
        os.register_at_fork(after_in_child=self.reset)

    def reset(self) -> None:
        """Forget any outage (a forked child; tests, as ``outcomes.reset()``)."""
        self._lock = threading.Lock()
        self._open = False
        # Since when Redis fails (None: not failing), and since when it answers again (None: failing, or no episode).
        self._down_since: float | None = None
        self._up_since: float | None = None
        self._started = 0.0
        self._cause = ""
        self._look: Look | None = None
        self._downtime = 0.0  # of the down stretches over
        self._recoveries = 0  # brief ones, inside the episode
        self._last_failure = 0.0
        self._last_need = 0.0  # the last counted call (a request, a task, a renewal, a release) that failed
        self._watched = True  # False once the process said it stops looking
        self._seen = 0  # failures seen by calls other than the background's looks, for the looks to skip
        self._since_record: dict[str, Counter[str]] = {}
        self._total: dict[str, Counter[str]] = {}
        self._last_record = 0.0

    # -- what the calls tell --------------------------------------------------------------------------

    def unavailable(self, name: str, error: BaseException, kind: str, where: str = "") -> None:
        """One call of semaphore ``name`` met an outage and got ``kind`` (``where``: its request line or label)."""
        with self._lock:
            now = self._clock()
            records, down = self._failed(now, error, name, kind, where)
            down = down or not self._watched  # it had stopped looking: someone needs Redis again
            self._last_need = now
            self._watched = True
            self._seen += 1
            self._since_record.setdefault(name, Counter())[kind] += 1
            self._total.setdefault(name, Counter())[kind] += 1
            if not records and now - self._last_record >= self._interval():
                records.append(self._summary(now))
        self._tell(records, down)

    def observed_down(self, error: BaseException, *, look: bool = False) -> None:
        """A call that counts nothing met the outage (a background retry, or the background's ``look``).

        It tells only of an episode already open: a clean-up retried after
        the episode ended may be about a server the settings no longer name.
        """
        with self._lock:
            if not self._open:
                return
            now = self._clock()
            records, down = self._failed(now, error)
            self._seen += not look
            if not records and now - self._last_record >= self._interval():
                records.append(self._summary(now))
        self._tell(records, down)

    def answered(self) -> None:
        """Redis answered a call: the episode, if any, is ending (ended once it has answered RECOVERED_AFTER)."""
        if self._down_since is None and self._up_since is None:
            return  # the hot path: two attribute reads per call, no lock
        record, end_due = None, None
        with self._lock:
            now = self._clock()
            if self._down_since is not None:
                self._downtime += now - self._down_since
                self._down_since, self._up_since = None, now
                end_due = now + RECOVERED_AFTER
            elif self._up_since is not None and now - self._up_since >= RECOVERED_AFTER:
                record = self._end(now)
        if record:
            logger.warning("%s", record)
        if end_due is not None and self.watcher is not None:
            self.watcher.outage_answered(end_due)

    def tick(self) -> None:
        """Record the end if Redis has answered RECOVERED_AFTER by now (the background thread, which wakes for it)."""
        record = None
        with self._lock:
            if self._up_since is not None and self._clock() - self._up_since >= RECOVERED_AFTER:
                record = self._end(self._clock())
        if record:
            logger.warning("%s", record)

    # -- what the background thread asks ----------------------------------------------------------------

    def seen(self) -> int:
        """How many failures calls other than the looks have met: a look skips Redis when it moved since the last."""
        return self._seen

    def to_look_at(self) -> Look | None:
        """What the background thread should look at now, or None: Redis answers, or nothing needs it any more.

        Looking stops once no request, task or permit of this process has
        needed Redis for one interval; the account says so, once.
        """
        records = []
        with self._lock:
            if self._down_since is None or not self._watched:
                return None
            now = self._clock()
            interval = self._interval()
            if now - self._last_need >= interval:
                self._watched = False
                records.append(
                    f"Redis still unavailable after {now - self._started:.0f} s ({self._cause}); nothing in this "
                    f"process has needed it for {now - self._last_need:.0f} s, so it stops looking: the next call "
                    f"that Redis answers ends this outage. In the last {now - self._last_record:.0f} s: "
                    f"{_tally(self._since_record)}."
                )
                self._since_record, self._last_record = {}, now
            look = self._look
        self._tell(records, False)
        return None if records else look

    def stop_looking(self, why: str = "") -> None:
        """A look could not tell whether Redis is back: leave it to the next call (``why``: said once, if given)."""
        record = None
        with self._lock:
            if self._watched and why and self._open:
                record = (
                    f"Redis still unavailable after {self._clock() - self._started:.0f} s ({self._cause}), as far "
                    f"as this process can tell: {why}, so it stops looking: the next call that Redis answers ends "
                    "this outage."
                )
            self._watched = False
        if record:
            logger.warning("%s", record)

    # -- the records --------------------------------------------------------------------------------------

    def _failed(
        self, now: float, error: BaseException, name: str = "", kind: str = "", where: str = ""
    ) -> tuple[list[str], bool]:
        """A failure at ``now``: the records it makes, and whether Redis was answering until it (look again)."""
        records: list[str] = []
        self._last_failure = now
        if self._up_since is not None and now - self._up_since >= RECOVERED_AFTER:
            records.append(self._end(now))  # the last episode was over: this is another
        if not self._open:
            self._begin(now, error)
            records.append(
                f"Redis unavailable ({self._cause}): an outage begins, first met by "
                f"{_first_seen(name, kind, where) if name else 'the background thread'}. Until Redis answers, this "
                f"process logs a summary every {self._interval():g} s (SEMAPHORE_OUTAGE_LOG_INTERVAL), not a line "
                "per request."
            )
        if name:
            partition = getattr(error, "partition", None)
            self._look = Look(name, partition if isinstance(partition, str) else None, is_refusal(error))
        if self._down_since is not None:
            return records, False
        if self._up_since is not None:  # it answered briefly: the same episode goes on
            self._recoveries += 1
            self._up_since = None
        self._down_since = now
        return records, True

    def _begin(self, now: float, error: BaseException) -> None:
        self._open = True
        self._started = self._last_record = now
        self._cause = for_log(reason(error)).rstrip(".")
        self._downtime, self._recoveries = 0.0, 0
        self._last_need = now
        self._watched = True
        self._since_record, self._total = {}, {}

    def _summary(self, now: float) -> str:
        brief = f"; it answered {self._recoveries} time(s) in between, briefly" if self._recoveries else ""
        text = (
            f"Redis still unavailable: for {now - self._started:.0f} s ({self._cause}{brief}). "
            f"In the last {now - self._last_record:.0f} s: {_tally(self._since_record)}."
        )
        self._since_record = {}
        self._last_record = now
        return text

    def _end(self, now: float) -> str:
        up = self._up_since if self._up_since is not None else now
        span = up - self._started
        detail = ""
        if self._recoveries:
            detail += (
                f", down for {self._downtime:.1f} s of it: it answered {self._recoveries} time(s) in between, "
                f"for {span - self._downtime:.1f} s in all"
            )
        if up - self._last_failure > SEEN_CLOSELY:
            detail += f" (last seen unavailable {up - self._last_failure:.1f} s before it answered)"
        text = (
            f"Redis answered again {now - up:.0f} s ago, after an outage of {span:.1f} s{detail} ({self._cause}). "
            f"During it: {_tally(self._total)}. The limits are enforced again."
        )
        self._open = False
        self._down_since = self._up_since = None
        self._look = None
        self._since_record, self._total = {}, {}
        return text

    def _tell(self, records: list[str], down: bool) -> None:
        for record in records:
            logger.warning("%s", record)
        if down and self.watcher is not None:
            self.watcher.outage_down()

    @staticmethod
    def _interval() -> float:
        return float(app_setting("SEMAPHORE_OUTAGE_LOG_INTERVAL"))


outage_log = OutageLog()
