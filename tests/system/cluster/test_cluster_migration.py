"""A semaphore whose Cluster slot is being moved, under load from several OS processes.

While a slot is MIGRATING, Redis runs a script on the old owner only if every
key it names exists there, and fails any command inside it on a key that is
missing (one the script itself emptied, or another waiter's wake list), with
no rollback of what ran before. Neither may leave ``used`` disagreeing with
the holders: 0 entries over the limit, and once the load stops the semaphore
drains and grants again (no jam).
"""

from __future__ import annotations

import subprocess
import threading
import time
from collections.abc import Callable

import pytest
import redis
from redis.crc import key_slot

from django_semaphore import Semaphore
from django_semaphore.core.conf import SemaphoreConfig

from ...support import modes, workers
from ...support.polling import eventually
from ...support.processes import warm
from ...support.servers import (
    ServerCluster,
    cluster_cli,
    first_slot,
    node_id,
    slot_migrating,
    slot_owner,
)

pytestmark = pytest.mark.processes  # starts, kills or stalls real processes: CI runs it in one cell

PROCESSES = 6


@pytest.fixture
def credentials(way: modes.Way) -> dict[str, str]:
    """The cluster's user for ``way`` (every node has both): conftest.py's ``on_the_cluster`` connects as it."""
    return {"username": way.user, "password": modes.PASSWORD}


def _name_in_slot(prefix: str, slot: int) -> str:
    """A semaphore name whose keys hash to ``slot``."""
    for n in range(1_000_000):
        name = f"moving-{n}"
        if key_slot(f"{prefix}{{{name}}}:holders".encode()) == slot:
            return name
    raise LookupError(slot)


def _load(
    prefix: str, cluster: ServerCluster, name: str, limit: int, seconds: float, credentials: dict[str, str]
) -> list:
    port = cluster.nodes[0].port
    return [
        warm.Process(target=workers.contend_on_cluster, args=(prefix, port, name, limit, seconds, seed, credentials))
        for seed in range(PROCESSES)
    ]


def _runs(way: modes.Way, cluster: ServerCluster) -> tuple[int, int]:
    """Operations run ``way``, and the other way, on all masters together (a test compares before and after)."""
    other = modes.Way("evalsha" if way.name == "functions" else "functions")
    totals = [0, 0]
    for node in cluster.nodes:
        with redis.Redis(host="127.0.0.1", port=node.port) as admin:
            totals[0] += way.runs(admin)
            totals[1] += other.runs(admin)
    return totals[0], totals[1]


def _run(processes: list, during: Callable[[], None], entered: Callable[[], int] | None = None) -> None:
    """Run the load, and ``during`` it the cluster change; the change's own failure fails the test.

    Given ``entered``, the change starts once the load has let someone in, not when the processes are
    started: a loaded machine once took most of their 5 s to start them, and the change met almost no load.
    """
    failures: list[BaseException] = []

    def change() -> None:
        try:
            during()
        except BaseException as exc:
            failures.append(exc)

    thread = threading.Thread(target=change)
    try:
        for process in processes:
            process.start()
        if entered is not None:
            eventually(lambda: entered() > 0, timeout=60)
        thread.start()
        thread.join(120)
        for process in processes:
            process.join(120)
    finally:
        for process in processes:  # only our own children, by their pid
            if process.is_alive():
                process.kill()
            process.join(5)
    assert failures == []


def _entries(redis_client: redis.Redis, prefix: str) -> Callable[[], int]:
    """How many times the load got in so far (the referee's count)."""
    return lambda: int(redis_client.get(prefix + "entries") or 0)


def _assert_consistent_and_usable(sem: Semaphore, redis_client: redis.Redis, prefix: str, limit: int) -> None:
    entries = _entries(redis_client, prefix)()
    over = int(redis_client.get(prefix + "over") or 0)
    # Load that met the change: the change started after the first entry, and takes about 4 s of the 5 s each
    # process runs; a quiet machine lets in hundreds, the suite beside `make bench` as few as 18.
    assert entries >= 10, "the processes barely ran"
    assert over == 0
    status = sem.status(max_holders=1000)
    assert status.used == sum(holder.weight for holder in status.holders), status
    # Leases (2 s) and claims end whatever an outage left behind: no jam.
    eventually(lambda: sem.status().used == 0 and sem.status().waiting == 0, timeout=15)
    permit = sem.acquire(weight=limit, wait=2, auto_renew=False)
    assert permit is not None
    permit.release()


@pytest.mark.parametrize("limit", [1, 3], ids=["mutex", "weighted"])
def test_a_slot_marked_migrating_under_load_neither_overfills_nor_jams(
    cluster: ServerCluster,
    key_prefix: str,
    redis_client: redis.Redis,
    limit: int,
    way: modes.Way,
    credentials: dict[str, str],
) -> None:
    source = cluster.nodes[1]
    target = cluster.nodes[2]
    slot = first_slot(source) + 7
    name = _name_in_slot(key_prefix, slot)
    sem = Semaphore(SemaphoreConfig.from_options(name, {"limit": limit, "lease": 2}))
    assert slot_owner(cluster, slot) is source

    def migrating_for_a_while() -> None:
        time.sleep(1.0)
        for _ in range(3):
            with slot_migrating(slot, source, target):
                time.sleep(0.7)
            time.sleep(0.3)

    this_way, other_way = _runs(way, cluster)
    load = _load(key_prefix, cluster, name, limit, 5.0, credentials)
    _run(load, migrating_for_a_while, _entries(redis_client, key_prefix))
    _assert_consistent_and_usable(sem, redis_client, key_prefix, limit)
    assert _runs(way, cluster)[0] > this_way and _runs(way, cluster)[1] == other_way


def test_a_live_reshard_under_load_neither_overfills_nor_jams(
    cluster: ServerCluster, key_prefix: str, redis_client: redis.Redis, credentials: dict[str, str]
) -> None:
    cli = cluster_cli(cluster)
    if cli is None:
        pytest.skip("no redis-cli or valkey-cli to reshard with")
    source = cluster.nodes[0]
    target = cluster.nodes[1]
    slot = first_slot(source)
    name = _name_in_slot(key_prefix, slot)
    sem = Semaphore(SemaphoreConfig.from_options(name, {"limit": 2, "lease": 2}))
    with redis.Redis(host="127.0.0.1", port=source.port) as src, redis.Redis(host="127.0.0.1", port=target.port) as dst:
        source_id, target_id = node_id(src), node_id(dst)

    def reshard(from_id: str, to_id: str) -> None:
        subprocess.run(
            [
                cli,
                "--cluster",
                "reshard",
                f"127.0.0.1:{source.port}",
                "--cluster-from",
                from_id,
                "--cluster-to",
                to_id,
                "--cluster-slots",
                "1",
                "--cluster-yes",
                "--cluster-pipeline",
                "1",
            ],
            check=True,
            capture_output=True,
            timeout=60,
            stdin=subprocess.DEVNULL,
        )

    def reshard_back_and_forth() -> None:
        time.sleep(1.0)
        reshard(source_id, target_id)  # the semaphore's slot moves, one key at a time
        time.sleep(1.0)
        assert slot_owner(cluster, slot) is target
        reshard(target_id, source_id)  # and back, so the module's other tests see the cluster as it was

    load = _load(key_prefix, cluster, name, 2, 5.0, credentials)
    _run(load, reshard_back_and_forth, _entries(redis_client, key_prefix))
    _assert_consistent_and_usable(sem, redis_client, key_prefix, 2)
