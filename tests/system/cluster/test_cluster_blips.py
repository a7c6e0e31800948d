"""Connection errors on an asyncio Cluster client with many calls in flight: the failure policy, never a bug's error.

redis-py's asyncio Cluster client answers a connection error by reconnecting
(it marks the node's connections for reconnection and builds its view of the
cluster again), while other tasks' commands are on their way: redis-py 8.1
then lets some of them meet a connection whose writer or reader was cleared
under them, an ``AttributeError`` or ``TypeError`` instead of a
``ConnectionError`` (seen in a loaded run of test_cluster.py). The engine
takes those for what they are, a connection lost mid-command: an outage,
so the caller's failure policy, never an exception that would answer 500.
"""

from __future__ import annotations

import asyncio
import collections
import time

import pytest
import redis
import redis.asyncio.cluster
from redis.crc import key_slot

from django_semaphore import Semaphore
from django_semaphore.core import bounded, errors
from django_semaphore.core.bounded import LEAVING, Deadline
from django_semaphore.core.calls import AcquireOptions
from django_semaphore.core.conf import SemaphoreConfig
from django_semaphore.core.connection import aclient, translated
from django_semaphore.core.errors import BackendUnavailable
from django_semaphore.core.flow import Driver, Leave, first_acquire
from django_semaphore.core.replies import FULL, AcquireReply
from django_semaphore.core.waits import Block

from ...support.servers import slot_owner

TASKS, ROUNDS, EVERY = 40, 25, 37
HUNG_WAIT = 0.5


def test_connection_errors_among_calls_in_flight_are_outages_to_every_caller(monkeypatch: pytest.MonkeyPatch) -> None:
    sent = collections.Counter[str]()
    execute = redis.asyncio.cluster.ClusterNode.execute_command

    async def sometimes_lost(node: redis.asyncio.cluster.ClusterNode, *args: object, **kwargs: object) -> object:
        sent["all"] += 1
        if sent["all"] % EVERY == 0:
            raise redis.exceptions.ConnectionError("the connection was lost (injected)")
        return await execute(node, *args, **kwargs)

    monkeypatch.setattr(redis.asyncio.cluster.ClusterNode, "execute_command", sometimes_lost)
    outcomes = collections.Counter[str]()

    async def caller(index: int) -> None:
        sem = Semaphore(SemaphoreConfig.from_options(f"blip{index % 7}", {"limit": 3}))
        for _ in range(ROUNDS):
            try:
                permit = await sem.aacquire()
                if permit is not None:
                    await asyncio.sleep(0)
                    await permit.arelease()
                outcomes["answered"] += 1
            except BackendUnavailable:
                outcomes["outage"] += 1
            except Exception as exc:  # what must never reach a view
                outcomes[f"{type(exc).__name__}: {exc}"] += 1

    async def scenario() -> None:
        await asyncio.gather(*(caller(index) for index in range(TASKS)))

    asyncio.run(scenario())
    print(dict(outcomes))
    assert set(outcomes) <= {"answered", "outage"}, outcomes
    assert outcomes["outage"] > 0 and outcomes["answered"] > 0


def test_only_redis_pys_own_io_meeting_a_cleared_connection_counts_as_one_lost(cluster) -> None:
    node = cluster.nodes[0]

    async def cleared_under_a_write() -> BaseException:
        connection = redis.asyncio.Connection(host="127.0.0.1", port=node.port)
        await connection.connect()
        writer = connection._writer
        connection._writer = None  # what another task's disconnect leaves under a command in flight
        try:
            await connection._send_packed_command([b"*1\r\n$4\r\nPING\r\n"])
        except Exception as exc:
            return exc
        finally:
            connection._writer = writer
            await connection.disconnect()
        raise AssertionError("the write went through")

    met = asyncio.run(cleared_under_a_write())
    lost = errors.lost_mid_command(met)
    assert isinstance(met, AttributeError) and isinstance(lost, redis.exceptions.ConnectionError)
    assert lost.__cause__ is met and "closed under the command" in str(lost)
    # A bug of anyone else's (here, the caller's own) is raised as it is, never taken for an outage.
    with pytest.raises(TypeError), translated("bug", None):
        len(None)  # type: ignore[arg-type]
    assert errors.lost_mid_command(AttributeError("'NoneType' object has no attribute 'writelines'")) is None


def _queued_then_hung_at_its_last_block(request, node):  # type: ignore[no-untyped-def]
    """``acquire_flow``'s steps when the earliest lease ends just before the wait does: queued, one block until
    that lease's end, then the deadline passed; the node hung (SIGSTOP) from after the first reply."""
    started = time.monotonic()
    reply = AcquireReply.parse((yield first_acquire(request)), started)
    node.freeze()
    woken = yield Block(started + HUNG_WAIT - time.monotonic() - 0.001, precise=False, at_expiry=True)
    assert not woken.left and not woken.answered
    if time.monotonic() >= started + HUNG_WAIT:
        yield Leave(answered=woken.answered)  # as acquire_flow leaves after a wait Redis did not end
    return reply.finished(time.monotonic() - started, False, FULL)


def test_a_node_hung_through_a_waits_last_block_is_an_outage_not_a_refusal(cluster) -> None:  # type: ignore[no-untyped-def]
    """A wait the asyncio Cluster client bounds itself, which the hung node never answered: the leaving that
    follows cannot be confirmed either, and the call is the outage it is (a refusal is only for a wait that
    Redis ended: tests/core/test_slow_leaving.py)."""
    sem = Semaphore(SemaphoreConfig.from_options("hung-at-its-last-block", {"limit": 1}))
    holder = sem.acquire(lease=30, auto_renew=False)
    assert holder is not None
    request = AcquireOptions(wait=HUNG_WAIT).request(sem.config, sem.calls)
    node = slot_owner(cluster, key_slot(sem.keys.base.encode()))

    async def driven() -> object:
        deadline = Deadline.after(HUNG_WAIT + LEAVING)
        driver = Driver(await aclient(), request, deadline=deadline)
        try:
            return await bounded.by(deadline, driver.adrive(_queued_then_hung_at_its_last_block(request, node)))
        except redis.exceptions.RedisError as error:
            return error

    try:
        outcome = asyncio.run(driven())
    finally:
        node.thaw()
    assert isinstance(outcome, redis.exceptions.TimeoutError), outcome
    assert holder.release() is True
