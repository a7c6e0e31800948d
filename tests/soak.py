"""The soak test's worker processes: random holds, renewals, weights and partitions.

Each worker counts itself inside the referee (``soak_check.lua``) after every
grant; the referee drops holders whose lease has ended, so a worker that was
SIGKILLed while holding stops counting exactly when its permit returns.
"""

from __future__ import annotations

import random
import time
from pathlib import Path
from typing import Any

from . import workers

LEASE = 2.0
# name -> (options, partitions): a plain one, a weighted one, a keyed one, a mutex.
SEMAPHORES: dict[str, tuple[dict[str, Any], list[str | None]]] = {
    "soak-plain": ({"limit": 3, "lease": LEASE}, [None]),
    "soak-weighted": ({"limit": 4, "lease": LEASE}, [None]),
    "soak-keyed": ({"limit": 2, "lease": LEASE, "key": "user"}, ["alice", "bob", "carol"]),
    "soak-mutex": ({"limit": 1, "lease": LEASE}, [None]),
}


def semaphores() -> list[Any]:
    """Every semaphore and partition the soak uses (call after Django is set up)."""
    from django_semaphore import Semaphore
    from django_semaphore.conf import SemaphoreConfig

    found = []
    for name, (options, partitions) in SEMAPHORES.items():
        config = SemaphoreConfig.from_options(name, options)
        found.extend(Semaphore(config, key) for key in partitions)
    return found


def stats_key(prefix: str) -> str:
    return f"soak-stats:{prefix}"


def referee_key(prefix: str, sem: Any) -> str:
    return f"soak-inside:{prefix}{sem.keys.base}"


def run(prefix: str, duration: float, skew: float, seed: int) -> None:
    workers.setup(prefix, skew)
    import redis
    from django.conf import settings

    from django_semaphore import BackendUnavailable

    rng = random.Random(seed)
    client = redis.Redis.from_url(settings.CACHES["default"]["LOCATION"])
    referee = client.register_script((Path(__file__).parent / "soak_check.lua").read_text())
    stats = stats_key(prefix)
    choices = semaphores()
    end = time.monotonic() + duration
    while time.monotonic() < end:
        sem = rng.choice(choices)
        weight = rng.randint(1, 3) if sem.name == "soak-weighted" else 1
        try:
            permit = sem.acquire(wait=rng.choice([0, 0.2, 1.0]), weight=weight, auto_renew=False)
        except BackendUnavailable:
            client.hincrby(stats, "unavailable")
            continue
        if permit is None:
            client.hincrby(stats, "rejected")
            continue
        inside_key = referee_key(prefix, sem)
        inside = referee(keys=[inside_key], args=[permit.token, weight, permit.lease_deadline_ms])
        client.hincrby(stats, "entries")
        if inside > sem.config.limit:
            client.hincrby(stats, "violations")
        time.sleep(rng.uniform(0, 0.15))
        if rng.random() < 0.3:
            if permit.renew():
                client.hset(inside_key, permit.token, f"{weight}|{permit.lease_deadline_ms}")
                client.hincrby(stats, "renewals")
            time.sleep(rng.uniform(0, 0.15))
        client.hdel(inside_key, permit.token)
        if not permit.release():
            client.hincrby(stats, "lost")
