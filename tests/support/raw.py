"""Script calls by token, as a forger or an operator's script would make them (no Permit in hand)."""

from __future__ import annotations

from django_semaphore import Semaphore
from django_semaphore.core import connection
from django_semaphore.core.replies import RenewReply


def release_token(sem: Semaphore, token: object) -> bool:
    return bool(connection.run(sem.calls.release(token), sem.name, sem.partition))  # type: ignore[arg-type]


def renew_token(sem: Semaphore, token: object, lease: float) -> bool:
    reply = connection.run(sem.calls.renew(token, int(lease * 1000)), sem.name, sem.partition)  # type: ignore[arg-type]
    return RenewReply.parse(reply).held
