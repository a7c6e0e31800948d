"""The core and asyncio behaviour tests again, on a 3-master Redis Cluster.

The app reaches the cluster the documented way: a factory returning a
``redis.cluster.RedisCluster`` in ``SEMAPHORE_CONNECTION`` and one returning
a ``redis.asyncio.cluster.RedisCluster`` in ``SEMAPHORE_ASYNC_CONNECTION``.
The tests imported below are collected again in this module, so the
folder's autouse fixture (conftest.py) points each of them at the cluster.
"""

from __future__ import annotations

import asyncio
import collections
import threading
import time

import pytest
import redis
import redis.asyncio.cluster
from redis.crc import key_slot

from django_semaphore import Semaphore, get_semaphore
from django_semaphore.core import errors, scripts
from django_semaphore.core.conf import SemaphoreConfig
from django_semaphore.core.redis_keys import SemaphoreKeys
from django_semaphore.core.replies import SemaphoreStatus

from ...core.test_async import *  # noqa: F403 - re-run on the cluster
from ...core.test_core import *  # noqa: F403 - re-run on the cluster
from ...support.servers import ServerCluster


def test_semaphores_spread_over_every_master(cluster: ServerCluster, key_prefix: str) -> None:
    sems = [Semaphore(SemaphoreConfig.from_options(f"spread-{i}", {"limit": 1})) for i in range(30)]
    for sem in sems:
        assert sem.acquire(wait=0) is not None
    holders_per_node = []
    for host, port in cluster.startup_nodes:
        with redis.Redis(host=host, port=port) as node:
            holders_per_node.append(sum(1 for _ in node.scan_iter(f"{key_prefix}*:holders")))
    assert sum(holders_per_node) == 30
    assert all(count > 0 for count in holders_per_node), holders_per_node


def test_every_key_of_a_semaphore_is_in_its_slot(cluster: ServerCluster, key_prefix: str) -> None:
    sem = get_semaphore("search", key="someone")
    holder, second = sem.acquire(wait=0), sem.acquire(wait=0)
    assert holder and second
    # A waiter's wake list is named inside Lua from ARGV, not passed in KEYS:
    # the cluster accepts it because it shares the semaphore's hash tag.
    got: list[object] = []
    waiter = threading.Thread(target=lambda: got.append(asyncio.run(sem.aacquire(wait=5))))
    waiter.start()
    deadline = time.monotonic() + 5
    while sem.status().waiting < 1 and time.monotonic() < deadline:
        time.sleep(0.01)
    holder.release()
    waiter.join(10)
    assert got and got[0] is not None
    slots = set()
    for host, port in cluster.startup_nodes:
        with redis.Redis(host=host, port=port) as node:
            slots.update(key_slot(key) for key in node.scan_iter(f"{key_prefix}*"))
    registry = sem.keys.partitions_of(key_prefix, "search")
    assert slots == {key_slot(sem.keys.base.encode()), key_slot(registry.encode())}
    assert get_semaphore("search").partitions() == {sem.partition: "someone"}


def test_a_scrape_with_partitions_keeps_its_places_beside_the_registry(
    cluster: ServerCluster, key_prefix: str, settings
) -> None:
    """The metrics' places (core/series.py) are read with the partition counts, in one pipeline over the nodes,
    and kept by a script in the name's slot."""
    from django_semaphore.core import series
    from django_semaphore.metrics.reading import read

    settings.SEMAPHORE_METRICS_PARTITIONS = True
    settings.SEMAPHORE_METRICS_MAX_PARTITIONS = 2
    held = [get_semaphore("search", key=f"user-{n}").acquire(wait=0) for n in range(2)]
    first = {reading.name: reading for reading in read()}["search"].keyed
    held.append(get_semaphore("search", key="user-2").acquire(wait=0))
    assert all(held)
    again = {reading.name: reading for reading in read()}["search"].keyed  # the places the first gave, read back
    assert first is not None and again is not None
    assert [part.key for part in first.parts] == [part.key for part in again.parts] == ["user-0", "user-1"]
    assert (first.others.used, again.others.used) == (0, 1)
    registry = key_slot(SemaphoreKeys.partitions_of(key_prefix, "search").encode())
    assert key_slot(series.series_key("search").encode()) == key_slot(series.labels_key("search").encode()) == registry


def test_a_script_reaching_a_key_of_another_node_is_an_outage(cluster: ServerCluster) -> None:
    """The reply a script gets when a key it reaches is served elsewhere (a slot mid-migration) is a refusal."""
    client = cluster.client()
    try:
        with pytest.raises(redis.exceptions.ResponseError) as caught:
            client.eval("return redis.call('GET', 'b' .. KEYS[1])", 1, "a")  # 'a' and 'ba': other nodes
    finally:
        client.close()
    assert "non local key" in str(caught.value) and errors.is_outage(caught.value)


@pytest.mark.processes
def test_semaphore_scripts_loads_lists_and_cleans_on_every_master(cluster: ServerCluster) -> None:
    from io import StringIO

    from django.core.management import call_command

    from ...ops.test_semaphore_scripts import old_library

    def run(*args: str) -> str:
        out = StringIO()
        call_command("semaphore_scripts", *args, stdout=out)
        return out.getvalue()

    client = cluster.client()
    try:
        unused = old_library(client, "ba9876543210", "0.1.3", in_use=False)
        run("--load")
        listed = {line.split()[0]: line.split() for line in run().splitlines() if line.startswith("django_semaphore_")}
        assert listed[scripts.library()[0]][2] == "3" and listed[unused][2] == "3"  # MASTERS
        assert f"Deleted {unused}" in run("--clean", "--noinput")
        for node in cluster.nodes:
            with redis.Redis(host="127.0.0.1", port=node.port) as master:
                assert scripts.library_names(master.function_list()) == {scripts.library()[0]}
    finally:
        client.close()


@pytest.mark.parametrize("lost_with", [redis.exceptions.ConnectionError, redis.exceptions.TimeoutError])
def test_an_acquire_the_cluster_client_sends_again_after_its_reply_was_lost_is_granted_once(
    monkeypatch: pytest.MonkeyPatch, lost_with: type[redis.exceptions.RedisError]
) -> None:
    """redis-py's asyncio cluster client sends a command again when its reply is lost (a ConnectionError, a
    TimeoutError), though the server may have run it. Each call's acquire carries the call's token, so a second
    run finds the first one's grant, or its place in line, and keeps it (acquire.lua): one grant per call.

    The first reply of every acquire call is lost after the server ran it (read, then thrown away): calls
    granted at once, and a waiter whose joining the line is sent twice before a release hands it the permit.
    One call at a time while a reply is lost: the client's reconnecting after an error races commands other tasks
    have in flight (redis-py 8.1's asyncio connection meets a writer another task's disconnect cleared:
    ``AttributeError: 'NoneType' object has no attribute 'writelines'``, seen on a loaded run), so the holder
    releases once the waiter's acquire has run its second time.
    """
    lost: set[str] = set()
    runs: collections.Counter[str] = collections.Counter()
    execute = redis.asyncio.cluster.ClusterNode.execute_command

    async def reply_lost_once(node: redis.asyncio.cluster.ClusterNode, *args: object, **kwargs: object) -> object:
        reply = await execute(node, *args, **kwargs)
        token = _acquire_token(args)
        if token is not None:
            runs[token] += 1
        if token is not None and token not in lost:
            lost.add(token)
            raise lost_with("the reply was lost (injected)")
        return reply

    monkeypatch.setattr(redis.asyncio.cluster.ClusterNode, "execute_command", reply_lost_once)

    async def scenario() -> SemaphoreStatus:
        sem = Semaphore(SemaphoreConfig.from_options("retried", {"limit": 1}))
        for _ in range(5):
            permit = await sem.aacquire()
            assert permit is not None and (await sem.astatus()).used == 1
            assert await permit.arelease() is True
        holder = await sem.aacquire()
        assert holder is not None
        waiter = asyncio.create_task(sem.aacquire(wait=10))
        while len(lost) < 7 or min(runs[token] for token in lost) < 2:  # its line joined twice, nothing else sent
            await asyncio.sleep(0.01)
        assert (await sem.astatus()).waiting == 1
        await holder.arelease()  # handed to the waiter
        handed = await waiter
        assert handed is not None and await handed.arelease() is True
        return await sem.astatus()

    status = asyncio.run(scenario())
    counters = status.counters
    assert len(lost) == 7
    # One grant per call: a second would be a permit of its own, held beside the first (used 2 while one is
    # held, or one left held at the end); every release found its permit held (none refused).
    assert counters["refused"] == 0, counters
    assert status.used == 0 and status.holder_count == 0 and status.waiting == 0, status


def _acquire_token(command: tuple[object, ...]) -> str | None:
    """The token of an acquire operation's FCALL, EVALSHA or EVAL (core/calls.py's request), else None."""
    acquire = scripts.script("acquire")
    if len(command) < 3 or command[1] not in (scripts.function("acquire"), acquire.sha, acquire.source):
        return None
    request = command[3 + int(str(command[2])) + 1]
    return (request.decode() if isinstance(request, bytes) else str(request)).split(" ", 1)[0]
