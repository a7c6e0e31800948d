"""Code that runs in the OS processes the contention tests spawn."""

from __future__ import annotations

import os
import random
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import redis


def setup(prefix: str, skew: float = 0.0) -> None:
    """Configure Django in a fresh process; optionally skew its wall clock."""
    os.environ["SEMAPHORE_KEY_PREFIX"] = prefix
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")
    if skew:
        real_time = time.time
        time.time = lambda: real_time() + skew  # type: ignore[assignment]
    import django

    django.setup()


# ``hammer``'s processes go on past their time until they have made this many entries among them, for at most
# LATE seconds more: a loaded machine (a load of 10 on two CPUs) let eight processes make 35 in three seconds,
# where the tests need more than 100 to say anything of the contention.
ENOUGH_ENTRIES, LATE = 150, 30.0


class Referee:
    """The contention tests' own count of who is inside, kept in Redis apart from the semaphore.

    Each entry adds its weight to ``<base>inside`` while it is in; an entry that finds more than
    ``limit`` there is counted in ``<base>over``, the number every contention test asserts is 0.
    """

    def __init__(self, client: redis.Redis, base: str, limit: int) -> None:
        self.client, self.limit = client, limit
        self.inside, self.over, self.entries = base + "inside", base + "over", base + "entries"
        self.unavailable_calls = base + "unavailable"

    def entered_so_far(self) -> int:
        """Every process's entries so far."""
        return int(self.client.get(self.entries) or 0)

    def unavailable(self) -> None:
        """A call that ended with ``BackendUnavailable`` (its wait ran out on a loaded machine), holding nothing."""
        self.client.incr(self.unavailable_calls)

    @contextmanager
    def entered(self, weight: int = 1) -> Iterator[None]:
        if self.client.incrby(self.inside, weight) > self.limit:
            self.client.incr(self.over)
        self.client.incr(self.entries)
        try:
            yield
        finally:
            self.client.decrby(self.inside, weight)


def hammer(prefix: str, limit: int, duration: float, skew: float, seed: int, fair: bool = True) -> None:
    """Acquire, count ourselves inside, hold briefly, leave; as fast as possible."""
    setup(prefix, skew)
    import redis
    from django.conf import settings

    from django_semaphore import BackendUnavailable, Semaphore
    from django_semaphore.core.conf import SemaphoreConfig

    rng = random.Random(seed)
    sem = Semaphore(SemaphoreConfig.from_options("contended", {"limit": limit, "lease": 10, "fair": fair}))
    referee = Referee(redis.Redis.from_url(settings.CACHES["default"]["LOCATION"]), prefix, limit)
    end = time.monotonic() + duration
    while time.monotonic() < end or (referee.entered_so_far() < ENOUGH_ENTRIES and time.monotonic() < end + LATE):
        try:
            permit = sem.acquire(wait=rng.choice([0, 0, 0.2]), weight=1)
        except BackendUnavailable:
            # The wait bounds the whole call, a new connection's handshake included, and a loaded machine may
            # take longer than 0.2 s over it: the call ends holding nothing (what the server ran late is given
            # back), and the referee counts it.
            referee.unavailable()
            continue
        if permit is None:
            continue
        with referee.entered():
            time.sleep(rng.uniform(0, 0.002))
        permit.release()


def churn_partitions(prefix: str, keys: int, cap: int, duration: float, seed: int) -> None:
    """Take permits of random keys of a keyed semaphore at limit 1 whose cap is below the keys in use.

    Each key's holders are counted by the referee under a key of its own, so
    an eviction that deleted a partition in use would show as two inside.
    """
    setup(prefix)
    import redis
    from django.conf import settings

    from django_semaphore import Semaphore
    from django_semaphore.core.conf import SemaphoreConfig

    rng = random.Random(seed)
    config = SemaphoreConfig.from_options(
        "churned", {"limit": 1, "lease": 10, "key": "header:X-Key", "max_partitions": cap}
    )
    client = redis.Redis.from_url(settings.CACHES["default"]["LOCATION"])
    referees = {n: Referee(client, prefix, 1) for n in range(keys)}
    for n, referee in referees.items():
        referee.inside = f"{prefix}inside:{n}"
    end = time.monotonic() + duration
    while time.monotonic() < end:
        n = rng.randrange(keys)
        permit = Semaphore(config, f"key-{n}").acquire(wait=0, auto_renew=False)
        if permit is None:
            continue
        with referees[n].entered():
            time.sleep(rng.uniform(0, 0.003))
        permit.release()


def hold_forever(prefix: str, name: str, limit: int, lease: float, wait: float) -> None:
    """Acquire one permit (waiting if need be) and keep it until killed."""
    setup(prefix)
    from django_semaphore import Semaphore
    from django_semaphore.core.conf import SemaphoreConfig

    sem = Semaphore(SemaphoreConfig.from_options(name, {"limit": limit, "lease": lease}))
    permit = sem.acquire(wait=wait, label=f"worker {os.getpid()}")
    if permit is None:
        return
    while True:
        time.sleep(1)


def take_turns(
    prefix: str, name: str, waiter_ttl: float, lease: float, auto_renew: bool, duration: float, seed: int
) -> None:
    """Wait for a mutex, hold it for a while, give it back; counted inside by an independent referee.

    ``waiter_ttl`` is this process's own ``SEMAPHORE_WAITER_TTL``: processes of
    one site running with different ones is what a rolling deploy looks like.
    """
    setup(prefix)
    import redis
    from django.conf import settings

    settings.SEMAPHORE_WAITER_TTL = waiter_ttl
    from django_semaphore import BackendUnavailable, Semaphore
    from django_semaphore.core.conf import SemaphoreConfig

    rng = random.Random(seed)
    sem = Semaphore(SemaphoreConfig.from_options(name, {"limit": 1, "lease": lease}))
    referee = Referee(redis.Redis.from_url(settings.CACHES["default"]["LOCATION"]), prefix, 1)
    end = time.monotonic() + duration
    while time.monotonic() < end:
        try:
            permit = sem.acquire(wait=2, auto_renew=auto_renew)
        except BackendUnavailable:  # as in hammer()
            referee.unavailable()
            continue
        if permit is None:
            continue
        with referee.entered():
            time.sleep(rng.uniform(0.2, 0.3))
        permit.release()


def wait_then_enter(
    prefix: str, name: str, lease: float, auto_renew: bool, waiter_ttl: float | None = None, hold: float = 0.3
) -> None:
    """Wait (for long) for a mutex, then count itself inside with the referee and stay ``hold`` seconds."""
    setup(prefix)
    import redis
    from django.conf import settings

    if waiter_ttl is not None:
        settings.SEMAPHORE_WAITER_TTL = waiter_ttl

    from django_semaphore import Semaphore
    from django_semaphore.core.conf import SemaphoreConfig

    sem = Semaphore(SemaphoreConfig.from_options(name, {"limit": 1, "lease": lease}))
    referee = Referee(redis.Redis.from_url(settings.CACHES["default"]["LOCATION"]), prefix, 1)
    permit = sem.acquire(wait=30, auto_renew=auto_renew)
    if permit is None:
        return
    with referee.entered():
        time.sleep(hold)
    permit.release()


def contend_on_cluster(
    prefix: str, port: int, name: str, limit: int, duration: float, seed: int, credentials: dict[str, str]
) -> None:
    """Weighted acquire / hold / release on a Redis Cluster, counted inside by the referee (a standalone server)."""
    setup(prefix)
    import redis
    import redis.cluster
    from django.conf import settings

    cluster = redis.cluster.RedisCluster(
        host="127.0.0.1", port=port, socket_timeout=10, socket_connect_timeout=5, **credentials
    )
    settings.SEMAPHORE_CONNECTION = lambda: cluster
    from django_semaphore import BackendUnavailable, Semaphore
    from django_semaphore.core.conf import SemaphoreConfig

    rng = random.Random(seed)
    sem = Semaphore(SemaphoreConfig.from_options(name, {"limit": limit, "lease": 2}))
    counter = redis.Redis.from_url(settings.CACHES["default"]["LOCATION"])
    referee, errors = Referee(counter, prefix, limit), prefix + "unavailable"
    end = time.monotonic() + duration
    while time.monotonic() < end:
        weight = rng.randint(1, limit)
        try:
            permit = sem.acquire(wait=rng.choice([0, 0.3, 1.0]), weight=weight, auto_renew=False)
        except BackendUnavailable:
            counter.incr(errors)
            time.sleep(0.01)
            continue
        if permit is None:
            continue
        with referee.entered(weight):
            time.sleep(rng.uniform(0, 0.02))
        try:
            permit.release()
        except BackendUnavailable:
            counter.incr(errors)


def call_guarded(prefix: str, limit: int, duration: float, seed: int) -> None:
    """Call a function under ``@limit`` as fast as possible, counted inside by the referee."""
    setup(prefix)
    import redis
    from django.conf import settings

    settings.SEMAPHORES = {**settings.SEMAPHORES, "partner": {"limit": limit, "lease": 10}}
    from django_semaphore import SemaphoreFull
    from django_semaphore import limit as guarded_by

    rng = random.Random(seed)
    counter = redis.Redis.from_url(settings.CACHES["default"]["LOCATION"])
    referee = Referee(counter, prefix, limit)

    @guarded_by("partner", wait=0)
    def call_partner() -> None:
        with referee.entered():
            time.sleep(rng.uniform(0, 0.01))

    end = time.monotonic() + duration
    while time.monotonic() < end:
        try:
            call_partner()
        except SemaphoreFull:
            counter.incr(prefix + "full")


def scrape_with_fresh_keys(prefix: str, url: str, places: int, rounds: int, seed: int) -> None:
    """Take permits under keys nobody used before, read the metrics as a scrape does, release; over and over.

    Every key a reading named under its own is added to ``<prefix>named``,
    so the test sees the union of all the processes' readings.
    """
    setup(prefix)
    import redis
    from django.conf import settings

    from django_semaphore import get_semaphore
    from django_semaphore.metrics.reading import read

    settings.SEMAPHORE_CONNECTION = url
    settings.SEMAPHORE_METRICS_PARTITIONS = True
    settings.SEMAPHORE_METRICS_MAX_PARTITIONS = places
    client = redis.Redis.from_url(url)
    for round_ in range(rounds):
        held = [
            get_semaphore("search", f"fresh-{seed}-{round_}-{n}").acquire(wait=0, auto_renew=False) for n in range(4)
        ]
        for reading in read():
            if reading.keyed is not None and reading.keyed.parts:
                client.sadd(prefix + "named", *(part.key for part in reading.keyed.parts))
        for permit in held:
            if permit is not None:
                permit.release()
