"""``@limit_task`` with a real Celery worker process (prefork pool), never ``task_always_eager``.

The broker and result backend are the suite's own Redis server (database 1),
each test on a queue of its own; the worker is stopped by its pid when the
test ends, passed or failed. A referee counts tasks inside the critical
section with INCR/DECR, independently of the semaphore.
"""

from __future__ import annotations

import itertools
import json
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from billiard.exceptions import WorkerLostError

from django_semaphore import SemaphoreFull, get_semaphore
from django_semaphore.celery import JITTER, limit_task
from django_semaphore.core.semaphore import PAUSED_RETRY_AFTER
from django_semaphore.testing import RedisServer

from ..support.celery_app import app, call_partner, export, export_acked_early, for_tenant, give_up_soon
from ..support.celery_settings import PARTNER_LIMIT, TASK_SEMAPHORES
from ..support.celery_worker import CeleryWorker
from ..support.polling import wait_until

RESULT_TIMEOUT = 90


@pytest.fixture(autouse=True)
def task_semaphores(settings) -> None:
    settings.SEMAPHORES = {**settings.SEMAPHORES, **TASK_SEMAPHORES}


@pytest.fixture
def worker(redis_server: RedisServer, key_prefix: str, tmp_path: Path) -> Iterator[CeleryWorker]:
    broker = redis_server.url.rsplit("/", 1)[0] + "/1"
    app.conf.update(broker_url=broker, result_backend=broker)
    running = CeleryWorker(broker, key_prefix, f"q-{key_prefix.rstrip(':')}", tmp_path / "worker.log")
    try:
        yield running.start()
    finally:
        running.stop()
        print(running.log()[-8000:])  # pytest shows it when the test failed


def retries(client: redis.Redis, prefix: str) -> list[dict]:
    return [json.loads(raw) for raw in client.lrange(prefix + "retries", 0, -1)]


def attempts(client: redis.Redis, prefix: str, task_id: str) -> list[float]:
    return [float(at) for at in client.lrange(f"{prefix}attempts:{task_id}", 0, -1)]


@pytest.mark.processes
def test_tasks_never_exceed_the_limit_all_complete_and_full_ones_retry_with_the_countdown(
    worker: CeleryWorker, redis_client: redis.Redis, key_prefix: str
) -> None:
    results = [call_partner.apply_async((0.4,), queue=worker.queue) for _ in range(10)]
    pids = [result.get(timeout=RESULT_TIMEOUT) for result in results]
    assert int(redis_client.get(key_prefix + "entries") or 0) == 10
    assert int(redis_client.get(key_prefix + "over") or 0) == 0
    assert len(set(pids)) >= 2, "one pool process ran every task: nothing contended"
    assert get_semaphore("partner_api").status().used == 0
    seen = retries(redis_client, key_prefix)
    assert seen, "4 pool processes on a limit of 2 never found it full"
    lease = TASK_SEMAPHORES["partner_api"]["lease"]
    for retry in seen:
        # retry_after is at least 1 s and, with a 2 s lease, at most 2 s; the jitter adds up to half.
        assert retry["exc"] == "SemaphoreFull"
        assert 1 <= retry["countdown"] <= lease * (1 + JITTER)
        tried = attempts(redis_client, key_prefix, retry["id"])
        assert len(tried) >= 2
        assert all(later - earlier >= 0.95 for earlier, later in itertools.pairwise(tried)), tried


@pytest.mark.processes
def test_the_holder_names_the_task_and_a_killed_acks_late_task_gives_its_permit_back_within_its_lease(
    worker: CeleryWorker, redis_client: redis.Redis, key_prefix: str
) -> None:
    sem = get_semaphore("exports")
    result = export.apply_async((60,), queue=worker.queue)
    wait_until(lambda: sem.status().holder_count == 1, timeout=30)
    (holder,) = sem.status().holders
    assert holder.metadata["label"] == f"{export.name}[{result.id}]"
    assert holder.metadata["task"] == export.name and holder.metadata["retries"] == 0
    assert holder.metadata["pid"] in worker.pool()
    redis_client.set(key_prefix + "killed", 1)  # the run Celery delivers again finishes at once
    os.kill(holder.metadata["pid"], signal.SIGKILL)  # a pool process of our own worker, by its pid
    killed = time.monotonic()
    wait_until(lambda: holder.token not in {h.token for h in sem.status().holders}, timeout=10)
    assert time.monotonic() - killed <= TASK_SEMAPHORES["exports"]["lease"] + 1
    assert result.get(timeout=RESULT_TIMEOUT) == "exported"  # acks_late: delivered again, and run
    wait_until(lambda: sem.status().used == 0)


@pytest.mark.processes
def test_with_celerys_default_acks_a_killed_task_fails_and_is_not_delivered_again(
    worker: CeleryWorker, redis_client: redis.Redis, key_prefix: str
) -> None:
    sem = get_semaphore("exports")
    result = export_acked_early.apply_async((60,), queue=worker.queue)
    wait_until(lambda: sem.status().holder_count == 1, timeout=30)
    (holder,) = sem.status().holders
    os.kill(holder.metadata["pid"], signal.SIGKILL)  # a pool process of our own worker, by its pid
    with pytest.raises(WorkerLostError):
        result.get(timeout=RESULT_TIMEOUT)
    assert result.state == "FAILURE"
    wait_until(lambda: sem.status().used == 0, timeout=TASK_SEMAPHORES["exports"]["lease"] + 5)  # within its lease
    with redis.Redis.from_url(worker.broker_url) as broker:
        # Acknowledged before it ran: not on the queue, nor among the messages the broker would restore.
        assert broker.llen(worker.queue) == 0
        assert not [raw for raw in broker.hvals("unacked") if result.id.encode() in raw]
    assert len(attempts(redis_client, key_prefix, result.id)) == 1


@pytest.mark.processes
def test_past_max_retries_the_task_fails_with_semaphore_full(worker: CeleryWorker) -> None:
    held = get_semaphore("exports").acquire()
    assert held is not None
    result = give_up_soon.apply_async(queue=worker.queue)
    with pytest.raises(SemaphoreFull):
        result.get(timeout=RESULT_TIMEOUT)
    assert result.state == "FAILURE"
    held.release()


@pytest.mark.processes
def test_a_paused_semaphore_retries_its_tasks_after_the_pause_countdown(
    worker: CeleryWorker, redis_client: redis.Redis, key_prefix: str
) -> None:
    get_semaphore("exports").set_limit(0)
    export.apply_async((0,), queue=worker.queue)
    wait_until(lambda: retries(redis_client, key_prefix), timeout=30)
    (retry,) = retries(redis_client, key_prefix)
    assert retry["exc"] == "SemaphoreFull"
    assert PAUSED_RETRY_AFTER <= retry["countdown"] <= PAUSED_RETRY_AFTER * (1 + JITTER)


@pytest.mark.processes
def test_keyed_tasks_take_the_partition_of_their_arguments(
    worker: CeleryWorker, redis_client: redis.Redis, key_prefix: str
) -> None:
    slow = for_tenant.apply_async(("acme",), {"hold": 1.5}, queue=worker.queue)
    wait_until(lambda: get_semaphore("tenants", "custom:acme").status().used == 1, timeout=30)
    other = for_tenant.apply_async(("globex",), queue=worker.queue)
    same = for_tenant.apply_async(("acme",), queue=worker.queue)
    assert other.get(timeout=RESULT_TIMEOUT) == "globex"
    assert [slow.get(timeout=RESULT_TIMEOUT), same.get(timeout=RESULT_TIMEOUT)] == ["acme", "acme"]
    assert {retry["id"] for retry in retries(redis_client, key_prefix)} == {same.id}


def test_called_directly_a_task_raises_semaphore_full_as_limit_does() -> None:
    held = [get_semaphore("partner_api").acquire() for _ in range(PARTNER_LIMIT)]
    with pytest.raises(SemaphoreFull):
        call_partner(0)
    for permit in held:
        assert permit is not None and permit.release()


def test_only_plain_task_functions_are_accepted() -> None:
    async def coroutine() -> None:
        pass

    with pytest.raises(TypeError, match="plain function"):
        limit_task("exports")(coroutine)
    with pytest.raises(TypeError, match="key must be a function"):
        limit_task("exports", key="user")  # type: ignore[arg-type]
