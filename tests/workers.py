"""Code that runs in the OS processes the contention tests spawn."""

from __future__ import annotations

import os
import random
import time


def setup(prefix: str, skew: float = 0.0) -> None:
    """Configure Django in a fresh process; optionally skew its wall clock."""
    os.environ["SEMAPHORE_KEY_PREFIX"] = prefix
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")
    if skew:
        real_time = time.time
        time.time = lambda: real_time() + skew  # type: ignore[assignment]
    import django

    django.setup()


def hammer(prefix: str, limit: int, duration: float, skew: float, seed: int) -> None:
    """Acquire, count ourselves inside, hold briefly, leave; as fast as possible."""
    setup(prefix, skew)
    import redis
    from django.conf import settings

    from django_semaphore import Semaphore
    from django_semaphore.conf import SemaphoreConfig

    rng = random.Random(seed)
    sem = Semaphore(SemaphoreConfig.from_options("contended", {"limit": limit, "lease": 10}))
    counter = redis.Redis.from_url(settings.CACHES["default"]["LOCATION"])
    inside, entries, over = prefix + "inside", prefix + "entries", prefix + "over"
    end = time.monotonic() + duration
    while time.monotonic() < end:
        permit = sem.acquire(wait=rng.choice([0, 0, 0.2]), weight=1)
        if permit is None:
            continue
        if counter.incr(inside) > limit:
            counter.incr(over)
        counter.incr(entries)
        time.sleep(rng.uniform(0, 0.002))
        counter.decr(inside)
        permit.release()


def hold_forever(prefix: str, name: str, limit: int, lease: float, wait: float) -> None:
    """Acquire one permit (waiting if need be) and keep it until killed."""
    setup(prefix)
    from django_semaphore import Semaphore
    from django_semaphore.conf import SemaphoreConfig

    sem = Semaphore(SemaphoreConfig.from_options(name, {"limit": limit, "lease": lease}))
    permit = sem.acquire(wait=wait, label=f"worker {os.getpid()}")
    if permit is None:
        return
    while True:
        time.sleep(1)
