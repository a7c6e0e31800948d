"""What a guarded request does when Redis cannot be reached.

Each semaphore chooses with its ``on_error`` option (default
``SEMAPHORE_ON_ERROR``, itself ``"allow"``):

- ``"allow"`` (fail open): the request runs unguarded. Right when the limit
  protects capacity that is usually fine, and an outage of Redis must not
  become an outage of the site.
- ``"deny"`` (fail closed): the request gets the 503. Right when running
  unguarded would do harm (a licence seat count, an API that bills per
  concurrent call, work that corrupts data when duplicated).

Either way ``semaphore_backend_error`` has already been sent by the core,
the outcome is counted in ``outcomes``, and the outage is logged as an event
(a record when it starts, a summary per interval, a record when it ends:
``core/outages.py``), never a line per request. A hung
Redis costs a request at most the client's socket timeouts, so keep them
short (docs/guides/failure-policy.md). Dry-run rules always let the request run.
"""

from __future__ import annotations

from .core.outages import LET_THROUGH, REFUSED, outage_log
from .core.semaphore import Semaphore
from .exceptions import BackendUnavailable

ALLOW, DENY = "allow", "deny"
# Seconds a client is asked to wait when a fail-closed semaphore cannot
# reach Redis: there is no lease to measure, and outages outlast a second.
ERROR_RETRY_AFTER = 5


def policy(semaphore: Semaphore, *, dry_run: bool = False) -> str:
    return ALLOW if dry_run else semaphore.config.on_error


def on_backend_error(semaphore: Semaphore, error: BackendUnavailable, *, path: str, dry_run: bool = False) -> bool:
    """Apply the semaphore's policy to an outage; True when the request may run (``path`` is the request's)."""
    allowed = policy(semaphore, dry_run=dry_run) == ALLOW
    outage_log.unavailable(semaphore.name, error, LET_THROUGH if allowed else REFUSED, where=path)
    return allowed
