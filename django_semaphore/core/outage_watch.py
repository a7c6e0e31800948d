"""While an outage lasts, the background thread looks at Redis now and then, so that its end is logged as it comes.

A process that met an outage may have nothing else to call Redis for: its
requests stopped, or it only ever had a few. Its account of the outage
(core/outages.py) would then wait for the next request to learn that Redis
answers again. So the background thread looks on its own: the status of the
semaphore that met the outage last, on the settings' client,
``FIRST_LOOK`` after Redis stopped answering, then ``LOOK_FACTOR`` times
longer each time, at most ``MOST_BETWEEN_LOOKS`` apart (each pause
jittered: core/backoff.py). It does not look while calls of the process
keep meeting the outage (they tell as much), and stops once nothing in the
process (no request, task, renewal or release) has needed Redis for one
``SEMAPHORE_OUTAGE_LOG_INTERVAL``: an idle process that a long outage left
alone does not keep calling Redis for it.

A look is one script call of bounded work (a status that lists no holder)
that never loads the library (``scripts.run_loaded``), so an operator's
``FUNCTION FLUSH`` stays done until a call that needs the library. What its answer means: after a server that
stopped answering (refused connections, timeouts), any reply is Redis
answering, one saying the library is gone included (a restart without
persistence: the next call loads it); after a refusal (an ACL change, OOM,
Lua switched off) only the status itself answering is, and a library gone
leaves it unknown: the process stops looking, and its next call tells.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from . import scripts
from .backoff import retry_delay
from .calls import Calls
from .conf import config_for
from .connection import get_client
from .errors import is_outage
from .outages import outage_log

logger = logging.getLogger("django_semaphore.outages")

# The pauses between looks (seconds): the first, how much longer each next one is, the longest.
FIRST_LOOK = 0.25
LOOK_FACTOR = 1.25
MOST_BETWEEN_LOOKS = 5.0
# The names of the background thread's jobs (core/renewal.py's ``run_at``): one of each at a time.
LOOK_JOB, END_JOB = "outage look", "outage end"

RunAt = Callable[[str, float, Callable[[], object]], None]


class OutageWatch:
    """The looks at Redis of one process, scheduled on its background thread through ``run_at``."""

    def __init__(self, run_at: RunAt) -> None:
        self._run_at = run_at
        self._looks = 0
        self._seen = 0

    def down(self) -> None:
        """Redis stopped answering: the first look comes soon."""
        self._looks = 0
        self._schedule()

    def answered(self, end_due: float) -> None:
        """Redis answered: the account's end is due at ``end_due``, unless a call fails first."""
        self._run_at(END_JOB, end_due, outage_log.tick)

    def _schedule(self) -> None:
        self._seen = outage_log.seen()
        pause = retry_delay(self._looks + 1, FIRST_LOOK, MOST_BETWEEN_LOOKS, LOOK_FACTOR)
        self._run_at(LOOK_JOB, time.monotonic() + pause, self.look)

    def look(self) -> None:
        """One look, on the background thread, if one is wanted; the next is scheduled while Redis fails."""
        target = outage_log.to_look_at()
        if target is None:
            return
        if outage_log.seen() != self._seen:  # calls of the process met the outage meanwhile: they tell
            self._schedule()
            return
        config = config_for(target.name)
        if config is None:  # the settings changed under the account (tests): nothing to look at
            outage_log.stop_looking()
            return
        self._looks += 1
        try:
            scripts.run_loaded(get_client(), Calls.of(config, target.partition).status(0, False))
        except scripts.NotLoaded:
            if target.refusal:  # whether it still refuses, only the library would say: a call that loads it
                outage_log.stop_looking("the semaphores' library is gone from the server, and a look does not load it")
            else:
                outage_log.answered()
        except Exception as exc:
            if not is_outage(exc):  # a bug, or a broken setting: not the outage's to tell
                logger.exception("Looking at Redis during an outage failed")
                outage_log.stop_looking()
                return
            outage_log.observed_down(exc, look=True)
            self._schedule()
        else:
            outage_log.answered()
