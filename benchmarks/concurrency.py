"""Async: the acquire+release cycle from 100 asyncio tasks on one loop, vs 100 threads.

Both run on a semaphore that never fills (limit 1,000), so this measures the
client side: redis.asyncio on one loop against redis-py's thread-safe pool
under the GIL. ``auto_renew=False`` as in the cycle benchmark.
"""

from __future__ import annotations

import asyncio
import statistics
import threading
import time
from typing import Any

from .runtime import Bench, median_ratio

CONCURRENCY = 100


def async_rate(seconds: float) -> float:
    from django_semaphore import get_semaphore
    from django_semaphore.core.connection import get_async_client

    semaphore = get_semaphore("cycle")

    async def main() -> float:
        count = 0
        end = time.perf_counter() + seconds

        async def task() -> None:
            nonlocal count
            while time.perf_counter() < end:
                permit = await semaphore.aacquire(wait=0, auto_renew=False)
                await permit.arelease()
                count += 1

        start = time.perf_counter()
        await asyncio.gather(*(task() for _ in range(CONCURRENCY)))
        elapsed = time.perf_counter() - start
        await get_async_client().aclose()
        return count / elapsed

    return asyncio.run(main())


def thread_rate(seconds: float) -> float:
    from django_semaphore import get_semaphore

    semaphore = get_semaphore("cycle")
    counts = [0] * CONCURRENCY
    end = time.perf_counter() + seconds

    def work(index: int) -> None:
        while time.perf_counter() < end:
            semaphore.acquire(wait=0, auto_renew=False).release()
            counts[index] += 1

    threads = [threading.Thread(target=work, args=(i,)) for i in range(CONCURRENCY)]
    start = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return sum(counts) / (time.perf_counter() - start)


def run(bench: Bench, seconds: float, repeats: int) -> dict[str, Any]:
    async_rate(0.2)  # warm up: connections, scripts
    thread_rate(0.2)
    tasks, threads = [], []
    for _ in range(repeats):
        tasks.append(async_rate(seconds))
        threads.append(thread_rate(seconds))
    return {
        "async_tasks_cycles_per_s": statistics.median(tasks),
        "async_threads_cycles_per_s": statistics.median(threads),
        "async_ratio_vs_threads": median_ratio(tasks, threads),
    }
