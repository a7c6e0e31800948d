"""Keys a client chooses must not grow Redis, nor the operators' reads, without bound, nor lock anyone out.

A ``header:``, ``get:`` or ``ip`` key makes a new partition for every new
value a client sends. ``max_partitions`` bounds what one semaphore keeps: a
new key is always served and limited, and idle partitions are evicted,
oldest first, keys and all, to make room. The dashboard and
``semaphore_status`` read the same number of entries whether a semaphore
has thousands of keys or tens of thousands: counted here in commands the
server ran, not in seconds.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from io import StringIO

import pytest
import redis
from django.contrib.auth.models import User
from django.core.management import call_command
from django.test import Client
from django.urls import reverse

from django_semaphore import TooManyPartitions, get_semaphore, outcomes
from django_semaphore.core import conf, registry
from django_semaphore.core.bounded import NO_DEADLINE
from django_semaphore.core.connection import get_client
from django_semaphore.core.renewal import renewer
from django_semaphore.ops import overview
from django_semaphore.testing import RedisServer

from ..support import workers
from ..support.guards import declare
from ..support.polling import answered, wait_until
from ..support.processes import run_to_the_end, warm

IP_URL = "/surface/keyed/ip/"  # @semaphore("guarded", key="ip")
IP_HELD_OPEN_URL = "/surface/ip-held-open/"  # the same, streaming: the permit is held until closed


def address(n: int) -> str:
    return f"198.51.{n // 250}.{n % 250 + 1}"


def memory_by_tag(server: redis.Redis, prefix: str) -> dict[str, int]:
    """Bytes (MEMORY USAGE, exact) of every key under ``prefix``, summed per hash tag (a partition, or the name)."""
    sizes: dict[str, int] = {}
    for key in server.scan_iter(match=f"{prefix}*", count=1000):
        tag = key.decode().split("{", 1)[1].split("}", 1)[0]
        sizes[tag] = sizes.get(tag, 0) + int(server.memory_usage(key, samples=0) or 0)
    return sizes


@pytest.mark.django_db  # closing a streamed response closes old database connections
@pytest.mark.parametrize("policy", ["allow", "deny"])
def test_a_full_cap_still_serves_and_limits_a_new_address(
    client: Client, settings, redis_client: redis.Redis, key_prefix: str, policy: str
) -> None:
    cap = 20
    declare(settings, guarded={"limit": 1, "key": "ip", "max_partitions": cap, "on_error": policy})
    outcomes.reset()
    statuses = [client.get(IP_URL, REMOTE_ADDR=address(n)).status_code for n in range(3 * cap)]
    assert statuses == [200] * (3 * cap)
    newcomer = address(3 * cap)
    first = client.get(IP_HELD_OPEN_URL, REMOTE_ADDR=newcomer)  # streaming: holds its permit until closed
    second = client.get(IP_HELD_OPEN_URL, REMOTE_ADDR=newcomer)
    assert (first.status_code, second.status_code) == (200, 503)
    assert get_semaphore("guarded", f"ip:{newcomer}").status().used == 1
    first.close()
    # Every request was guarded: none went through unlimited (error_allowed) or was refused for the cap.
    assert outcomes.counts()["guarded"] == {"acquired": 3 * cap + 1, "full": 1}
    # Redis keeps at most `cap` partitions, all idle now, and as many registry entries.
    sizes = memory_by_tag(redis_client, key_prefix)
    partitions = {tag: size for tag, size in sizes.items() if tag != "guarded"}
    assert len(partitions) <= cap and get_semaphore("guarded").partition_count() <= cap
    per_idle_partition = max(partitions.values()) + sizes["guarded"] / get_semaphore("guarded").partition_count()
    assert sum(sizes.values()) <= cap * per_idle_partition
    print(f"bytes per idle partition: {per_idle_partition:.0f} (its keys {max(partitions.values())})")


def test_eviction_takes_the_oldest_idle_partition_and_never_one_in_use(settings, redis_client: redis.Redis) -> None:
    declare(settings, guarded={"key": "header:X-Api-Key", "max_partitions": 2})
    held = get_semaphore("guarded", "held").acquire(auto_renew=False)  # the oldest, in use
    assert held is not None
    idle = get_semaphore("guarded", "idle").acquire(auto_renew=False)
    assert idle is not None
    idle.release()
    newcomer = get_semaphore("guarded", "new").acquire(auto_renew=False)
    assert newcomer is not None
    # "idle" went, keys and all; "held" stayed and still counts its holder against the limit (1).
    assert not any(redis_client.exists(key) for key in get_semaphore("guarded", "idle").keys.common)
    assert sorted(get_semaphore("guarded").partitions().values()) == ["held", "new"]
    assert get_semaphore("guarded", "held").acquire(wait=0, auto_renew=False) is None
    held.release()
    newcomer.release()


def test_a_partition_paused_by_an_operator_is_not_evicted(settings) -> None:
    declare(settings, guarded={"key": "header:X-Api-Key", "max_partitions": 2})
    noisy = get_semaphore("guarded", "noisy")
    noisy.set_limit(0)  # paused: nobody holds it, yet it must not be undone by a flood of new keys
    for n in range(6):
        permit = get_semaphore("guarded", f"flood-{n}").acquire(auto_renew=False)
        assert permit is not None
        permit.release()
    assert noisy.acquire(wait=0, auto_renew=False) is None
    assert noisy.status().limit == 0


def test_an_evicted_partition_starts_with_a_higher_fence(settings) -> None:
    declare(settings, guarded={"key": "header:X-Api-Key", "max_partitions": 1})
    first = get_semaphore("guarded", "again").acquire(auto_renew=False)
    assert first is not None
    first.release()
    other = get_semaphore("guarded", "other").acquire(auto_renew=False)  # evicts "again"
    assert other is not None
    other.release()
    assert get_semaphore("guarded", "again").status().fence == 0  # its keys are gone
    second = get_semaphore("guarded", "again").acquire(auto_renew=False)
    assert second is not None and second.fence > first.fence


def test_a_partition_evicted_behind_a_process_that_remembers_it_is_recorded_again(
    settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("django_semaphore.core.renewal.RETRY_AFTER_ERROR", 0.01)
    declare(settings, guarded={"key": "header:X-Api-Key", "max_partitions": 1})
    sem = get_semaphore("guarded", "regular")
    first = sem.acquire(auto_renew=False)  # recorded; this process remembers it for half an idle period
    assert first is not None
    first.release()
    other = get_semaphore("guarded", "other").acquire(auto_renew=False)  # evicts "regular"
    assert other is not None
    other.release()
    assert list(get_semaphore("guarded").partitions().values()) == ["other"]
    # This process skips recording "regular" (it remembers doing so), but its acquire finds the
    # partition fresh: the partition is recorded again (in the background), so the cap still sees it.
    permit = sem.acquire(auto_renew=False)
    assert permit is not None
    wait_until(lambda: "regular" in get_semaphore("guarded").partitions().values() and not renewer.pending())
    permit.release()


def test_reading_the_partitions_keeps_an_entry_whose_acquire_has_not_run_yet(settings) -> None:
    """Recorded, not yet acquired (the next round trip): the dashboard's read must not drop the entry,
    or the partition its acquire then makes would be kept outside the cap."""
    declare(settings, guarded={"key": "header:X-Api-Key", "max_partitions": 5})
    sem = get_semaphore("guarded", "on-its-way")
    registry.admit(get_client(), sem.config, sem.partition, sem.key, NO_DEADLINE)
    assert get_semaphore("guarded").partitions() == {}  # no keys yet: nothing to show
    assert get_semaphore("guarded").partition_count() == 1  # but still recorded
    permit = sem.acquire(auto_renew=False)
    assert permit is not None
    assert get_semaphore("guarded").partitions() == {sem.partition: "on-its-way"}
    permit.release()


def test_too_many_partitions_is_never_raised_and_async_admits_past_the_cap_too(settings) -> None:
    declare(settings, guarded={"key": "header:X-Api-Key", "max_partitions": 2})
    assert issubclass(TooManyPartitions, Exception)  # still importable, for code that catches it

    async def take(n: int) -> None:
        permit = await get_semaphore("guarded", f"async-{n}").aacquire(auto_renew=False)
        assert permit is not None
        await permit.arelease()

    for n in range(8):
        asyncio.run(take(n))
    assert get_semaphore("guarded").partition_count() <= 2


@pytest.mark.processes
def test_eviction_never_takes_a_partition_in_use_across_processes(
    settings, key_prefix: str, redis_client: redis.Redis
) -> None:
    """Six processes take permits of 15 keys at limit 1 with a cap of 5: every key is evicted again
    and again while the others are in use, and no key ever has two holders at once."""
    processes = [
        warm.Process(target=workers.churn_partitions, args=(key_prefix, 15, 5, 3.0, seed)) for seed in range(6)
    ]
    redis_client.config_resetstat()  # the eviction script's DEL is the only DEL these processes run
    run_to_the_end(processes)
    assert all(process.exitcode == 0 for process in processes)
    entries, over = int(redis_client.get(key_prefix + "entries") or 0), int(redis_client.get(key_prefix + "over") or 0)
    evicted = int(redis_client.info("commandstats").get("cmdstat_del", {}).get("calls", 0))
    assert entries > 100 and evicted > 15, (entries, evicted)
    assert over == 0


def test_listing_every_partition_goes_by_cursor_pages(settings) -> None:
    declare(settings, guarded={"key": "header:X-Api-Key"})
    for n in range(50):
        assert get_semaphore("guarded", f"k{n}").acquire(auto_renew=False) is not None
    sem = get_semaphore("guarded")
    listed = list(sem.iter_partitions(page=7))
    assert sorted(label for _, label in listed) == sorted(f"k{n}" for n in range(50))
    assert len(sem.partitions(limit=10)) == 10 and sem.partition_count() == 50
    assert len(overview.expand(sem)) == 50


# -- reads that do not grow with the partitions -------------------------------


def make_partitions(keys: range) -> None:
    """Real partitions through the public API, from a few threads (each acquire waits on the network)."""

    def take(n: int) -> None:
        # Asked again where a loaded machine missed the 0.5 s socket timeout: the partition is made either way
        # (a first try whose reply was lost holds its permit, and the second then finds the key full).
        sem = get_semaphore("search", key=f"user-{n}")
        answered(lambda: sem.acquire(wait=0, auto_renew=False, lease=120))
        assert sem.status().used >= 1

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(take, keys))


def commands_run(server: redis.Redis, action: Callable[[], None]) -> dict[str, int]:
    """Calls per command the server ran while ``action()`` did (the measuring itself left out)."""
    action()  # first, so scripts are loaded and the count is of the steady state
    server.config_resetstat()
    action()
    stats = server.info("commandstats")
    measuring = {"cmdstat_info", "cmdstat_config", "cmdstat_config|resetstat"}
    return {name.removeprefix("cmdstat_"): int(stat["calls"]) for name, stat in stats.items() if name not in measuring}


@pytest.mark.slow
@pytest.mark.django_db
def test_dashboard_and_status_read_the_same_whatever_the_number_of_keys(
    own_server: RedisServer, settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The history samples are taken on the clock (one per 10 s), not per key: making 18,000 keys takes
    # about that long, so a sample's write could fall in one measured read and not the other.
    monkeypatch.setattr(conf, "HISTORY_EVERY_MS", 0)
    settings.SEMAPHORE_METRICS_FLUSH_INTERVAL = None  # the metrics' background writes are not the reads counted
    # Commands counted, not timed: a loaded machine (the suite beside `make bench`) missed the 0.5 s socket
    # timeout of the server's other tests in a status read, which counts nothing when asked again.
    settings.SEMAPHORE_CONNECTION = f"{own_server.url}?socket_timeout=10&socket_connect_timeout=10"
    client = Client()
    client.force_login(User.objects.create_superuser("root", password="pw"))
    server = redis.Redis.from_url(own_server.url)

    def poll() -> None:
        assert client.get(reverse("admin:django_semaphore_semaphoredashboard_json")).status_code == 200

    def status() -> None:
        call_command("semaphore_status", "--json", stdout=StringIO())

    poll()  # what a first read does once (a SET, in a loaded run) is no part of a read's cost per key
    status()
    measured = []
    for keys in (range(0, 2_000), range(2_000, 20_000)):
        make_partitions(keys)
        measured.append((commands_run(server, poll), commands_run(server, status)))
    server.close()
    (poll_small, status_small), (poll_large, status_large) = measured
    # The same commands, as many of each, at 2,000 keys and at 20,000 ...
    assert poll_small == poll_large, (poll_small, poll_large)
    assert status_small == status_large, (status_small, status_large)
    # ... and one status script and one EXISTS per key read, for the MAX_PARTITIONS most recent keys
    # (commandstats counts the commands scripts run inside, too).
    declared = len(settings.SEMAPHORES)
    for calls in (poll_large, status_large):
        scripts_run = sum(calls.get(command, 0) for command in ("fcall", "evalsha", "eval"))  # whichever way they run
        assert scripts_run <= overview.MAX_PARTITIONS + declared and calls["exists"] <= overview.MAX_PARTITIONS
    assert get_semaphore("search").partition_count() == 20_000
