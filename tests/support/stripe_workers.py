"""Code that runs in the OS processes the striped semaphores' Cluster tests spawn.

Every process talks to the cluster as the test's way's user, and keeps its
counts in the session's standalone server (the referee's), apart from the
semaphore: entries and entries over the limit (``Referee``), calls and
refusals, limit changes by generation, and what the stripes' watcher found.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from .workers import Referee, setup


def _on_cluster(prefix: str, port: int, credentials: dict[str, str]) -> Any:
    """Django set up, the app pointed at the cluster; the referee's client."""
    setup(prefix)
    import redis
    import redis.cluster
    from django.conf import settings

    cluster = redis.cluster.RedisCluster(
        host="127.0.0.1", port=port, socket_timeout=2, socket_connect_timeout=1, **credentials
    )
    settings.SEMAPHORE_CONNECTION = lambda: cluster
    return redis.Redis.from_url(settings.CACHES["default"]["LOCATION"])


class HighestReferee(Referee):
    """A referee whose limit is the highest any change has recorded so far (``highest``, raised before the
    change is applied): the limit in force never exceeds it, whatever the changes' order."""

    COUNT = (
        "local inside = redis.call('INCRBY', KEYS[1], ARGV[1]) "
        "if inside > tonumber(redis.call('GET', KEYS[2]) or '0') then redis.call('INCR', KEYS[3]) end "
        "redis.call('INCR', KEYS[4])"
    )

    def __init__(self, client: Any, base: str) -> None:
        super().__init__(client, base, 0)
        self.highest = base + "highest"

    @contextmanager
    def entered(self, weight: int = 1) -> Iterator[None]:
        self.client.eval(self.COUNT, 4, self.inside, self.highest, self.over, self.entries, weight)
        try:
            yield
        finally:
            self.client.decrby(self.inside, weight)


def raise_highest(client: Any, base: str, limit: int) -> None:
    client.eval(
        "if tonumber(redis.call('GET', KEYS[1]) or '0') < tonumber(ARGV[1]) then "
        "redis.call('SET', KEYS[1], ARGV[1]) end",
        1,
        base + "highest",
        limit,
    )


def _semaphore(name: str, options: dict[str, Any]) -> Any:
    from django_semaphore import Semaphore
    from django_semaphore.core.conf import SemaphoreConfig

    return Semaphore(SemaphoreConfig.from_options(name, options))


def hammer(
    prefix: str,
    port: int,
    credentials: dict[str, str],
    name: str,
    options: dict[str, Any],
    bound: int | None,
    heaviest: int,
    threads: int,
    duration: float,
    seed: int,
) -> None:
    """Threads taking weighted permits (waiting or not), counted inside by the referee against ``bound``
    (None: against the highest limit the changes recorded, ``HighestReferee``)."""
    counter = _on_cluster(prefix, port, credentials)
    from django_semaphore import BackendUnavailable, WeightAboveLimit

    sem = _semaphore(name, options)
    referee = Referee(counter, prefix, bound) if bound is not None else HighestReferee(counter, prefix)

    def run(rng: random.Random) -> None:
        end = time.monotonic() + duration
        while time.monotonic() < end:
            weight = rng.randint(1, heaviest)
            try:
                permit = sem.acquire(wait=rng.choice([0, 0, 0.2]), weight=weight, auto_renew=False)
            except (BackendUnavailable, WeightAboveLimit) as error:
                counter.incr(prefix + "errors")
                counter.rpush(prefix + "error-list", repr(error))
                time.sleep(0.01)
                continue
            if permit is None:
                counter.incr(prefix + "refused")
                continue
            with referee.entered(weight):
                time.sleep(rng.uniform(0, 0.01))
            permit.release()

    _in_threads(run, seed, threads)


def _in_threads(run: Any, seed: int, threads: int) -> None:
    workers = [threading.Thread(target=run, args=(random.Random(seed * 1000 + n),)) for n in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()


def change_limits(
    prefix: str,
    port: int,
    credentials: dict[str, str],
    name: str,
    options: dict[str, Any],
    targets: list[int],
    duration: float,
    seed: int,
) -> None:
    """Set, add, pause, resume and clear at random, as the operators' commands do, logging each change.

    Each change is logged by the generation its record got (``gens``: "action value") and, once every
    stripe has it, in ``done`` (a sorted set of generations): the watcher checks the stripes against both.
    """
    counter = _on_cluster(prefix, port, credentials)
    from django_semaphore.core.stripe_layout import plan_key
    from django_semaphore.core.stripe_limits import Plan, Scripts, apply, plan_call, run_work

    sem = _semaphore(name, options)
    rng = random.Random(seed)

    def logged(operation: str, value: int) -> Any:
        in_force = 0
        if operation == "add":
            replies = yield Scripts([calls.status(0, False) for calls in sem.stripe_calls])
            in_force = sum(int(reply[1]) for reply in replies)
        (raw,) = yield Scripts([plan_call(plan_key(sem.config), operation, value, in_force)])
        plan = Plan.parse(raw)
        counter.hset(prefix + "gens", plan.generation, f"{plan.action} {plan.value}")
        raise_highest(counter, prefix, plan.value)
        yield from apply(sem.stripe_calls, plan)
        counter.zadd(prefix + "done", {str(plan.generation): plan.generation})

    end = time.monotonic() + duration
    while time.monotonic() < end:
        kind = rng.choice(["set", "set", "add", "pause", "clear"])
        if kind == "set":
            run_work(logged("set", rng.choice(targets)), name)
        elif kind == "add":
            run_work(logged("add", rng.randint(-3, 3)), name)
        elif kind == "pause":
            run_work(logged("set", 0), name)
        else:
            run_work(logged("clear", 0), name)
        counter.incr(prefix + "changes")
        time.sleep(rng.uniform(0, 0.02))


def watch_stripes(
    prefix: str, port: int, credentials: dict[str, str], name: str, options: dict[str, Any], duration: float, seed: int
) -> None:
    """Read every stripe's limit, one stripe after the other, over and over, and check what was read.

    Each stripe's state is read at once (one HMGET: its override and the generation it applied); then
    - its limit is the share of the limit its generation set (none when that one cleared the override);
    - its generation is at least the last one done before the read began: a change, once applied, is in
      force on every stripe until a later one replaces it.
    So the stripes' sum never exceeds the largest limit in force or being applied as the read ran (the
    shares of a larger limit are each at least the smaller's). Bad reads are counted in ``bad``.
    """
    counter = _on_cluster(prefix, port, credentials)
    from django_semaphore.core.connection import get_client
    from django_semaphore.core.stripe_options import share

    sem = _semaphore(name, options)
    client = get_client()
    stripes = len(sem.stripe_calls)
    end = time.monotonic() + duration
    reads = 0
    while time.monotonic() < end:
        done = counter.zrevrange(prefix + "done", 0, 0, withscores=True)
        finished = int(done[0][1]) if done else 0
        for s, calls in enumerate(sem.stripe_calls):
            override, applied = client.hmget(calls.keys.state, ["limit", "sgen"])
            generation = int(applied or 0)
            if generation < finished:
                counter.rpush(prefix + "bad", f"stripe {s} at generation {generation} after {finished} was done")
            if generation:
                action, value = (counter.hget(prefix + "gens", generation) or b"? 0").decode().split()
                expected = share(int(value), stripes, s) if action == "set" else None
                found = None if override is None else int(override)
                if found != expected:
                    wrong = f"stripe {s} has {found} for generation {generation} ({action} {value})"
                    counter.rpush(prefix + "bad", wrong)
        reads += 1
    counter.incrby(prefix + "reads", reads)


def steady_load(
    prefix: str,
    port: int,
    credentials: dict[str, str],
    name: str,
    options: dict[str, Any],
    callers: int,
    hold: tuple[float, float],
    duration: float,
    seed: int,
) -> None:
    """``callers`` threads, each in a loop: ask (not waiting), hold, give back, ask again; every call counted.

    With callers across all processes below the limit, the site always has a permit free: every refusal
    is one the stripes made. Counted in ``calls``, ``refused`` and ``second`` (calls that asked a second
    stripe, from the process's own lanes), and inside by the referee against the limit.
    """
    counter = _on_cluster(prefix, port, credentials)
    sem = _semaphore(name, options)
    referee = Referee(counter, prefix, int(options["limit"]))
    tally = {"calls": 0, "refused": 0}
    lock = threading.Lock()

    def run(rng: random.Random) -> None:
        end = time.monotonic() + duration
        calls = refused = 0
        while time.monotonic() < end:
            calls += 1
            permit = sem.acquire(wait=0, auto_renew=False)
            if permit is None:
                refused += 1
                time.sleep(hold[0])
                continue
            with referee.entered():
                time.sleep(rng.uniform(*hold))
            permit.release()
        with lock:
            tally["calls"] += calls
            tally["refused"] += refused

    _in_threads(run, seed, callers)
    counter.incrby(prefix + "calls", tally["calls"])
    counter.incrby(prefix + "refused", tally["refused"])
    counter.incrby(prefix + "second", sem.lanes.second)
