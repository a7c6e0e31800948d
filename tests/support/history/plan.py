"""What a history run hammers, and the timings the workers, the nemesis and the checker agree on."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# Every permit's lease (s): long enough that a short stall never costs one, short enough that a stall
# longer than it does within a run.
LEASE = 4.0
# The engine's default SEMAPHORE_WAITER_TTL (s): a handed permit's claim, and a waiter's heartbeat span.
WAITER_TTL = 1.0
# The app's socket timeouts (s): a short stall already outlasts some calls (their callers give up on them).
SOCKET_TIMEOUT = 0.5
TIMEOUTS = f"socket_timeout={SOCKET_TIMEOUT}&socket_connect_timeout={SOCKET_TIMEOUT}"


@dataclass(frozen=True)
class Guarded:
    """One semaphore of the run."""

    name: str
    limit: int
    fair: bool

    def options(self) -> dict[str, Any]:
        # ``wait`` is what ``with semaphore:`` waits.
        return {"limit": self.limit, "lease": LEASE, "fair": self.fair, "wait": 0.5}

    @property
    def weights(self) -> tuple[int, ...]:
        return (1,) if self.limit == 1 else (1, 2)


# A fair mutex (hand-offs one by one), a fair weighted one, and one that is not fair.
SEMAPHORES = (Guarded("mutex", 1, True), Guarded("fair", 3, True), Guarded("free", 2, False))
LIMITS = {guarded.name: guarded.limit for guarded in SEMAPHORES}
FAIR = frozenset(guarded.name for guarded in SEMAPHORES if guarded.fair)


@dataclass(frozen=True)
class WorkerPlan:
    """What one worker process does (picklable: it crosses to a spawned process)."""

    probe_url: str
    run: str
    server_url: str
    prefix: str
    seed: int = 0
    fast_paths: bool = True
    # Seconds this process's wall clock is set off by (only the server's clock may matter).
    skew: float = 0.0
    threads: int = 2
    tasks: int = 2
    # Seconds a call that waited for the mutex holds it (0: the usual random hold): a handed permit still
    # held when the server resumes from a stall (the hand-off family).
    handed_hold: float = 0.0
    # Seconds every call for the mutex waits (0: the usual random wait): a line that is there when handed over.
    mutex_wait: float = 0.0
    # Chances, after a posted release, that the process SIGKILLs itself, or forks a child that takes turns.
    suicide_rate: float = 0.0
    fork_rate: float = 0.0
    # A folder holding another version of the package (an older one, installed there: old_version.py), put
    # first on the process's path: a rolling deploy's process of that version ('' for this tree's).
    package: str = ""
