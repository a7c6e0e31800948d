"""What every benchmark needs: a server of its own, Django, a clock, medians."""

from __future__ import annotations

import os
import platform
import statistics
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import redis

from django_semaphore.testing import RedisServer


def setup_django() -> None:
    """Configure Django from ``benchmarks.settings`` (in the harness and in every worker)."""
    os.environ["DJANGO_SETTINGS_MODULE"] = "benchmarks.settings"
    import django

    django.setup()


@dataclass(frozen=True)
class Bench:
    """The server one benchmark talks to, and a client of the harness's own."""

    url: str
    prefix: str
    client: redis.Redis
    server_version: str


@contextmanager
def fresh_redis() -> Iterator[Bench]:
    """A server started for this benchmark alone (or ``REDIS_URL``), with a fresh key prefix.

    The URL and prefix go into the settings and the environment, so processes
    the benchmark spawns find the same server. On a server of yours
    (``REDIS_URL``) the benchmark's keys are deleted afterwards, nothing else.
    """
    from django.test import override_settings

    server = RedisServer().start()
    prefix = f"bench-{uuid.uuid4().hex[:8]}:"
    saved = {name: os.environ.get(name) for name in ("BENCH_REDIS_URL", "SEMAPHORE_KEY_PREFIX")}
    # Through override_settings, whose signal tells the app's caches (its clients, its semaphores).
    pointed = override_settings(SEMAPHORE_CONNECTION=server.url, SEMAPHORE_KEY_PREFIX=prefix)
    pointed.enable()
    os.environ["BENCH_REDIS_URL"] = server.url
    os.environ["SEMAPHORE_KEY_PREFIX"] = prefix
    client = redis.Redis.from_url(server.url)
    try:
        yield Bench(server.url, prefix, client, server.version)
    finally:
        if server.external_url:
            for key in client.scan_iter(match=prefix + "*", count=1000):
                client.delete(key)
        client.close()
        server.close()
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        pointed.disable()


def http_scope(path: str, host: str = "testserver") -> dict[str, Any]:
    """What an ASGI server hands Django's ``ASGIHandler`` for a plain GET to ``path``: for code (a benchmark, the
    tests) that drives the handler by hand, in process."""
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [(b"host", host.encode())],
        "client": ("127.0.0.1", 50000),
        "server": (host, 80),
    }


def now_ns() -> int:
    """CLOCK_MONOTONIC is one clock for the whole host on Linux, so two processes can compare readings."""
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC)


def rate(operation: Callable[[], object], seconds: float) -> float:
    """Calls per second of ``operation``, run back to back for about ``seconds``."""
    count = 0
    start = time.perf_counter()
    end = start + seconds
    while True:
        operation()
        count += 1
        if count % 16 == 0 and time.perf_counter() >= end:
            break
    return count / (time.perf_counter() - start)


def interleaved_rates(cases: dict[str, Callable[[], object]], seconds: float, repeats: int) -> dict[str, list[float]]:
    """Rates of several operations, taken in turns so that noise hits them all alike."""
    for operation in cases.values():  # warm up: connections, script loading
        for _ in range(50):
            operation()
    rates: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(repeats):
        for name, operation in cases.items():
            rates[name].append(rate(operation, seconds))
    return rates


def median_ratio(numerators: list[float], denominators: list[float]) -> float:
    """The median of round-by-round ratios (each round measured side by side)."""
    return statistics.median(n / d for n, d in zip(numerators, denominators, strict=True))


def ping_rtt(client: redis.Redis, count: int = 2000) -> float:
    """Median seconds of one PING round trip on an established connection."""
    client.ping()
    samples = []
    for _ in range(count):
        start = time.perf_counter()
        client.ping()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def percentile(samples: list[float], fraction: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


def machine() -> dict[str, object]:
    """What the figures were measured on."""
    model = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            model = next((line.split(":", 1)[1].strip() for line in cpuinfo if line.startswith("model name")), model)
    except OSError:
        pass
    return {
        "nproc": os.cpu_count(),
        "cpu": model,
        "python": platform.python_version(),
        "platform": platform.platform(terse=True),
    }
