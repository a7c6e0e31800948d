"""The metrics' places (core/series.py, lua/metric_series.lua): which partitions of a keyed semaphore have a
series of their own. Run in both ways the engine runs its Lua, and by several processes at once: however
many keys come and however the scrapes interleave, no more partitions hold a place than there are places."""

from __future__ import annotations

from typing import Any

import pytest
import redis

from django_semaphore.core import scripts, series
from django_semaphore.core.connection import get_client
from django_semaphore.core.redis_keys import hash_partition

from ..support import modes, workers
from ..support.processes import run_to_the_end, warm
from ..support.server_clock import server_ms

DAY_MS = 86_400_000


@pytest.fixture(autouse=True)
def pointed(settings: Any, redis_server: Any, way: modes.Way, key_prefix: str) -> None:
    settings.SEMAPHORE_CONNECTION = way.url(redis_server.url)


def found_in_use(*keys: str) -> list[tuple[str, str]]:
    return [(hash_partition(key), key) for key in keys]


def place(*keys: str, places: int = 3, retire_ms: int = DAY_MS, name: str = "search") -> list[str]:
    """The keys with a place after a read that found ``keys`` in use, busiest first."""
    reply = scripts.run(get_client(), series.place_call(name, found_in_use(*keys), places, retire_ms))
    placed = series.placed(get_client().hgetall(series.labels_key(name)))
    assert sorted(series.text(p) for p in reply) == sorted(placed)  # the reply and the stored places agree
    return sorted(placed.values())


def test_the_first_found_in_use_take_the_places_and_keep_them() -> None:
    assert place("a", "b", "c", "d") == ["a", "b", "c"]  # in the order given: busiest first
    assert place("d", "e") == ["a", "b", "c"]  # nobody gives a place up for a newcomer
    assert place() == ["a", "b", "c"]  # nor for not being in use at one read


def test_a_place_no_read_found_in_use_for_the_retire_time_goes_to_the_next_found(redis_client: redis.Redis) -> None:
    assert place("a", "b", retire_ms=DAY_MS) == ["a", "b"]
    # Back-date "b": found in use last two days ago, by the server's clock as the script reads it.
    redis_client.zadd(series.series_key("search"), {hash_partition("b"): server_ms(redis_client) - 2 * DAY_MS})
    assert place("a", "c", places=2) == ["a", "c"]
    assert 0 < redis_client.pttl(series.series_key("search")) <= 2 * DAY_MS  # a scrape-less semaphore leaves nothing


def test_a_lowered_setting_keeps_those_found_in_use_most_recently() -> None:
    assert place("a", "b", "c", places=3) == ["a", "b", "c"]
    assert place("c", places=1) == ["c"]


@pytest.mark.parametrize(
    "args",
    [
        [0, DAY_MS],  # no place at all
        [10_001, DAY_MS],
        [3, 0],  # retire at once
        [3, DAY_MS, "lonely-hash"],  # a hash without its key
        [3, DAY_MS, *["h", "k"] * 20_001],  # more than the script will look at
    ],
)
def test_arguments_out_of_range_are_refused_before_anything_is_written(
    args: list[Any], redis_client: redis.Redis
) -> None:
    call = series.place_call("search", [], 3, DAY_MS)
    with pytest.raises(redis.ResponseError, match="django_semaphore"):
        scripts.run(get_client(), type(call)(call.script, call.keys, args))
    assert not redis_client.exists(series.series_key("search"), series.labels_key("search"))


@pytest.mark.processes
def test_readings_at_once_in_several_processes_never_name_more_partitions_than_places(
    redis_server: Any, way: modes.Way, key_prefix: str, redis_client: redis.Redis
) -> None:
    """Six processes take permits under fresh keys and read the metrics as a scrape does, 30 times each;
    every read finds partitions in use that have no place. The keys any reading named: at most the places."""
    places = 5
    processes = [
        warm.Process(
            target=workers.scrape_with_fresh_keys, args=(key_prefix, way.url(redis_server.url), places, 30, seed)
        )
        for seed in range(6)
    ]
    run_to_the_end(processes)
    assert [process.exitcode for process in processes] == [0] * 6
    named = redis_client.smembers(key_prefix + "named")
    assert 1 <= len(named) <= places, sorted(named)
