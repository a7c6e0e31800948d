"""Pause and resume: the operator's side of a limit of 0, shared by ``semaphore_limit`` and the dashboard.

A pause is a runtime override of 0: nothing new is granted, holders finish,
waiters wait or time out, and callers are asked to come back after
``PAUSED_RETRY_AFTER`` (views answer 503, ``@limit`` raises, tasks retry).

Resuming clears the override, so the limit in settings applies again. It
does not bring back an override that was in force before the pause: that
would need a second value kept beside the limit, which two operators could
overwrite in turn; one stored value keeps the state plain. To resume at
another limit, set that limit: any limit of 1 or more ends a pause too.
"""

from __future__ import annotations

from ..core.semaphore import Semaphore


def is_paused(sem: Semaphore) -> bool:
    return sem.status(0).override == 0


def pause(sem: Semaphore) -> None:
    sem.set_limit(0)


def resume(sem: Semaphore) -> int | None:
    """Clear the pause and return the limit now in force; None (and nothing changed) when not paused.

    A resume sent from a stale page or an old shell history must not clear
    a limit another operator has set since the pause ended.
    """
    if not is_paused(sem):
        return None
    return sem.set_limit(None)
