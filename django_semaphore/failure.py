"""What a guarded request does when Redis cannot be reached.

Each semaphore chooses with its ``on_error`` option (default
``SEMAPHORE_ON_ERROR``, itself ``"allow"``):

- ``"allow"`` (fail open): the request runs unguarded. Right when the limit
  protects capacity that is usually fine, and an outage of Redis must not
  become an outage of the site.
- ``"deny"`` (fail closed): the request gets the 503. Right when running
  unguarded would do harm (a licence seat count, an API that bills per
  concurrent call, work that corrupts data when duplicated).

Either way the failure is logged, ``semaphore_backend_error`` has already
been sent by the core, and the outcome is counted in ``outcomes``. A hung
Redis costs a request at most the client's socket timeouts, so keep them
short (docs/guides/failure-policy.md). Dry-run rules always let the request run.
"""

from __future__ import annotations

import logging

from .core.semaphore import Semaphore
from .exceptions import BackendUnavailable
from .safe_text import for_log

logger = logging.getLogger("django_semaphore.failure")

ALLOW, DENY = "allow", "deny"
# Seconds a client is asked to wait when a fail-closed semaphore cannot
# reach Redis: there is no lease to measure, and outages outlast a second.
ERROR_RETRY_AFTER = 5


def policy(semaphore: Semaphore, *, dry_run: bool = False) -> str:
    return ALLOW if dry_run else semaphore.config.on_error


def on_backend_error(semaphore: Semaphore, error: BackendUnavailable, *, path: str, dry_run: bool = False) -> bool:
    """Apply the semaphore's policy to an outage; True when the request may run."""
    chosen = policy(semaphore, dry_run=dry_run)
    logger.warning(
        "Redis unavailable for semaphore %r on %s; on_error=%r %s the request: %s",
        semaphore.name,
        for_log(path),  # the client's: a newline in it would forge a log line
        chosen,
        "lets through" if chosen == ALLOW else "rejects",
        error,
    )
    return chosen == ALLOW
