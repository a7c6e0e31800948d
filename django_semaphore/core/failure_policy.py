"""What guarded work (a request, a ``@limit`` call, a task) does when Redis cannot be reached.

Each semaphore chooses with its ``on_error`` option (default
``SEMAPHORE_ON_ERROR``, itself ``"allow"``):

- ``"allow"`` (fail open): the work runs unguarded. Right when the limit
  protects capacity that is usually fine, and an outage of Redis must not
  become an outage of the site.
- ``"deny"`` (fail closed): a request gets the 503, a ``@limit`` call
  ``BackendUnavailable``, a task a retry. Right when running
  unguarded would do harm (a licence seat count, an API that bills per
  concurrent call, work that corrupts data when duplicated).

Either way ``semaphore_backend_error`` has already been sent by the engine,
a request's outcome is counted in ``outcomes``, and the outage is logged as an event
(a record when it starts, a summary per interval, a record when it ends:
``core/outages.py``), never a line per request. A hung
Redis costs a request at most the client's socket timeouts, so keep them
short (docs/guides/failure-policy.md). Dry-run rules always let the request run.

A release that meets an outage is not refused work but bookkeeping: it is
counted in the same log and retried in the background (``give_back``).
"""

from __future__ import annotations

import logging
import threading

from django.core.signals import setting_changed

from .conf import SemaphoreConfig
from .errors import BackendUnavailable, ConnectionMisconfigured, misconfigured
from .outages import LET_THROUGH, REFUSED, RELEASE, outage_log
from .permit import Permit

settings_logger = logging.getLogger("django_semaphore.settings")

ALLOW, DENY = "allow", "deny"
# Seconds a client is asked to wait when a fail-closed semaphore cannot
# reach Redis: there is no lease to measure, and outages outlast a second.
ERROR_RETRY_AFTER = 5


def let_through(config: SemaphoreConfig, error: BackendUnavailable, *, where: str, dry_run: bool = False) -> bool:
    """Apply the semaphore's policy to an outage; True when the work may run unguarded.

    ``where`` names the work for the outage log (a request's path, a
    function's label).
    """
    allowed = dry_run or config.on_error == ALLOW
    unusable = misconfigured(error)
    if unusable is not None:
        _say_once(unusable)
    outage_log.unavailable(config.name, error, LET_THROUGH if allowed else REFUSED, where=where)
    return allowed


# The misconfigurations said at ERROR (by their text): once each, until a connection setting changes.
_said: set[str] = set()
_said_lock = threading.Lock()
_CONNECTION_SETTINGS = frozenset({"SEMAPHORE_CONNECTION", "SEMAPHORE_ASYNC_CONNECTION", "CACHES"})


def _say_once(unusable: ConnectionMisconfigured) -> None:
    """Log a connection setting no client can be made from at ERROR, once per process.

    The outage log records it as it records any outage (WARNING), but this
    one never ends by itself: until someone fixes the setting, every piece
    of guarded work follows its policy, so under "allow" nothing is limited.
    This is the line an operator's alerting sees.
    """
    text = str(unusable)
    with _said_lock:
        if text in _said:
            return
        _said.add(text)
    settings_logger.error(
        "%s Until it is fixed no guarded work reaches Redis: each semaphore follows its on_error policy, so "
        'under "allow" (the default) guarded work runs unguarded, and under "deny" it is refused. '
        "`manage.py check --deploy` reports it (E015).",
        text,
    )


def _forget_what_was_said(*, setting: str, **kwargs: object) -> None:
    if setting in _CONNECTION_SETTINGS:
        with _said_lock:
            _said.clear()


setting_changed.connect(_forget_what_was_said, dispatch_uid="django_semaphore.failure_policy")


def give_back(permit: Permit | None, *, posted: bool = False) -> BackendUnavailable | None:
    """Release; an outage is only counted, since the release is retried in the background (its lease ends it
    at the latest).

    Raising would replace what the guarded work returned or raised with an
    error about bookkeeping that already has a fallback. The outage is
    returned: a request spares its other calls a hung Redis (web/admission.py).
    ``posted``: without waiting for Redis's answer where the release can go so
    (``Permit.post_release``), for a release nobody waits on (a response sent).
    """
    if permit is None:
        return None
    try:
        if not (posted and permit.post_release()):
            permit.release()
    except BackendUnavailable as exc:
        outage_log.unavailable(permit.name, exc, RELEASE)
        return exc
    return None


async def agive_back(permit: Permit | None) -> BackendUnavailable | None:
    if permit is None:
        return None
    try:
        await permit.arelease()
    except BackendUnavailable as exc:
        outage_log.unavailable(permit.name, exc, RELEASE)
        return exc
    return None
