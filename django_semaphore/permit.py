"""A held permit: the proof of ownership that release and renew need."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from . import signals

if TYPE_CHECKING:
    from .semaphore import Semaphore


class Permit:
    """``weight`` permits of one semaphore, owned through ``token``.

    ``fence`` strictly increases with every grant of the semaphore: hand it
    to the resource you protect so it can refuse a holder whose lease ran out
    while it was paused (see README, "Fencing tokens").
    """

    def __init__(
        self,
        semaphore: Semaphore,
        token: str,
        fence: int,
        weight: int,
        lease: float,
        lease_deadline_ms: int,
        on_lost: Callable[[Permit], Any] | None = None,
    ) -> None:
        self.semaphore = semaphore
        self.token = token
        self.fence = fence
        self.weight = weight
        self.lease = lease
        self.lease_deadline_ms = lease_deadline_ms
        self.on_lost = on_lost
        self.acquired_at = time.monotonic()
        self.released = False
        self.lost = False
        # Set before the release script runs, so a renewal racing with it
        # (and finding the token gone) is not mistaken for a lost lease.
        self._releasing = False

    def __repr__(self) -> str:
        state = "released" if self.released else "lost" if self.lost else "held"
        return f"<Permit {self.semaphore.name} {self.token[:8]} fence={self.fence} {state}>"

    @property
    def held(self) -> bool:
        """True until released or found lost (the server may have reclaimed it since)."""
        return not (self.released or self.lost)

    def renew(self) -> bool:
        """Extend the lease by ``lease`` seconds; False (and marked lost) if it was gone."""
        if not self.held:
            return False
        return self._renewed(self.semaphore._renew(self.token, self.lease))

    async def arenew(self) -> bool:
        if not self.held:
            return False
        return self._renewed(await self.semaphore._arenew(self.token, self.lease))

    def release(self) -> bool:
        """Give the permit back; False if the lease had already been lost. Idempotent."""
        if self.released:
            return False
        self._releasing = True
        self._forget()
        return self._released(self.semaphore._release(self.token))

    async def arelease(self) -> bool:
        if self.released:
            return False
        self._releasing = True
        self._forget()
        return self._released(await self.semaphore._arelease(self.token))

    def __enter__(self) -> Permit:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    async def __aenter__(self) -> Permit:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.arelease()

    def _renewed(self, deadline_ms: int | None) -> bool:
        if deadline_ms is None:
            self.mark_lost()
            return False
        self.lease_deadline_ms = deadline_ms
        return True

    def _released(self, was_held: bool) -> bool:
        self.released = True
        signals.emit(
            signals.semaphore_released,
            name=self.semaphore.name,
            partition=self.semaphore.partition,
            token=self.token,
            held_for=time.monotonic() - self.acquired_at,
            was_held=was_held,
        )
        return was_held

    def _forget(self) -> None:
        from .renewal import renewer

        renewer.forget(self)

    def mark_lost(self) -> None:
        """Record that the lease is gone: stop renewing, tell the owner, fire the signal.

        ``on_lost`` runs on the renewal thread, which serves every permit of
        the process: keep it quick (set a flag, cancel a task).
        """
        if self.lost or self.released or self._releasing:
            return
        self.lost = True
        self._forget()
        signals.emit(
            signals.semaphore_lost,
            name=self.semaphore.name,
            partition=self.semaphore.partition,
            token=self.token,
        )
        if self.on_lost is not None:
            self.on_lost(self)
