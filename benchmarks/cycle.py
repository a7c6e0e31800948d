"""Cycle: one client's acquire+release cycles per second, next to the peers and two PINGs.

An acquire and a release are one round trip each, so two PINGs on the same
connection are the most a cycle could ever do. The peers do the same cycle
in the same run, in turns (so noise hits all alike): redis-py's ``Lock``
(non-blocking acquire, release), python-redis-lock, and the seed recipe "a
ZSET of timestamps" (its try and its release). ``auto_renew=False`` keeps the
background renewal out of the main figure (the permit is released long
before its first renewal anyway); the default, with it on, is shown too.

Everything runs twice: with redis-py's own (pure Python) reply parser and,
when it is installed, with hiredis (C), since the parser is a large share of
what a client pays per call. Beside the rates, this process's CPU per cycle
(``time.process_time``: the client library and everything above it, the
kernel's side of the socket included), ours over redis-py ``Lock``'s, taken in
turns the same way. Then the server's own time per operation (INFO
commandstats, microseconds of CPU per call) for an acquire, a release and, for
scale, redis-py's ``SET NX PX``; and per whole cycle, one at a time, ours and
the ``Lock``'s (its ``SET NX PX`` and its release script): 1e6 over it is how
many cycles one Redis core could serve.
"""

from __future__ import annotations

import statistics
import time
import uuid
from collections.abc import Callable
from typing import Any

import redis
from django.test import override_settings
from redis._parsers import _RESP2Parser
from redis.utils import HIREDIS_AVAILABLE

from .peers import TimestampZset
from .runtime import Bench, interleaved_rates, median_ratio


def _client(url: str, hiredis: bool) -> redis.Redis:
    options: dict[str, Any] = {} if hiredis else {"parser_class": _RESP2Parser}
    return redis.Redis(connection_pool=redis.ConnectionPool.from_url(url, **options))


def _cases(semaphore: Any, client: redis.Redis, prefix: str) -> dict[str, Callable[[], object]]:
    import redis_lock

    lock = client.lock(f"{prefix}redis-py-lock", timeout=10)
    python_lock = redis_lock.Lock(client, f"{prefix}python-redis-lock", expire=10)
    recipe = TimestampZset(client, f"{prefix}{{timestamp-zset}}", 1000)

    def two_pings() -> None:
        client.ping()
        client.ping()

    def ours() -> None:
        semaphore.acquire(wait=0, auto_renew=False).release()

    def ours_waiting_path() -> None:
        semaphore.acquire(wait=1, auto_renew=False).release()

    def ours_renewed() -> None:
        semaphore.acquire(wait=0).release()

    def redis_py_lock() -> None:
        lock.acquire(blocking=False)
        lock.release()

    def python_redis_lock() -> None:
        python_lock.acquire(blocking=False)
        python_lock.release()

    def timestamp_zset() -> None:
        recipe.leave(recipe.try_acquire())

    return {
        "two_pings": two_pings,
        "ours": ours,
        "ours_wait": ours_waiting_path,
        "ours_auto_renew": ours_renewed,
        "redis_py_lock": redis_py_lock,
        "python_redis_lock": python_redis_lock,
        "timestamp_zset": timestamp_zset,
    }


def _ratios(rates: dict[str, list[float]], tag: str) -> dict[str, float]:
    ratio = {
        f"cycle{tag}_ratio_vs_2ping": median_ratio(rates["ours"], rates["two_pings"]),
        f"cycle{tag}_ratio_vs_redis_py_lock": median_ratio(rates["ours"], rates["redis_py_lock"]),
        f"cycle{tag}_ratio_vs_python_redis_lock": median_ratio(rates["ours"], rates["python_redis_lock"]),
        f"cycle{tag}_ratio_vs_timestamp_zset": median_ratio(rates["ours"], rates["timestamp_zset"]),
        f"cycle{tag}_wait_ratio_vs_2ping": median_ratio(rates["ours_wait"], rates["two_pings"]),
        f"cycle{tag}_auto_renew_ratio_vs_2ping": median_ratio(rates["ours_auto_renew"], rates["two_pings"]),
    }
    for peer in ("redis_py_lock", "python_redis_lock", "timestamp_zset"):
        ratio[f"cycle{tag}_{peer}_ratio_vs_2ping"] = median_ratio(rates[peer], rates["two_pings"])
    ratio[f"cycle{tag}_per_s"] = statistics.median(rates["ours"])
    ratio[f"cycle{tag}_two_pings_per_s"] = statistics.median(rates["two_pings"])
    return ratio


def cpu_per_cycle(operation: Callable[[], object], count: int) -> float:
    """Microseconds of this process's CPU per call of ``operation``, over ``count`` calls."""
    started = time.process_time()
    for _ in range(count):
        operation()
    return (time.process_time() - started) / count * 1e6


def client_cpu(cases: dict[str, Callable[[], object]], tag: str, repeats: int, count: int = 500) -> dict[str, float]:
    """Our CPU per cycle over redis-py ``Lock``'s: the median of many short rounds taken in turns.

    A process's CPU time moves with its neighbours' (caches, the other
    hyperthread), so the rounds are short and many, each pair side by side.
    """
    ours: list[float] = []
    lock: list[float] = []
    for _ in range(max(repeats * 4, 12)):
        ours.append(cpu_per_cycle(cases["ours"], count))
        lock.append(cpu_per_cycle(cases["redis_py_lock"], count))
    return {
        f"cycle{tag}_client_cpu_ratio_vs_redis_py_lock": median_ratio(ours, lock),
        f"cycle{tag}_client_cpu_us": statistics.median(ours),
        f"cycle{tag}_redis_py_lock_client_cpu_us": statistics.median(lock),
    }


def _usec(client: redis.Redis, *commands: str) -> float:
    """Total microseconds the server spent in ``commands`` since the last CONFIG RESETSTAT."""
    stats = client.info("commandstats")
    return sum(stats.get(f"cmdstat_{command}", {}).get("usec", 0) for command in commands)


def server_cycles(bench: Bench, semaphore: Any, count: int = 500) -> dict[str, float]:
    """Server microseconds per whole cycle, one at a time (in situ): ours, and redis-py ``Lock``'s."""
    client = bench.client
    client.config_resetstat()
    for _ in range(count):
        semaphore.acquire(wait=0, auto_renew=False).release()
    ours = _usec(client, "fcall", "evalsha", "eval") / count
    lock = client.lock(f"{bench.prefix}server-lock", timeout=10)
    lock.acquire(blocking=False)  # its release script loaded before the count starts
    lock.release()
    client.config_resetstat()
    for _ in range(count):
        lock.acquire(blocking=False)
        lock.release()
    theirs = _usec(client, "set", "evalsha") / count
    return {
        "server_us_cycle": ours,
        "server_us_lock_cycle": theirs,
        "server_us_cycle_ratio_vs_lock": ours / theirs,
        "redis_core_cycles_per_s": 1e6 / ours,
        "redis_core_lock_cycles_per_s": 1e6 / theirs,
    }


def server_us(bench: Bench, semaphore: Any, count: int = 500) -> dict[str, float]:
    """Microseconds of server CPU per acquire, per release, and per ``SET NX PX``."""
    client = bench.client
    permits = []
    client.config_resetstat()
    for _ in range(count):
        permits.append(semaphore.acquire(wait=0, auto_renew=False))
    acquire = client.info("commandstats")["cmdstat_fcall"]["usec_per_call"]
    client.config_resetstat()
    for permit in permits:
        permit.release()
    release = client.info("commandstats")["cmdstat_fcall"]["usec_per_call"]
    client.config_resetstat()
    for _ in range(count):
        client.set(f"{bench.prefix}set-nx", uuid.uuid4().hex, nx=True, px=10_000)
        client.delete(f"{bench.prefix}set-nx")
    set_nx = client.info("commandstats")["cmdstat_set"]["usec_per_call"]
    return {"server_us_acquire": acquire, "server_us_release": release, "server_us_set_nx_px": set_nx}


def run(bench: Bench, seconds: float, repeats: int, calls: int = 500) -> dict[str, Any]:
    from django_semaphore import get_semaphore

    results: dict[str, Any] = {"cycle_hiredis_available": HIREDIS_AVAILABLE}
    for tag, hiredis in (("", False), ("_hiredis", True)):
        if hiredis and not HIREDIS_AVAILABLE:
            continue
        client = _client(bench.url, hiredis)
        with override_settings(SEMAPHORE_CONNECTION=lambda client=client: client):
            semaphore = get_semaphore("cycle")
            cases = _cases(semaphore, client, bench.prefix)
            rates = interleaved_rates(cases, seconds, repeats)
            results.update(_ratios(rates, tag))
            results.update(client_cpu(cases, tag, repeats, calls))
            if not hiredis:
                results.update(server_us(bench, semaphore, calls))
                results.update(server_cycles(bench, semaphore, calls))
        client.close()
    return results
