"""Striped semaphores on a 3-master Redis Cluster, under load from several OS processes, both ways of the Lua.

- The exact bound: weighted permits, waiting and not, from six processes: 0 entries over the limit.
- Limit changes (set, add, pause, resume/clear) from several processes at once, under load, on a fixed and
  on an adaptive limit, while a watcher reads the stripes' limits one after the other: every stripe holds
  the share of a change recorded, never an older one than a change already done; the holders stay within
  the highest limit recorded; once the changes stop, the stripes add up to the last change.
- The refusal bound: callers at 90 % of the limit (the site always has a permit free), 8 stripes: refusals
  below 1 % of calls (docs/guides/scaling.md#stripes).
"""

from __future__ import annotations

from typing import Any

import pytest
import redis
from redis.crc import key_slot

from django_semaphore import Semaphore
from django_semaphore.core import scripts
from django_semaphore.core.conf import SemaphoreConfig

from ...support import modes, stripe_workers
from ...support.polling import eventually
from ...support.processes import warm
from ...support.servers import ServerCluster, slot_owner
from ..cluster.test_cluster_migration import _run, _runs

pytestmark = pytest.mark.processes  # starts real processes: CI runs it in one cell


@pytest.fixture
def credentials(way: modes.Way) -> dict[str, str]:
    """The cluster's user for ``way`` (every node has both): conftest.py's ``on_the_cluster`` connects as it."""
    return {"username": way.user, "password": modes.PASSWORD}


def _counts(redis_client: redis.Redis, prefix: str, *names: str) -> list[int]:
    return [int(redis_client.get(prefix + name) or 0) for name in names]


def _processes(target: Any, count: int, *args: Any) -> list[Any]:
    return [warm.Process(target=target, args=(*args, seed)) for seed in range(count)]


def _idle() -> None:
    """Nothing to change while the load runs."""


def _stripes_on_every_master(cluster: ServerCluster, sem: Semaphore) -> None:
    """Eight stripes on three masters owning a third of the slots each: three, three and two."""
    owners = [slot_owner(cluster, key_slot(calls.keys.state.encode())).port for calls in sem.stripe_calls]
    assert sorted(owners.count(node.port) for node in cluster.nodes) == [2, 3, 3]


def test_the_limit_holds_exactly_under_contention(
    cluster: ServerCluster,
    key_prefix: str,
    redis_client: redis.Redis,
    way: modes.Way,
    credentials: dict[str, str],
) -> None:
    options = {"limit": 24, "stripes": 8, "lease": 5}
    sem = Semaphore(SemaphoreConfig.from_options("striped", options))
    port = cluster.nodes[0].port
    this_way, other_way = _runs(way, cluster)
    # Six processes of four threads: weights 1 to 3 (a stripe holds 3), waiting 0 or 0.2 s.
    _run(_processes(stripe_workers.hammer, 6, key_prefix, port, credentials, "striped", options, 24, 3, 4, 4.0), _idle)
    entries, over, errors = _counts(redis_client, key_prefix, "entries", "over", "errors")
    assert entries > 100, "the processes barely ran"
    # (A call whose wait ran out before Redis answered raises BackendUnavailable, as on any semaphore: on two
    # shared CPUs a few do. They are counted in `errors`; what must never happen is an entry too many.)
    assert over == 0
    print(f"{entries} entries, {errors} calls unanswered by their deadline")
    status = sem.status(max_holders=1000)
    assert status.used == sum(holder.weight for holder in status.holders)
    eventually(lambda: sem.status().used == 0 and sem.status().waiting == 0, timeout=15)
    _stripes_on_every_master(cluster, sem)
    assert _runs(way, cluster)[0] > this_way and _runs(way, cluster)[1] == other_way


@pytest.mark.parametrize(
    "limit",
    [24, {"adaptive": {"min": 8, "max": 40, "initial": 24, "window": 0.2}}],
    ids=["fixed", "adaptive"],
)
def test_limit_changes_from_several_processes_never_let_the_stripes_add_up_to_more(
    cluster: ServerCluster,
    key_prefix: str,
    redis_client: redis.Redis,
    way: modes.Way,
    credentials: dict[str, str],
    limit: Any,
) -> None:
    options = {"limit": limit, "stripes": 8, "lease": 5}
    sem = Semaphore(SemaphoreConfig.from_options("changed", options))
    port = cluster.nodes[0].port
    stripe_workers.raise_highest(redis_client, key_prefix, 40 if isinstance(limit, dict) else limit)
    args = (key_prefix, port, credentials, "changed", options)
    load = _processes(stripe_workers.hammer, 3, *args, None, 1, 4, 5.0)
    changers = _processes(stripe_workers.change_limits, 3, *args, [8, 13, 16, 24, 30], 4.5)
    watcher = _processes(stripe_workers.watch_stripes, 1, *args, 5.0)
    _run([*load, *changers, *watcher], _idle)
    entries, over, changes, reads = _counts(redis_client, key_prefix, "entries", "over", "changes", "reads")
    # Each side ran, and overlapped the others many times (a loaded machine ran 701 entries and 25 changes).
    assert entries > 50 and changes > 10 and reads > 5, (entries, changes, reads)
    assert redis_client.lrange(key_prefix + "bad", 0, 10) == []
    assert over == 0
    # At rest the stripes add up to the last change (its record: the status read finishes any left behind).
    last = int(redis_client.zrevrange(key_prefix + "done", 0, 0)[0])
    action, value = redis_client.hget(key_prefix + "gens", last).decode().split()
    status = sem.status()
    if action == "set":
        assert status.limit == int(value) == status.override
    elif isinstance(limit, dict):
        assert status.override is None and 8 <= status.limit <= 40
    else:
        assert status.override is None and status.limit == 24
    assert status.limit == sum(stripe.limit for stripe in status.stripes)


def test_refusals_at_a_steady_ninety_percent_load_stay_below_one_percent(
    cluster: ServerCluster,
    key_prefix: str,
    redis_client: redis.Redis,
    way: modes.Way,
    credentials: dict[str, str],
) -> None:
    """64 permits over 8 stripes, 57 callers (89 %) in four processes: the site always has 7 permits free,
    so every refusal is the stripes' doing; they must stay below 1 % of calls."""
    options = {"limit": 64, "stripes": 8, "lease": 10}
    port = cluster.nodes[0].port
    callers = [15, 14, 14, 14]
    load = [
        warm.Process(
            target=stripe_workers.steady_load,
            args=(key_prefix, port, credentials, "steady", options, count, (0.005, 0.03), 5.0, seed),
        )
        for seed, count in enumerate(callers)
    ]
    _run(load, _idle)
    calls, refused, second, over = _counts(redis_client, key_prefix, "calls", "refused", "second", "over")
    print(f"{calls} calls, {refused} refused ({refused / calls:.3%}), {second} asked a second stripe")
    assert calls > 1000 and over == 0
    assert refused < calls / 100


def _connected_clients(cluster: ServerCluster) -> dict[int, int]:
    """How many connections each master has now (our own look counted alike every time)."""
    counts = {}
    for node in cluster.nodes:
        with redis.Redis(host="127.0.0.1", port=node.port) as admin:
            counts[node.port] = len(admin.client_list())
    return counts


def test_a_call_opens_ahead_the_connection_to_the_master_of_the_stripe_it_asks(
    cluster: ServerCluster, settings, way: modes.Way
) -> None:
    """An acquire opens its connections before its deadline is set, so that a cold start's handshakes are not
    its time (docs/servers.md#cold-start-over-tls). A striped semaphore opened them to the master of its
    name's own slot, and the call's connection to its stripe's master, when that is another, was opened
    within the call's time after all."""
    settings.SEMAPHORE_METRICS_FLUSH_INTERVAL = None  # no counts flushed on connections of their own meanwhile

    def owner(key: str) -> int:
        return slot_owner(cluster, key_slot(key.encode())).port

    for attempt in range(30):  # a name whose first stripe (this process's random order) is on another master
        sem = Semaphore(SemaphoreConfig.from_options(f"ahead-{attempt}", {"limit": 8, "lease": 30, "stripes": 8}))
        first = sem.lanes.likely() if sem.lanes else 0
        if owner(sem.stripe_calls[first].keys.state) != owner(sem.keys.state):
            break
    else:
        pytest.fail("no name's first stripe was on another master than the name")
    with cluster.client(username=way.user, password=modes.PASSWORD) as other:  # the library, loaded meanwhile
        scripts.run(other, sem.stripe_calls[first].status(0, False))
    before = _connected_clients(cluster)
    permit = sem.acquire(wait=0, auto_renew=False)
    after = _connected_clients(cluster)
    assert permit is not None and permit.stripe == first
    opened = {port: after[port] - before[port] for port in before}
    assert opened[owner(sem.stripe_calls[first].keys.state)] == 1, opened
    assert opened[owner(sem.keys.state)] == 0, opened
    assert permit.release() is True
