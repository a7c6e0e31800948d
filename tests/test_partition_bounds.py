"""Keys a client chooses must not grow Redis, nor the operators' reads, without bound.

A ``header:`` or ``get:`` key makes a new partition for every new value a
client sends. ``max_partitions`` caps what one semaphore keeps (a new key
past it gets the semaphore's ``on_error``, and makes no key in Redis), room
comes back as partitions expire, and the dashboard and ``semaphore_status``
read the same number of entries whether a semaphore has thousands of keys or
tens of thousands: counted here in commands the server ran, not in seconds.
"""

from __future__ import annotations

import asyncio
import time
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
from django_semaphore.core import overview, registry
from django_semaphore.testing import RedisServer

from .support.guards import declare
from .support.refusals import backend_errors

HEADER_URL = "/surface/keyed/header/"  # @semaphore("guarded", key="header:X-Api-Key")
ERROR_OUTCOME = {"allow": "error_allowed", "deny": "error_denied"}


def request_with_key(client: Client, value: str) -> tuple[int, str | None]:
    response = client.get(HEADER_URL, HTTP_X_API_KEY=value, headers={"Accept": "application/json"})
    return response.status_code, response.json().get("outcome") if response.status_code == 200 else None


@pytest.mark.parametrize(("policy", "status"), [("allow", 200), ("deny", 503)])
def test_a_cap_refuses_new_keys_with_the_policy_and_keeps_serving_known_ones(
    client: Client, settings, redis_client: redis.Redis, policy: str, status: int
) -> None:
    declare(settings, guarded={"key": "header:X-Api-Key", "max_partitions": 3, "on_error": policy})
    outcomes.reset()
    assert [request_with_key(client, f"client-{n}") for n in range(3)] == [(200, "acquired")] * 3
    with backend_errors() as errors:
        assert request_with_key(client, "client-3") == (status, "error_allowed" if policy == "allow" else None)
    assert [type(error) for error in errors] == [TooManyPartitions]
    assert request_with_key(client, "client-1") == (200, "acquired")  # a known key is still limited as before
    assert outcomes.counts()["guarded"] == {"acquired": 4, ERROR_OUTCOME[policy]: 1}
    guarded = get_semaphore("guarded")
    assert guarded.partition_count() == 3
    assert sorted(guarded.partitions().values()) == [f"header:x-api-key:client-{n}" for n in range(3)]
    # The refused key cost Redis nothing: no partition key was made for it.
    assert not any(redis_client.exists(key) for key in get_semaphore("guarded", "client-3").keys.common)


def test_room_comes_back_as_soon_as_partitions_expire(settings, monkeypatch: pytest.MonkeyPatch) -> None:
    settings.SEMAPHORE_PARTITION_IDLE = 1.0  # registry entries are forgotten after 2 s; the keys go after 1 s
    monkeypatch.setattr(registry, "SWEEP_EVERY", 0.0)
    declare(settings, guarded={"key": "header:X-Api-Key", "max_partitions": 2})
    for key in ("a", "b"):
        permit = get_semaphore("guarded", key).acquire(auto_renew=False, lease=0.2)
        assert permit is not None
        permit.release()
    with pytest.raises(TooManyPartitions):
        get_semaphore("guarded", "c").acquire(auto_renew=False)
    with pytest.raises(TooManyPartitions):
        asyncio.run(get_semaphore("guarded", "c").aacquire(auto_renew=False))
    # a and b have expired (their keys go 1 s after their 0.2 s leases, and at most a quarter of that
    # later); their registry entries are not yet old enough to be forgotten (2 s).
    time.sleep(1.6)
    permit = asyncio.run(get_semaphore("guarded", "c").aacquire(auto_renew=False))
    assert permit is not None
    assert get_semaphore("guarded").partitions() == {permit.partition: "c"}


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
        assert get_semaphore("search", key=f"user-{n}").acquire(wait=0, auto_renew=False, lease=120) is not None

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


@pytest.mark.django_db
def test_dashboard_and_status_read_the_same_whatever_the_number_of_keys(own_server: RedisServer, settings) -> None:
    client = Client()
    client.force_login(User.objects.create_superuser("root", password="pw"))
    server = redis.Redis.from_url(own_server.url)

    def poll() -> None:
        assert client.get(reverse("admin:django_semaphore_semaphoredashboard_json")).status_code == 200

    def status() -> None:
        call_command("semaphore_status", "--json", stdout=StringIO())

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
        assert calls["fcall"] <= overview.MAX_PARTITIONS + declared and calls["exists"] <= overview.MAX_PARTITIONS
    assert get_semaphore("search").partition_count() == 20_000
