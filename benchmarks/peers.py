"""The peers the contended benchmark runs against, behind one small interface.

The three recipes are the classic hand-rolled Redis semaphores described in
shared/PRODUCT.md section 2, written here from that description for the
benchmark only (they are deliberately the recipes, warts included; do not use
them). The limit-1 peers are the real libraries: redis-py's ``Lock`` and
python-redis-lock.

Every contender has ``enter(deadline)`` (block until inside, or None once the
monotonic ``deadline`` passes) and ``leave(handle)``. Recipes that can only
try retry after ``RETRY_SLEEP``, the short pause such loops use in practice.
"""

from __future__ import annotations

import math
import time
import uuid
from typing import Any, Protocol

import redis

RETRY_SLEEP = 0.001
# Seconds after which a recipe's holder counts as crashed (their lease).
RECIPE_TIMEOUT = 10.0


class Contender(Protocol):
    def enter(self, deadline: float) -> Any: ...

    def leave(self, handle: Any) -> None: ...


class TryRecipe:
    """A recipe that can only try once; ``enter`` retries until the deadline."""

    def try_acquire(self) -> str | None:
        raise NotImplementedError

    def enter(self, deadline: float) -> str | None:
        while time.monotonic() < deadline:
            token = self.try_acquire()
            if token is not None:
                return token
            time.sleep(RETRY_SLEEP)
        return None


class TimestampZset(TryRecipe):
    """Holders in one ZSET scored by the client's clock; inside if ranked below the limit.

    One round trip (+1 to back out on failure). Unsafe: a caller whose
    timestamp is older than a current holder's (it read the clock earlier, or
    its clock is behind) ranks ahead of that holder, so both count as inside.
    """

    def __init__(self, client: redis.Redis, key: str, limit: int) -> None:
        self.client, self.key, self.limit = client, key, limit

    def try_acquire(self) -> str | None:
        token = uuid.uuid4().hex
        now = time.time()
        pipe = self.client.pipeline(transaction=True)
        pipe.zremrangebyscore(self.key, "-inf", now - RECIPE_TIMEOUT)
        pipe.zadd(self.key, {token: now})
        pipe.zrank(self.key, token)
        if pipe.execute()[-1] < self.limit:
            return token
        self.client.zrem(self.key, token)
        return None

    def leave(self, handle: str) -> None:
        self.client.zrem(self.key, handle)


class FairZset(TryRecipe):
    """The "fair" variant: a counter orders callers, an owner ZSET ranks them by it.

    Two round trips (+1 on failure): purge and draw a number, then join and
    read the rank. Unsafe: between the two, a caller with a lower number can
    join behind holders that entered meanwhile and rank ahead of them.
    """

    def __init__(self, client: redis.Redis, key: str, limit: int) -> None:
        self.client, self.limit = client, limit
        self.timeouts, self.owners, self.counter = key + ":timeouts", key + ":owners", key + ":counter"

    def try_acquire(self) -> str | None:
        token = uuid.uuid4().hex
        now = time.time()
        pipe = self.client.pipeline(transaction=True)
        pipe.zremrangebyscore(self.timeouts, "-inf", now - RECIPE_TIMEOUT)
        pipe.zinterstore(self.owners, {self.owners: 1, self.timeouts: 0})
        pipe.incr(self.counter)
        number = pipe.execute()[-1]
        pipe.zadd(self.timeouts, {token: now})
        pipe.zadd(self.owners, {token: number})
        pipe.zrank(self.owners, token)
        if pipe.execute()[-1] < self.limit:
            return token
        self.leave(token)
        return None

    def leave(self, handle: str) -> None:
        pipe = self.client.pipeline(transaction=True)
        pipe.zrem(self.timeouts, handle)
        pipe.zrem(self.owners, handle)
        pipe.execute()


class LockedFairZset(FairZset):
    """The fair variant run inside a SETNX lock: safe, at six or more round trips."""

    def __init__(self, client: redis.Redis, key: str, limit: int) -> None:
        super().__init__(client, key, limit)
        self.lock = key + ":lock"

    def try_acquire(self) -> str | None:
        owner = uuid.uuid4().hex
        while not self.client.set(self.lock, owner, nx=True, px=1000):
            time.sleep(RETRY_SLEEP)
        try:
            return super().try_acquire()
        finally:
            self._unlock(owner)

    def _unlock(self, owner: str) -> None:
        # The recipe's check-then-delete, made safe with WATCH.
        with self.client.pipeline(transaction=True) as pipe:
            try:
                pipe.watch(self.lock)
                if pipe.get(self.lock) == owner.encode():
                    pipe.multi()
                    pipe.delete(self.lock)
                    pipe.execute()
            except redis.WatchError:
                pass


class RedisPyLock:
    """redis-py's ``Lock`` (limit 1), polling every ``RETRY_SLEEP`` instead of its default 0.1 s."""

    def __init__(self, client: redis.Redis, key: str) -> None:
        self.lock = client.lock(key, timeout=RECIPE_TIMEOUT, sleep=RETRY_SLEEP)

    def enter(self, deadline: float) -> bool | None:
        remaining = deadline - time.monotonic()
        if remaining <= 0 or not self.lock.acquire(blocking_timeout=remaining):
            return None
        return True

    def leave(self, handle: bool) -> None:
        self.lock.release()


class PythonRedisLock:
    """python-redis-lock's ``Lock`` (limit 1): waits on a BLPOP signal list."""

    def __init__(self, client: redis.Redis, key: str) -> None:
        import redis_lock

        self.lock = redis_lock.Lock(client, key, expire=int(RECIPE_TIMEOUT))

    def enter(self, deadline: float) -> bool | None:
        remaining = deadline - time.monotonic()
        # Its timeout is whole seconds (at least 1): it may wait past the deadline, never less.
        if remaining <= 0 or not self.lock.acquire(blocking=True, timeout=max(1, math.ceil(remaining))):
            return None
        return True

    def leave(self, handle: bool) -> None:
        self.lock.release()


class Ours:
    """django-semaphore, waiting in its line (first come, first served, or not with ``fair: False``)."""

    def __init__(self, name: str) -> None:
        from django_semaphore import BackendUnavailable, get_semaphore

        self.semaphore = get_semaphore(name)
        self.unavailable = BackendUnavailable  # imported once, not in every timed entry

    def enter(self, deadline: float) -> Any:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return None
        try:
            return self.semaphore.acquire(wait=remaining)
        except self.unavailable:
            # The wait bounds the whole call, leaving the line included: a phase's last milliseconds on a loaded
            # machine may not fit it. Such a call holds nothing (a permit handed meanwhile lapses on its claim).
            return None

    def leave(self, handle: Any) -> None:
        handle.release()


# name -> (limit, round trips per acquire, description)
KINDS: dict[str, tuple[int, str]] = {
    "ours": (3, "1"),
    "ours-unfair": (3, "1"),
    "timestamp-zset": (3, "1 (+1 on failure)"),
    "fair-zset": (3, "2 (+1 on failure)"),
    "locked-fair-zset": (3, "6+"),
    "ours-limit-1": (1, "1"),
    "ours-limit-1-unfair": (1, "1"),
    "redis-py-lock": (1, "1 (+1 per 1 ms poll)"),
    "python-redis-lock": (1, "1-2 (+BLPOP)"),
}


# The recipes that cannot let anyone over the limit, whatever the timing: only the one whose
# bookkeeping runs under a lock. The other two read and then write in separate steps; a run that
# happens to catch no violation does not make them safe (PRODUCT.md measured 1.4-2.8% over).
SAFE_BY_DESIGN = ("locked-fair-zset",)


def contender(kind: str, client: redis.Redis, key: str) -> Contender:
    limit = KINDS[kind][0]
    if kind == "ours":
        return Ours("contended")
    if kind == "ours-limit-1":
        return Ours("mutex")
    if kind == "ours-unfair":
        return Ours("contended-unfair")
    if kind == "ours-limit-1-unfair":
        return Ours("mutex-unfair")
    if kind == "timestamp-zset":
        return TimestampZset(client, key, limit)
    if kind == "fair-zset":
        return FairZset(client, key, limit)
    if kind == "locked-fair-zset":
        return LockedFairZset(client, key, limit)
    if kind == "redis-py-lock":
        return RedisPyLock(client, key)
    if kind == "python-redis-lock":
        return PythonRedisLock(client, key)
    raise ValueError(f"unknown contender {kind!r}")
