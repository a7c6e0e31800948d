"""A waiting room's people in the metrics: the room family, on /metrics/ and through OpenTelemetry alike.

The review found operators seeing polls, not people: Grafana's "Turned away"
and the dashboard's "rejected" counted the polls of people waiting (1,705
"rejections" stood for 0 people turned away). Now a room's in-line polls are
no attempts at all, a real refusal is, and the room family says who is in
line and inside, how fast the line moves, the longest wait shown, since when
the room is full, the time in line and inside, and the places abandoned and
refused.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from django.test import Client
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from django_semaphore import get_semaphore
from django_semaphore.core import visits
from django_semaphore.core.tally import tally
from django_semaphore.metrics import otel

from .test_metrics_endpoint import TOKEN, samples, scrape


@pytest.fixture(autouse=True)
def room(settings: Any) -> None:
    settings.SEMAPHORES = {"sale": {"limit": 1, "lease": 30, "waiting_room": {"refresh": 2, "client_places": 3}}}
    settings.SEMAPHORE_METRICS_TOKEN = TOKEN
    settings.ROOT_URLCONF = "tests.support.metrics_room_urls"
    sem = get_semaphore("sale")
    for visitor in ("a", "b", "c"):
        visits.visit(sem, visitor)
    time.sleep(0.05)
    visits.end(sem, "a")  # one visit ended (b is let in): a time inside, a time in line
    for _ in range(5):
        visits.visit(sem, "c")  # c in line, asking again: polls, no refusals


def test_the_endpoint_writes_the_room_family_and_counts_no_poll_as_a_refusal() -> None:
    clients = [Client(REMOTE_ADDR="203.0.113.9") for _ in range(4)]
    assert [c.get("/sale/", HTTP_ACCEPT="application/json").status_code for c in clients] == [503, 503, 503, 429]
    tally.flush()
    text = scrape().content.decode()
    assert samples(text, "django_semaphore_room_visitors") == {
        (("name", "sale"), ("state", "inside")): 1.0,
        (("name", "sale"), ("state", "waiting")): 4.0,
    }
    assert samples(text, "django_semaphore_room_turned_away_total") == {(("name", "sale"),): 1.0}
    assert samples(text, "django_semaphore_room_abandoned_total") == {(("name", "sale"),): 0.0}
    assert samples(text, "django_semaphore_room_admission_rate")[(("name", "sale"),)] > 0
    assert samples(text, "django_semaphore_room_wait_estimate_seconds")[(("name", "sale"),)] > 0
    assert samples(text, "django_semaphore_room_full_duration_seconds")[(("name", "sale"),)] >= 0
    times = samples(text, "django_semaphore_room_time_seconds")
    assert {(dict(k)["stage"], dict(k)["quantile"]) for k in times} == {
        ("line", "0.5"),
        ("line", "0.95"),
        ("inside", "0.5"),
        ("inside", "0.95"),
    }
    attempts = samples(text, "django_semaphore_acquire_attempts_total")
    assert attempts[(("name", "sale"), ("result", "rejected"))] == 1.0  # the one refusal, no poll
    assert attempts[(("name", "sale"), ("result", "acquired"))] == 1.0  # a walked in (b was let in by a release)


@pytest.fixture
def reader() -> Iterator[InMemoryMetricReader]:
    memory = InMemoryMetricReader()
    otel.install(MeterProvider(metric_readers=[memory]))
    yield memory
    otel.install(again=True)


def test_opentelemetry_observes_the_same_family(reader: InMemoryMetricReader) -> None:
    found = {}
    for resource in reader.get_metrics_data().resource_metrics:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                found[metric.name] = list(metric.data.data_points)
    visitors = {p.attributes["django_semaphore.room.state"]: p.value for p in found["django_semaphore.room.visitors"]}
    assert visitors == {"inside": 1, "waiting": 1}
    assert found["django_semaphore.room.turned_away"][0].value == 0
    assert found["django_semaphore.room.admission.rate"][0].value > 0
    stages = {p.attributes["django_semaphore.room.stage"] for p in found["django_semaphore.room.time"]}
    assert stages == {"line", "inside"}
