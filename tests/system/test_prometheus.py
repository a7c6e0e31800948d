"""A real Prometheus scrapes a real gunicorn with two workers under load: what it stores is exact, and
every panel of the Grafana dashboard shipped in the docs finds data in it; a flood of fresh client-chosen
keys leaves a fixed number of series in it, none with a control character.

Each worker counts its own requests (core/tally.py) and writes them to Redis
twice a second; Prometheus scrapes one worker or the other at random, each
answering with the whole site's counts read from Redis. After the load, the
stored series match what the load saw, request for request: admitted +
rejected = requests sent.
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from ..support.gunicorn import Gunicorn
from ..support.metrics_partitions_settings import SEMAPHORE_METRICS_MAX_PARTITIONS
from ..support.metrics_settings import SEMAPHORE_METRICS_TOKEN
from ..support.polling import wait_until
from ..support.prometheus import Prometheus

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "docs" / "grafana" / "django-semaphore.json"
REQUESTS = 400
CONCURRENCY = 24

pytestmark = [
    pytest.mark.processes,
    pytest.mark.skipif(
        not shutil.which("prometheus") and os.environ.get("CI") != "true",
        reason="prometheus is not installed (Debian: apt-get install prometheus)",
    ),
]


def fetch(url: str, headers: dict[str, str] | None = None) -> tuple[int, str]:
    request = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return int(answer.status), answer.read().decode()
    except urllib.error.HTTPError as error:
        error.read()
        return int(error.code), ""


def get(url: str, headers: dict[str, str] | None = None) -> int:
    return fetch(url, headers)[0]


def value(prometheus: Prometheus, expr: str, at: float | None = None) -> float:
    result = prometheus.query(expr, at)
    return sum(float(sample["value"][1]) for sample in result)


def panel_queries() -> list[tuple[str, str]]:
    """(panel title, PromQL) of every target, with Grafana's variables as a dashboard would set them."""
    dashboard = json.loads(DASHBOARD.read_text())
    queries = []
    for panel in dashboard["panels"]:
        for target in panel["targets"]:
            expr = target["expr"].replace("$__rate_interval", "1m").replace("$name", ".+")
            assert "$" not in expr, expr
            queries.append((panel["title"], expr))
    return queries


def test_prometheus_stores_the_whole_sites_counts_exactly_and_every_panel_finds_data(
    redis_server: Any, key_prefix: str
) -> None:
    env = {"REDIS_URL": redis_server.url, "SEMAPHORE_KEY_PREFIX": key_prefix}
    with Gunicorn("tests.support.metrics_settings", env=env, workers=2, threads=8) as site:
        target = site.base_url.removeprefix("http://")
        with Prometheus(target, "/metrics/", SEMAPHORE_METRICS_TOKEN) as prometheus:
            wait_until(prometheus.targets_up, timeout=30)
            with ThreadPoolExecutor(CONCURRENCY) as pool:
                answers = list(pool.map(lambda _: fetch(site.base_url + "/work/"), range(REQUESTS)))
                statuses = Counter(status for status, _body in answers)
                paced = Counter(pool.map(lambda _: get(site.base_url + "/paced/"), range(200)))
                users = [{"X-User": f"user-{n % 7}"} for n in range(50)]
                mine = Counter(pool.map(lambda h: get(site.base_url + "/mine/", h), users))
            assert set(statuses) <= {200, 503} and statuses[503] > 0 and statuses[200] > 0, statuses
            assert set(paced) <= {200, 503} and set(mine) <= {200, 503}
            workers = {body for status, body in answers if status == 200}
            assert len(workers) == 2, workers  # both workers admitted some: each counted its own

            # Each worker writes its counts within SEMAPHORE_METRICS_FLUSH_INTERVAL (0.5 s) of a call and
            # Prometheus scrapes every second: the totals are complete within seconds; 60 s is a bound.

            attempts = 'django_semaphore_acquire_attempts_total{name="load"}'
            wait_until(lambda: value(prometheus, f"max without (instance) ({attempts})") == REQUESTS, timeout=60)
            by_result = {
                sample["metric"]["result"]: float(sample["value"][1])
                for sample in prometheus.query(f"max by (result) ({attempts})")
            }
            assert by_result["acquired"] == statuses[200]
            assert by_result["rejected"] == statuses[503]
            assert by_result["acquired"] + by_result["rejected"] == REQUESTS
            assert by_result["timed_out"] == by_result["cancelled"] == 0 and "error" not in by_result
            holds = 'django_semaphore_permit_hold_duration_seconds_count{name="load", reason="released"}'
            wait_until(lambda: value(prometheus, holds) == statuses[200], timeout=30)
            durations = 'django_semaphore_acquire_duration_seconds_count{name="load"}'
            assert value(prometheus, f"sum(max without (instance) ({durations}))") == REQUESTS
            assert value(prometheus, 'django_semaphore_permit_usage{name="load", state="used"}') == 0
            assert value(prometheus, 'django_semaphore_permit_limit{name="load", mode="static"}') == 3

            # A waiting room's line: ten visitors, two inside whose visits lapse in a second, eight in line.
            launch = [get(site.base_url + "/launch/", {"Accept": "application/json"}) for _ in range(10)]
            assert sorted(launch) == [200] * 2 + [503] * 8, launch

            # Within a minute of the load, as a dashboard open during an incident would ask: each panel draws
            # the last minutes (a range query), and a gauge read at one instant may be gone by then (an adaptive
            # limit's hold time is there while its window has holds; a loaded machine ends the load late).
            for title, expr in panel_queries():
                try:
                    wait_until(partial(prometheus.query_range, expr, 300), timeout=30)
                except AssertionError:
                    raise AssertionError(f"{title!r} found no data: {expr}\n{prometheus.log()}") from None


# What a client puts in its key: retitle the terminal and ring, clear it, CR, NUL, a right-to-left override.
HOSTILE = "\x1b]0;pwned\x07\x1b[2J\r\x00\u202e"
# Scrapes of the flood: each brings a dozen fresh keys and more, so twenty bring many times the partitions kept.
SCRAPES = 20


def test_a_flood_of_fresh_keys_leaves_a_fixed_number_of_series_none_with_a_control_character(
    redis_server: Any, key_prefix: str
) -> None:
    """Clients send a key never seen before with every request, each held 0.3 s, through 20 scrapes and more:
    Prometheus stores at most SEMAPHORE_METRICS_MAX_PARTITIONS key values and "other", all printable."""
    env = {"REDIS_URL": redis_server.url, "SEMAPHORE_KEY_PREFIX": key_prefix}
    with Gunicorn("tests.support.metrics_partitions_settings", env=env, workers=2, threads=8) as site:
        target = site.base_url.removeprefix("http://")
        with Prometheus(target, "/metrics/", SEMAPHORE_METRICS_TOKEN, interval="500ms") as prometheus:
            wait_until(prometheus.targets_up, timeout=30)
            stop = threading.Event()
            sent = itertools.count()

            def flood() -> None:
                while not stop.is_set():
                    get(site.base_url + "/flood/?t=" + quote(f"{HOSTILE}{next(sent)}", safe=""))

            with ThreadPoolExecutor(12) as pool:
                clients = [pool.submit(flood) for _ in range(12)]
                try:
                    deadline = time.monotonic() + 120
                    while value(prometheus, "sum(count_over_time(up[10m]))") < SCRAPES + 5:
                        assert time.monotonic() < deadline, prometheus.log()
                        time.sleep(0.5)
                finally:
                    stop.set()
                for client in clients:
                    client.result()
            keys = next(sent)
            assert keys > 10 * (SEMAPHORE_METRICS_MAX_PARTITIONS + 1)  # the flood brought many keys

            usage = 'django_semaphore_permit_usage{name="flood"}'
            stored = {s["metric"]["key"] for s in prometheus.query(f"count by (key) (count_over_time({usage}[10m]))")}
            assert len(stored) <= SEMAPHORE_METRICS_MAX_PARTITIONS + 1, (keys, sorted(stored))
            assert "other" in stored
            other = 'django_semaphore_permit_usage{name="flood", key="other", state="used"}'
            assert value(prometheus, f"max_over_time({other}[10m])") >= 1  # the flood is there, in "other"
            for label in prometheus.label_values("key"):
                assert label.isprintable(), repr(label)
