"""A backend that slows down past a knee, for adaptive limits (benchmark and tests).

Each request acquires a permit, counts itself in Redis (``inflight``), then
works ``base * (1 + slope * max(0, inflight - knee) / knee)`` seconds: flat up
to the knee, then slower with every request beyond it, like a database past its
cores. Several OS processes of several threads each run it, so many
processes share the semaphore as a site's workers would.
"""

from __future__ import annotations

import os
import random
import statistics
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import redis

# Seconds the worker processes are given to start before the load begins, all together.
STARTUP = 3.0


@dataclass(frozen=True)
class Knee:
    """The backend's shape: ``knee`` requests at ``base`` seconds each, slower beyond.

    ``slope`` is how much slower: 1 doubles the work at twice the knee.
    """

    knee: int = 8
    base: float = 0.05
    slope: float = 1.0

    def work(self, inflight: int) -> float:
        return self.base * (1 + self.slope * max(0, inflight - self.knee) / self.knee)


def now() -> float:
    """CLOCK_MONOTONIC: one clock for the whole host on Linux, so processes' readings compare."""
    return time.clock_gettime(time.CLOCK_MONOTONIC)


def _client(
    name: str, options: dict[str, Any], knee: Knee, end: float, seed: int, results: list[Any], over: list[int]
) -> None:
    """One client: asks without waiting (so every grant's reply is the granting script's own, and
    ``used <= limit`` in it checks that no grant went over the limit in force), and asks again after
    a short random pause when turned away, as a polling client or a retrying proxy would."""
    from django_semaphore import Semaphore
    from django_semaphore.core.conf import SemaphoreConfig
    from django_semaphore.core.connection import get_client

    sem = Semaphore(SemaphoreConfig.from_options(name, options))
    counter: redis.Redis = get_client()
    inflight_key = sem.keys.state + ":inflight"
    rng = random.Random(seed)
    while now() < end:
        attempt = sem.attempt(wait=0)
        if attempt.permit is None:
            results.append((now(), None))
            time.sleep(rng.uniform(0.5, 1.5) * knee.base / 2)
            continue
        if attempt.used > attempt.limit:
            over[0] += 1
        started = now()
        inflight = int(counter.incr(inflight_key))
        time.sleep(knee.work(inflight))
        counter.decr(inflight_key)
        attempt.permit.release()
        results.append((now(), now() - started))


def worker(
    settings_module: str,
    prefix: str,
    name: str,
    options: dict[str, Any],
    knee: Knee,
    begin: float,
    end: float,
    threads: int,
    queue: Any,
) -> None:
    """One OS process: ``threads`` clients from ``begin`` to ``end`` (monotonic); puts its records on ``queue``.

    A record is (finished_at, seconds of work) for a request served, (at, None) for one turned away.
    """
    os.environ["DJANGO_SETTINGS_MODULE"] = settings_module
    os.environ["SEMAPHORE_KEY_PREFIX"] = prefix
    import django

    django.setup()
    from django_semaphore.signals import semaphore_limit_adapted

    changes: list[tuple[float, int, int]] = []

    def adapted(sender: str, old_limit: int, new_limit: int, **kwargs: Any) -> None:
        changes.append((now(), old_limit, new_limit))

    semaphore_limit_adapted.connect(adapted, weak=False)
    time.sleep(max(begin - now(), 0))  # every process starts its load together
    results: list[Any] = []
    over = [0]
    clients = [
        threading.Thread(target=_client, args=(name, options, knee, end, os.getpid() * 100 + i, results, over))
        for i in range(threads)
    ]
    for client in clients:
        client.start()
    for client in clients:
        client.join()
    queue.put((results, over[0], changes))


@dataclass
class Run:
    """What one run of the knee backend produced: the limit over time and every request."""

    limits: list[tuple[float, int]]
    records: list[tuple[float, float | None]]
    over: int
    started: float
    seconds: float
    # Every semaphore_limit_adapted the worker processes received: (at, old, new), in time order.
    changes: list[tuple[float, int, int]] = field(default_factory=list)

    def settled_limit(self, last: float = 0.5) -> float:
        """The median limit in force over the last ``last`` of the run."""
        cut = self.started + self.seconds * (1 - last)
        return statistics.median(limit for at, limit in self.limits if at >= cut)

    def goodput(self, acceptable: float, last: float = 0.5) -> float:
        """Requests per second served with work <= ``acceptable`` seconds, over the last ``last`` of the run."""
        cut = self.started + self.seconds * (1 - last)
        good = sum(1 for at, work in self.records if at >= cut and work is not None and work <= acceptable)
        return good / (self.seconds * last)


def run(
    settings_module: str,
    prefix: str,
    options: dict[str, Any],
    knee: Knee,
    seconds: float,
    processes: int = 4,
    threads: int = 6,
    name: str = "knee",
) -> Run:
    """Run the backend for ``seconds`` with ``processes`` x ``threads`` clients, sampling the limit in force."""
    import multiprocessing

    from django_semaphore import Semaphore
    from django_semaphore.core.conf import SemaphoreConfig

    sem = Semaphore(SemaphoreConfig.from_options(name, options))
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    started = now() + STARTUP  # spawning and Django's set-up take a moment
    end = started + seconds
    workers = [
        context.Process(
            target=worker,
            args=(settings_module, prefix, name, options, knee, started, end, threads, queue),
            daemon=True,
        )
        for _ in range(processes)
    ]
    for process in workers:
        process.start()
    time.sleep(max(started - now(), 0))
    limits = []
    while now() < end:
        limits.append((now(), sem.status(0).limit))
        time.sleep(0.1)
    # And the limit in force at the end, so the last part of the run has a reading however late a loaded
    # machine let this loop run (it once had none, and no median).
    limits.append((now(), sem.status(0).limit))
    records: list[tuple[float, float | None]] = []
    over = 0
    changes: list[tuple[float, int, int]] = []
    for _ in workers:
        got, over_here, changed = queue.get(timeout=60)
        records += got
        over += over_here
        changes += changed
    for process in workers:
        process.join(timeout=10)
    return Run(limits, records, over, started, seconds, sorted(changes))
