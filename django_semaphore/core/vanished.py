"""Keys a semaphore lost under held permits: said in a signal and a log record, once.

Redis may drop a semaphore's keys while permits are held: a ``maxmemory``
policy evicting them (a server shared with a cache), a ``DEL`` by hand, a
restart or failover that lost them. The scripts see some of it (common.lua's
``context``): the state counting permits whose holders are gone, or holders
left without the state every grant writes. The script that sees it heals the
count and goes on with what is left, since nobody can know who held what
vanished, and tells its caller, which reports it here. A holder whose every
key vanished learns it from its renewal or release: "all" (the semaphore has
no keys at all) while its own lease had not ended, by its own clock.

What was found, in the scripts' replies: ``"holders|N"`` (N permits the state
counted), ``"state|N"`` (N permits held by the holders left), ``"all|0"``.
"""

from __future__ import annotations

import logging
from typing import Any

from . import signals

logger = logging.getLogger("django_semaphore.keys")

_WHAT = {
    "holders": "its holders vanished from Redis while its state counted {permits} permits held",
    "state": "its state (counters, fence, limit override) vanished from Redis while holders of {permits} permits "
    "remained",
    "all": "every key of it vanished from Redis while this process held {permits} permits of it",
}


def found_in(value: Any) -> tuple[str, int] | None:
    """What a script's reply says vanished, and how many permits that concerns; None when nothing did."""
    if not value:
        return None
    text = value.decode() if isinstance(value, bytes) else str(value)
    what, _, permits = text.partition("|")
    if what not in _WHAT:
        return None
    return what, int(permits) if permits.isdigit() else 0


def report(name: str, partition: str | None, what: str, permits: int) -> None:
    """Log the loss (ERROR: more than the limit may be inside) and send ``semaphore_keys_lost``."""
    where = f"Semaphore {name!r}" + (f" (partition {partition})" if partition else "")
    logger.error(
        "%s: %s. Whoever held them may still be working, so more than the limit may be inside until they "
        "finish. Redis evicts keys under an allkeys-* or volatile-* maxmemory-policy once maxmemory is reached "
        "(check --deploy says which: django_semaphore.E019, W006): give the semaphores a Redis server of their "
        "own with maxmemory-policy noeviction.",
        where,
        _WHAT[what].format(permits=permits),
    )
    signals.emit(signals.semaphore_keys_lost, name=name, partition=partition, found=what, permits=permits)


def report_reply(name: str, partition: str | None, value: Any) -> None:
    """``report`` what a script's reply says vanished, if anything ("all" needs the holder's judgement)."""
    found = found_in(value)
    if found is not None and found[0] != "all":
        report(name, partition, *found)


def report_status(name: str, partition: str | None, reply: list[Any]) -> None:
    """``report_reply`` for a status script's reply (what vanished is its eighth element)."""
    if len(reply) > 7:
        report_reply(name, partition, reply[7])
