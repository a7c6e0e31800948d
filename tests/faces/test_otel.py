"""The metrics as OpenTelemetry instruments (django_semaphore/metrics/otel.py), read with the SDK's
in-memory reader: the meter, each instrument's name, kind, unit and attributes, the values."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import (
    Gauge,
    Histogram,
    InMemoryMetricReader,
    Sum,
)

import django_semaphore
from django_semaphore import get_semaphore
from django_semaphore.core.tally import BOUNDS
from django_semaphore.metrics import otel

from ..support.gunicorn import ROOT


@pytest.fixture
def reader(settings: Any) -> Iterator[InMemoryMetricReader]:
    settings.SEMAPHORES = {
        "reports": {"limit": 2, "lease": 30},
        "search": {"limit": 1, "lease": 30, "key": "user"},
        "partner": {"limit": {"adaptive": {"min": 1, "max": 8, "initial": 3, "target": 0.5}}, "lease": 30},
    }
    memory = InMemoryMetricReader()
    otel.install(MeterProvider(metric_readers=[memory]))
    yield memory
    otel.install(again=True)  # the instruments go back to the global provider's proxies


def collected(reader: InMemoryMetricReader) -> dict[str, tuple[Any, Any, list[Any]]]:
    """instrument name -> (its data, its scope, its points)."""
    data = reader.get_metrics_data()
    found = {}
    for resource in data.resource_metrics:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                found[metric.name] = (metric, scope.scope, list(metric.data.data_points))
    return found


def by(points: list[Any], *keys: str) -> dict[tuple[Any, ...], Any]:
    return {tuple(p.attributes.get(k) for k in keys): p for p in points}


def test_every_instrument_with_its_kind_unit_and_attributes(reader: InMemoryMetricReader) -> None:
    sem = get_semaphore("reports")
    one, two = sem.acquire(wait=0), sem.acquire(wait=0)
    assert one is not None and two is not None
    assert sem.acquire(wait=0) is None
    assert sem.acquire(wait=0.1) is None
    one.release()
    sem.force_release(two.token)
    assert two.renew() is False
    get_semaphore("search", "alice").acquire(wait=0)
    for _ in range(2):  # the first release starts the adaptive rule's window, the second holds in it
        held = get_semaphore("partner").acquire(wait=0)
        assert held is not None
        held.release()

    found = collected(reader)
    _metric, scope, _ = found["django_semaphore.acquire.attempts"]
    assert (scope.name, scope.version) == ("django_semaphore", django_semaphore.__version__)
    kinds = {name: (type(m.data).__name__, m.unit) for name, (m, _s, _p) in found.items()}
    assert kinds == {
        "django_semaphore.permit.usage": ("Sum", "{permit}"),
        "django_semaphore.permit.limit": ("Sum", "{permit}"),
        "django_semaphore.waiter.count": ("Sum", "{waiter}"),
        "django_semaphore.partition.count": ("Sum", "{partition}"),
        "django_semaphore.acquire.attempts": ("Sum", "{attempt}"),
        "django_semaphore.acquire.duration": ("Histogram", "s"),
        "django_semaphore.permit.hold.duration": ("Histogram", "s"),
        "django_semaphore.permit.lost": ("Sum", "{permit}"),
        "django_semaphore.adaptive.hold_time": ("Gauge", "s"),
        "django_semaphore.adaptive.target": ("Gauge", "s"),
    }
    for name in ("django_semaphore.permit.usage", "django_semaphore.permit.limit", "django_semaphore.waiter.count"):
        assert not found[name][0].data.is_monotonic  # up-down counters
    assert found["django_semaphore.acquire.attempts"][0].data.is_monotonic

    attempts = by(
        found["django_semaphore.acquire.attempts"][2], "django_semaphore.name", "django_semaphore.acquire.result"
    )
    assert {k: p.value for k, p in attempts.items()} == {
        ("reports", "acquired"): 2,
        ("reports", "rejected"): 1,
        ("reports", "timed_out"): 1,
        ("search", "acquired"): 1,
        ("partner", "acquired"): 2,
    }
    durations = by(
        found["django_semaphore.acquire.duration"][2], "django_semaphore.name", "django_semaphore.acquire.result"
    )
    assert durations[("reports", "timed_out")].count == 1 and durations[("reports", "timed_out")].sum >= 0.1
    assert tuple(durations[("reports", "acquired")].explicit_bounds) == BOUNDS  # the buckets the endpoint uses
    holds = by(found["django_semaphore.permit.hold.duration"][2], "django_semaphore.release.reason")
    assert set(holds) == {("released",), ("revoked",)}
    lost = found["django_semaphore.permit.lost"][2]
    assert [(p.attributes["django_semaphore.release.reason"], p.value) for p in lost] == [("revoked", 1)]

    usage = by(found["django_semaphore.permit.usage"][2], "django_semaphore.name", "django_semaphore.permit.state")
    assert {k: p.value for k, p in usage.items()} == {
        ("reports", "used"): 0,
        ("reports", "free"): 2,
        ("partner", "used"): 0,
        ("partner", "free"): 3,
    }
    limits = by(found["django_semaphore.permit.limit"][2], "django_semaphore.name", "django_semaphore.limit.mode")
    assert {k: p.value for k, p in limits.items()} == {
        ("reports", "static"): 2,
        ("search", "static"): 1,
        ("partner", "adaptive"): 3,
    }
    assert [p.value for p in found["django_semaphore.partition.count"][2]] == [1]
    assert [p.value for p in found["django_semaphore.adaptive.target"][2]] == [0.5]
    assert 0 <= found["django_semaphore.adaptive.hold_time"][2][0].value < 0.5


def test_after_the_test_the_instruments_are_the_global_providers_again(reader: InMemoryMetricReader) -> None:
    from django_semaphore.core.tally import tally

    assert otel._installed in tally.listeners and len(tally.listeners) == 1
    otel.install(again=True)
    assert len(tally.listeners) == 1 and type(otel._installed.attempts).__name__ == "_ProxyCounter"


def test_errors_dry_runs_and_partitions_carry_their_attributes(reader: InMemoryMetricReader, settings: Any) -> None:
    from django_semaphore.core.tally import tally

    tally.attempt("reports", "error", 0.2, "ConnectionError/allow")
    tally.attempt("reports", "rejected", 0.0, "dry_run")
    settings.SEMAPHORE_METRICS_PARTITIONS = True
    get_semaphore("search", "bob").acquire(wait=0)
    found = collected(reader)
    attempts = found["django_semaphore.acquire.attempts"][2]
    error = next(p for p in attempts if p.attributes["django_semaphore.acquire.result"] == "error")
    assert dict(error.attributes) == {
        "django_semaphore.name": "reports",
        "django_semaphore.acquire.result": "error",
        "error.type": "ConnectionError",
        "django_semaphore.on_error": "allow",
    }
    dry = next(p for p in attempts if p.attributes["django_semaphore.acquire.result"] == "rejected")
    assert dry.attributes["django_semaphore.dry_run"] is True
    # The histogram carries the result only.
    timed = found["django_semaphore.acquire.duration"][2]
    assert all(set(p.attributes) == {"django_semaphore.name", "django_semaphore.acquire.result"} for p in timed)
    keyed = [p for p in found["django_semaphore.permit.usage"][2] if "django_semaphore.key" in p.attributes]
    assert {
        (p.attributes["django_semaphore.key"], p.attributes["django_semaphore.permit.state"], p.value) for p in keyed
    } == {
        ("bob", "used", 1),
        ("bob", "free", 0),
        ("other", "used", 0),  # the partitions read without a place of their own: none here
    }
    assert isinstance(found["django_semaphore.permit.usage"][0].data, Sum)
    assert isinstance(found["django_semaphore.acquire.duration"][0].data, Histogram)
    assert isinstance(found["django_semaphore.adaptive.target"][0].data, Gauge)


GLOBAL_PROVIDER = """
import os, django
os.environ["DJANGO_SETTINGS_MODULE"] = "tests.settings"
django.setup()  # the app is ready: the instruments exist, on the API's proxies
from opentelemetry import metrics
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
reader = InMemoryMetricReader()
metrics.set_meter_provider(MeterProvider(metric_readers=[reader]))  # the site sets its provider later
from django_semaphore import get_semaphore
get_semaphore("reports").acquire(wait=0).release()
names = sorted(m.name for r in reader.get_metrics_data().resource_metrics for s in r.scope_metrics for m in s.metrics)
print(",".join(names))
"""


@pytest.mark.processes
def test_a_provider_the_site_sets_after_start_up_receives_them(redis_server: Any, key_prefix: str) -> None:
    import os

    env = {**os.environ, "REDIS_URL": redis_server.url, "SEMAPHORE_KEY_PREFIX": key_prefix}
    result = subprocess.run(
        [sys.executable, "-c", GLOBAL_PROVIDER],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=60,
        check=True,
    )
    assert {"django_semaphore.acquire.attempts", "django_semaphore.permit.hold.duration"} <= set(
        result.stdout.strip().split(",")
    ), result.stderr
