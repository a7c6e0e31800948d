"""Keyed semaphores' partitions in the metrics (``SEMAPHORE_METRICS_PARTITIONS``), from real requests.

A partition's key is whatever the client sent (a header, a query parameter),
so this is tested here through the endpoint and the OpenTelemetry
instruments alike: a key full of terminal escapes reaches a label only
escaped, as the dashboard shows it (issue 30, item 9).
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import quote

import pytest
from django.test import Client
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from prometheus_client.parser import text_string_to_metric_families

from django_semaphore.core.safe_text import for_terminal
from django_semaphore.metrics import otel, reading

from ..support.guards import declare

TOKEN = "a-scraper-token-of-32-characters!"
# Retitle the window and ring, clear the screen, CR, NUL, the 8-bit CSI, DEL, a right-to-left override,
# an isolate, a zero-width space, a line separator, a newline and a quote, and a backslash.
EVIL = '\x1b]0;pwned\x07\x1b[2J\r\x00\x9b31m\x7f\u202eevil\u2066\u200b\u2028\n"\\x1b'


@pytest.fixture(autouse=True)
def keyed(settings: Any) -> None:
    declare(settings, guarded={"key": "header:X-Api-Key", "limit": 2, "max_partitions": 10_000})
    settings.SEMAPHORE_METRICS_TOKEN = TOKEN
    settings.SEMAPHORE_METRICS_PARTITIONS = True


def scrape() -> str:
    response = Client().get("/metrics/", headers={"Authorization": f"Bearer {TOKEN}"})
    assert response.status_code == 200
    return str(response.content.decode())


def key_labels(text: str) -> set[str]:
    return {
        sample.labels["key"]
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if "key" in sample.labels
    }


@contextmanager
def holding(headers: list[str] = (), tenants: list[str] = ()) -> Iterator[None]:  # type: ignore[assignment]
    """Requests keyed by each header value and each ``tenant`` parameter, their permits held until the end."""
    client = Client()
    responses = [client.get("/surface/held-open/x", HTTP_X_API_KEY=value) for value in headers]
    responses += [client.get("/surface/tenant-held-open/?tenant=" + quote(value, safe="")) for value in tenants]
    try:
        assert [r.status_code for r in responses] == [200] * len(responses)
        yield
    finally:
        for response in responses:
            b"".join(response.streaming_content)  # read to the end; the test client closes it: the permit goes back


def assert_only_printable(values: set[str]) -> None:
    for value in values:
        assert value.isprintable(), repr(value)


# -- item 9: what a client writes into a key reaches a label only escaped --------------------------


def test_hostile_keys_reach_the_exposition_only_escaped_as_the_dashboard_shows_them() -> None:
    with holding(headers=[EVIL + "h"], tenants=[EVIL + "g"]):
        text = scrape()
    # Every line of the exposition prints: no ESC, BEL, CR, NUL, C1, DEL or bidi character reaches the scraper.
    for line in text.split("\n"):
        assert line.isprintable(), repr(line)
    keys = key_labels(text)
    assert_only_printable(keys)
    assert {for_terminal(f"header:x-api-key:{EVIL}h"), for_terminal(f"get:tenant:{EVIL}g")} <= keys


@pytest.fixture
def collector(monkeypatch: pytest.MonkeyPatch) -> Iterator[InMemoryMetricReader]:
    """The instruments on an SDK's in-memory reader, reading Redis at every collection (no cache)."""
    monkeypatch.setattr(otel, "Cached", functools.partial(reading.Cached, fresh=0.0))
    memory = InMemoryMetricReader()
    otel.install(MeterProvider(metric_readers=[memory]))
    yield memory
    monkeypatch.undo()
    otel.install(again=True)


def collected_keys(memory: InMemoryMetricReader) -> set[str]:
    data = memory.get_metrics_data()
    return {
        str(point.attributes["django_semaphore.key"])
        for resource in data.resource_metrics
        for scope in resource.scope_metrics
        for metric in scope.metrics
        for point in metric.data.data_points
        if "django_semaphore.key" in point.attributes
    }


def test_hostile_keys_reach_the_opentelemetry_attributes_only_escaped(collector: InMemoryMetricReader) -> None:
    with holding(headers=[EVIL + "h"], tenants=[EVIL + "g"]):
        keys = collected_keys(collector)
    assert_only_printable(keys)
    assert {for_terminal(f"header:x-api-key:{EVIL}h"), for_terminal(f"get:tenant:{EVIL}g")} <= keys
