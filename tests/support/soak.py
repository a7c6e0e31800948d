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
    from django_semaphore.core.conf import SemaphoreConfig

    found = []
    for name, (options, partitions) in SEMAPHORES.items():
        config = SemaphoreConfig.from_options(name, options)
        found.extend(Semaphore(config, key) for key in partitions)
    return found


def stats_key(prefix: str) -> str:
    return f"soak-stats:{prefix}"


def referee_key(prefix: str, sem: Any) -> str:
    return f"soak-inside:{prefix}{sem.keys.base}"


# Processes of one site may run with different waiter TTLs (a rolling deploy): hand-offs between them.
WAITER_TTLS = (0.2, 1.0, 3.0)
# A few identities per process, each always asked for with one weight (one identity is one holder:
# processes sharing one would share its permit, which the referee could not tell apart).
IDENTITIES = 4


def run(prefix: str, duration: float, skew: float, seed: int) -> None:
    workers.setup(prefix, skew)
    import redis
    from django.conf import settings

    from django_semaphore import BackendUnavailable

    rng = random.Random(seed)
    settings.SEMAPHORE_WAITER_TTL = rng.choice(WAITER_TTLS)
    client = redis.Redis.from_url(settings.CACHES["default"]["LOCATION"])
    referee = client.register_script((Path(__file__).parent / "soak_check.lua").read_text())
    stats = stats_key(prefix)
    choices = semaphores()
    end = time.monotonic() + duration
    while time.monotonic() < end:
        if rng.random() < 0.03:
            _lose_data_or_cancel_first(rng, client)
            continue
        sem = rng.choice(choices)
        job = rng.randrange(IDENTITIES) if rng.random() < 0.2 else None
        identity = None if job is None else f"soak-{seed}-job-{job}"
        weight = 1
        if sem.name == "soak-weighted":
            weight = rng.randint(1, 3) if job is None else job % 3 + 1
        try:
            permit = sem.acquire(wait=rng.choice([0, 0.2, 1.0]), weight=weight, auto_renew=False, identity=identity)
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


def _lose_data_or_cancel_first(rng: random.Random, client: Any) -> None:
    """The paths that once left partition keys without expiry (not counted by the referee).

    A partition whose keys vanish under a holder (a restart without
    persistence), then renewed and released; or a clean-up that reaches a
    partition before (or without) its acquire.
    """
    from django_semaphore import Semaphore
    from django_semaphore.core import connection
    from django_semaphore.core.calls import AcquireOptions
    from django_semaphore.core.conf import SemaphoreConfig

    config = SemaphoreConfig.from_options("soak-keyed-spare", {"limit": 2, "lease": LEASE, "key": "user"})
    if rng.random() < 0.5:
        sem = Semaphore(config, "ghost")
        permit = sem.acquire(auto_renew=False)
        if permit is None:
            return
        client.delete(*sem.keys.common)
        permit.renew()
        permit.release()
    else:
        sem = Semaphore(config, f"never-{rng.randrange(1 << 30)}")
        connection.run(AcquireOptions(wait=1).request(sem.config, sem.calls).cancel_call(), sem.name, sem.partition)
