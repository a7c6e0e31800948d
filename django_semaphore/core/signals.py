"""Signals for metrics and alerting; every one is sent with ``sender`` = the
semaphore name and keyword arguments ``name``, ``partition`` and the ones
listed below.

- ``semaphore_acquired``: ``token``, ``fence``, ``weight``, ``waited`` (seconds)
- ``semaphore_rejected``: ``retry_after``, ``waited``, ``used``, ``limit``
- ``semaphore_released``: ``token``, ``held_for`` (seconds), ``was_held``
- ``semaphore_lost``: ``token`` (a renewal found the lease gone)
- ``semaphore_backend_error``: ``error`` (the redis-py exception; a
  ``BackendUnavailable`` when none is behind it: too few replicas confirmed)
- ``semaphore_request_outcome``: ``outcome`` (one of ``outcomes.ALL``),
  ``request``, ``mode``; sent by the decorator and the middleware once per
  request and semaphore, also when Redis is unreachable
- ``semaphore_limit_adapted``: ``old_limit``, ``new_limit``, ``reason`` (the
  adaptive rule moved the limit; sent by the one process whose release ended
  the window, so once per change site-wide)
- ``semaphore_keys_lost``: ``found`` ("holders", "state" or "all"),
  ``permits`` (how many the lost record counted); a script found the
  semaphore's keys gone while permits were held (evicted by a ``maxmemory``
  policy, deleted, lost in a failover): more than the limit may be inside.
  Sent once per loss, by the process whose call found it; logged at ERROR on
  ``django_semaphore.keys`` too (``core/vanished.py``)
"""

from __future__ import annotations

import logging
from typing import Any, Protocol

from django.dispatch import Signal

logger = logging.getLogger("django_semaphore.signals")

semaphore_acquired = Signal()
semaphore_rejected = Signal()
semaphore_released = Signal()
semaphore_lost = Signal()
semaphore_backend_error = Signal()
semaphore_request_outcome = Signal()
semaphore_limit_adapted = Signal()
semaphore_keys_lost = Signal()


def emit(signal: Signal, *, name: str, **kwargs: Any) -> None:
    """Send ``signal`` so that a failing receiver is logged, never raised.

    Receivers feed metrics; one that raises must not cost the caller a
    permit the server already granted (nor leave it held with nobody to
    release it). A signal nobody listens to is not sent at all (Django's
    own early return comes after a lock and a lookup), which the callers
    also use to skip gathering its arguments (``listened``).
    """
    if not signal.receivers:
        return
    for receiver, result in signal.send_robust(sender=name, name=name, **kwargs):
        if isinstance(result, Exception):
            logger.error("Receiver %r of %s failed", receiver, signal, exc_info=result)


class Source(Protocol):
    """What a send is about: a semaphore's name, and its partition (None for a whole semaphore).

    A ``Semaphore`` and a ``Permit`` each are one: ``emit_for`` reads the two
    keywords every send carries from them, so no send writes them out again.
    """

    name: str
    partition: str | None


def emit_for(signal: Signal, source: Source, **kwargs: Any) -> None:
    """``emit`` with ``source``'s ``name`` and ``partition``: the engine's sends about one semaphore."""
    if signal.receivers:
        emit(signal, name=source.name, partition=source.partition, **kwargs)


def listened(signal: Signal) -> bool:
    """Whether anyone might receive ``signal``: its arguments are worth gathering."""
    return bool(signal.receivers)
