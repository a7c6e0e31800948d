"""The asyncio API (redis.asyncio, no thread hop) passes the same behaviour tests."""

from __future__ import annotations

import asyncio
import time

import pytest

from django_semaphore import Semaphore, SemaphoreFull, WeightAboveLimit
from django_semaphore.core.conf import SemaphoreConfig


def make(limit: int = 2, **options: object) -> Semaphore:
    return Semaphore(SemaphoreConfig.from_options("adhoc", {"limit": limit, **options}))


def run(coro):
    return asyncio.run(coro)


def test_acquire_release_and_full() -> None:
    async def scenario() -> None:
        sem = make(2)
        first, second = await sem.aacquire(), await sem.aacquire()
        assert first and second
        attempt = await sem.aattempt()
        assert attempt.permit is None and attempt.retry_after >= 1
        assert await first.arelease() is True
        assert await first.arelease() is False
        assert await sem.aacquire() is not None

    run(scenario())


def test_async_context_manager_and_full() -> None:
    async def scenario() -> None:
        sem = make(1)
        async with sem as permit:
            assert permit.held
            with pytest.raises(SemaphoreFull):
                async with make(1):
                    pass
        assert (await sem.astatus()).used == 0

    run(scenario())


def test_fences_increase_and_renew_refuses_lost_lease() -> None:
    async def scenario() -> None:
        sem = make(1, lease=0.3, auto_renew=False)
        fences = []
        for _ in range(5):
            permit = await sem.aacquire()
            assert permit is not None
            fences.append(permit.fence)
            await permit.arelease()
        assert fences == sorted(set(fences))
        permit = await sem.aacquire()
        assert permit is not None
        assert await permit.arenew() is True
        await asyncio.sleep(0.4)
        assert await permit.arenew() is False and permit.lost

    run(scenario())


def test_weighted_and_limit_override() -> None:
    async def scenario() -> None:
        sem = make(5)
        assert await sem.aacquire(weight=4)
        assert await sem.aacquire(weight=2) is None
        with pytest.raises(WeightAboveLimit):
            await sem.aacquire(weight=6)
        sem.set_limit(6)
        assert await sem.aacquire(weight=2) is not None
        status = await sem.astatus()
        assert status.used == 6 and status.override == 6

    run(scenario())


def test_fifo_order_of_waiting_tasks() -> None:
    async def scenario() -> None:
        sem = make(1)
        holder = await sem.aacquire()
        assert holder is not None
        order: list[str] = []

        async def waiter(name: str) -> None:
            permit = await make(1).aacquire(wait=10)
            assert permit is not None
            order.append(name)
            await asyncio.sleep(0.02)
            await permit.arelease()

        tasks = []
        for name in "ABC":
            tasks.append(asyncio.create_task(waiter(name)))
            while (await sem.astatus()).waiting < len(tasks):
                await asyncio.sleep(0.01)
        await holder.arelease()
        await asyncio.wait_for(asyncio.gather(*tasks), 10)
        assert order == ["A", "B", "C"]

    run(scenario())


def test_wait_times_out_and_leaves_line() -> None:
    async def scenario() -> None:
        sem = make(1)
        assert await sem.aacquire()
        started = time.monotonic()
        assert await sem.aacquire(wait=0.3) is None
        assert time.monotonic() - started >= 0.25
        assert (await sem.astatus()).waiting == 0

    run(scenario())


def test_many_concurrent_tasks_never_exceed_limit() -> None:
    async def scenario() -> None:
        sem = make(3)
        inside = 0
        peak = 0
        granted = 0

        async def worker() -> None:
            nonlocal inside, peak, granted
            for _ in range(5):
                permit = await sem.aacquire(wait=5)
                assert permit is not None
                granted += 1
                inside += 1
                peak = max(peak, inside)
                await asyncio.sleep(0.002)
                inside -= 1
                await permit.arelease()

        await asyncio.gather(*(worker() for _ in range(20)))
        assert peak <= 3
        status = await sem.astatus()
        assert status.used == 0 and granted == 100

    run(scenario())
