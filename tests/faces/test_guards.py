"""``@limit`` on plain functions, coroutines, generators and async generators, against the real server."""

from __future__ import annotations

import asyncio
import gc
import threading
import time
from collections.abc import AsyncIterator, Iterator
from types import SimpleNamespace

import pytest
import redis
from django.test import RequestFactory

from django_semaphore import BackendUnavailable, SemaphoreFull, get_semaphore, limit
from django_semaphore.web.partition_keys import key_for

from ..support import workers
from ..support.polling import wait_until
from ..support.processes import warm


@pytest.fixture(autouse=True)
def partner(settings) -> None:
    settings.SEMAPHORES = {
        **settings.SEMAPHORES,
        "partner": {"limit": 1, "lease": 30},
        "accounts": {"limit": 1, "lease": 30, "key": "user"},
    }


def used(name: str = "partner", key: object = None) -> int:
    return get_semaphore(name, key).status().used


def labels(name: str = "partner") -> list[str]:
    return [holder.metadata.get("label") for holder in get_semaphore(name).status().holders]


@limit("partner")
def call_partner(seen: list[object]) -> str:
    seen.append((used(), labels()))
    return "answer"


def test_a_function_holds_a_permit_while_it_runs_labelled_with_its_name() -> None:
    seen: list[object] = []
    assert call_partner(seen) == "answer"
    assert seen == [(1, [f"{__name__}.call_partner"])]
    assert used() == 0
    assert call_partner.__name__ == "call_partner"  # functools.wraps


def test_an_exception_gives_the_permit_back() -> None:
    @limit("partner", label="failing call")
    def failing() -> None:
        assert labels() == ["failing call"]
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        failing()
    assert used() == 0


def test_full_raises_semaphore_full_after_waiting_up_to_wait() -> None:
    held = get_semaphore("partner").acquire(auto_renew=False)
    assert held is not None

    @limit("partner", wait=0.4)
    def never_runs() -> None:
        raise AssertionError("ran without a permit")

    started = time.monotonic()
    with pytest.raises(SemaphoreFull) as raised:
        never_runs()
    assert 0.35 <= time.monotonic() - started < 3
    assert raised.value.retry_after >= 1 and raised.value.name == "partner" and not raised.value.paused
    assert (raised.value.used, raised.value.limit) == (1, 1)
    held.release()


def test_a_waiting_call_runs_once_the_holder_releases() -> None:
    held = get_semaphore("partner").acquire(auto_renew=False)
    assert held is not None
    results: list[str] = []
    caller = threading.Thread(target=lambda: results.append(limit("partner", wait=10)(lambda: "ran")()))
    caller.start()
    wait_until(lambda: get_semaphore("partner").status().waiting == 1)
    held.release()
    caller.join(10)
    assert results == ["ran"]


def test_a_paused_semaphore_refuses_with_its_own_retry_after() -> None:
    from django_semaphore.core.semaphore import PAUSED_RETRY_AFTER

    get_semaphore("partner").set_limit(0)
    with pytest.raises(SemaphoreFull) as raised:
        call_partner([])
    assert raised.value.paused and raised.value.retry_after == PAUSED_RETRY_AFTER


def test_keys_come_from_the_call_and_share_a_view_key_functions_partition() -> None:
    @limit("accounts", key=lambda account, **kwargs: account.pk)
    def sync_account(account: SimpleNamespace, *, full: bool = False) -> tuple[int, int]:
        return used("accounts", "custom:7"), used("accounts", "custom:8")

    assert sync_account(SimpleNamespace(pk=7), full=True) == (1, 0)
    assert sync_account(SimpleNamespace(pk=8)) == (0, 1)
    # A view keyed by a function returning 7 takes the very same partition.
    view_key = key_for(RequestFactory().get("/"), lambda request: 7)
    assert get_semaphore("accounts", view_key).partition == get_semaphore("accounts", "custom:7").partition
    held = get_semaphore("accounts", view_key).acquire(auto_renew=False)
    with pytest.raises(SemaphoreFull):
        sync_account(SimpleNamespace(pk=7))
    assert sync_account(SimpleNamespace(pk=8)) == (1, 1)
    assert held is not None and held.release()


def test_a_key_of_none_runs_unguarded() -> None:
    @limit("accounts", key=lambda account: account)
    def anonymous(account: object) -> int:
        return get_semaphore("accounts").partition_count()

    assert anonymous(None) == 0 and anonymous("") == 0


def test_misuse_is_refused_clearly() -> None:
    with pytest.raises(TypeError, match="key must be a function"):
        limit("partner", key="user")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="Semaphore name"):
        limit("no spaces allowed")
    with pytest.raises(ValueError, match="is keyed: give key="):
        limit("accounts")(lambda: None)()
    with pytest.raises(ValueError, match="is not keyed"):
        limit("partner", key=lambda: 1)(lambda: None)()
    with pytest.raises(LookupError, match="Unknown semaphore"):
        limit("undeclared")(lambda: None)()
    with pytest.raises(ValueError, match="wait must be"):
        limit("partner", wait=-1)(lambda: None)()

    async def key(account: object) -> object:
        return account

    with pytest.raises(TypeError, match="not an awaitable"):
        limit("accounts", key=key)(lambda account: None)(1)


def test_a_coroutine_uses_the_asyncio_client() -> None:
    @limit("partner")
    async def fetch(delay: float) -> tuple[int, list[str]]:
        status = await get_semaphore("partner").astatus()
        await asyncio.sleep(delay)
        return status.used, [h.metadata.get("label") for h in status.holders]

    assert asyncio.run(fetch(0)) == (1, [f"{__name__}.{fetch.__qualname__}"])
    assert used() == 0

    async def one_while_another_holds() -> object:
        # The second call starts once the first holds its permit: which of two calls started
        # together reaches Redis first is up to the event loop and the connection pool.
        holding, done = asyncio.Event(), asyncio.Event()

        @limit("partner")
        async def hold() -> None:
            holding.set()
            await done.wait()

        first = asyncio.create_task(hold())
        await holding.wait()
        try:
            return await fetch(0)
        except SemaphoreFull as exc:
            return exc
        finally:
            done.set()
            await first

    assert isinstance(asyncio.run(one_while_another_holds()), SemaphoreFull)
    assert used() == 0


def test_a_generator_holds_the_permit_until_exhausted() -> None:
    @limit("partner")
    def rows(count: int) -> Iterator[int]:
        for index in range(count):
            yield used() * 100 + index
        return None

    stream = rows(3)
    assert used() == 0  # nothing runs before the first item, as for any generator
    assert next(stream) == 100
    assert used() == 1
    assert list(stream) == [101, 102]
    assert used() == 0


def test_a_generator_closed_early_or_dropped_gives_the_permit_back() -> None:
    @limit("partner")
    def forever() -> Iterator[int]:
        while True:
            yield 1

    stream = forever()
    next(stream)
    stream.close()
    assert used() == 0
    dropped = forever()
    next(dropped)
    assert used() == 1
    del dropped
    gc.collect()
    assert used() == 0


def test_an_async_generator_holds_the_permit_until_exhausted_or_closed() -> None:
    closed: list[bool] = []

    @limit("partner")
    async def events(count: int) -> AsyncIterator[int]:
        try:
            for index in range(count):
                yield (await get_semaphore("partner").astatus()).used * 100 + index
        finally:
            closed.append(True)

    async def scenario() -> None:
        assert [item async for item in events(2)] == [100, 101]
        assert used() == 0
        stream = events(10)
        assert await stream.__anext__() == 100
        assert used() == 1
        await stream.aclose()
        assert used() == 0 and closed == [True, True]  # the inner generator was closed too

    asyncio.run(scenario())


@pytest.mark.processes
def test_redis_down_follows_the_semaphores_on_error(settings, own_server) -> None:
    settings.SEMAPHORES = {
        **settings.SEMAPHORES,
        "open": {"limit": 1, "lease": 30, "on_error": "allow"},
        "closed": {"limit": 1, "lease": 30, "on_error": "deny"},
    }
    own_server.stop()
    assert limit("open")(lambda: "ran unguarded")() == "ran unguarded"
    with pytest.raises(BackendUnavailable):
        limit("closed")(lambda: "never")()


@pytest.mark.processes
def test_redis_down_follows_the_semaphores_on_error_on_the_asyncio_client_too(settings, own_server) -> None:
    settings.SEMAPHORES = {
        **settings.SEMAPHORES,
        "open": {"limit": 1, "lease": 30, "on_error": "allow"},
        "closed": {"limit": 1, "lease": 30, "on_error": "deny"},
    }
    own_server.stop()

    async def ran() -> str:
        return "ran unguarded"

    assert asyncio.run(limit("open")(ran)()) == "ran unguarded"
    with pytest.raises(BackendUnavailable):
        asyncio.run(limit("closed")(ran)())


@pytest.mark.processes
def test_never_over_the_limit_across_processes(key_prefix: str, redis_client: redis.Redis) -> None:
    processes = [warm.Process(target=workers.call_guarded, args=(key_prefix, 2, 3.0, seed)) for seed in range(6)]
    try:
        for process in processes:
            process.start()
        for process in processes:
            process.join(60)
    finally:
        for process in processes:  # only our own children, by their pid
            if process.is_alive():
                process.kill()
                process.join(5)
    assert all(process.exitcode == 0 for process in processes)
    entries, over, full = (int(redis_client.get(key_prefix + name) or 0) for name in ("entries", "over", "full"))
    assert entries > 50 and full > 0, "the processes barely contended"
    assert over == 0
