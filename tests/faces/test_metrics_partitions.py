"""Keyed semaphores' partitions in the metrics (``SEMAPHORE_METRICS_PARTITIONS``), from real requests.

A partition's key is whatever the client sent (a header, a query parameter),
so two things are tested here through the endpoint and the OpenTelemetry
instruments alike: a key full of terminal escapes reaches a label only
escaped, as the dashboard shows it (issue 30, item 9); and anonymous clients
sending a fresh key with every request add no series beyond a fixed number,
however many scrapes there are (item 10).
"""

from __future__ import annotations

import functools
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import quote

import pytest
from django.test import Client
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from prometheus_client.parser import text_string_to_metric_families

from django_semaphore import get_semaphore
from django_semaphore.core.safe_text import for_terminal
from django_semaphore.metrics import otel, reading

from ..support.guards import declare

TOKEN = "a-scraper-token-of-32-characters!"
# Retitle the window and ring, clear the screen, CR, NUL, the 8-bit CSI, DEL, a right-to-left override,
# an isolate, a zero-width space, a line separator, a newline and a quote, and a backslash.
EVIL = '\x1b]0;pwned\x07\x1b[2J\r\x00\x9b31m\x7f\u202eevil\u2066\u200b\u2028\n"\\x1b'
PLACES = 5
COUNTERS = ("_total", "_bucket", "_count", "_sum")


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


def usage_by_key(text: str) -> dict[str, float]:
    return {
        sample.labels["key"]: sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == "django_semaphore_permit_usage" and sample.labels.get("state") == "used"
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


# -- item 10: a fixed number of partition series, however many keys clients invent ----------------


def counters(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name.endswith(COUNTERS)
    }


def test_fifty_scrapes_of_fresh_anonymous_keys_see_at_most_places_plus_other(settings: Any) -> None:
    settings.SEMAPHORE_METRICS_MAX_PARTITIONS = PLACES
    seen: set[str] = set()
    before: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for round_ in range(50):
        with holding(headers=[f"anonymous-{round_}-{n}" for n in range(8)]):
            text = scrape()
        keys = key_labels(text)
        seen |= keys
        if round_ == 0:  # the first found in use take the places
            assert len(keys) == PLACES + 1 and "other" in keys
        else:  # later ones are in use now, and counted in "other"
            assert usage_by_key(text)["other"] >= 1
        now = counters(text)
        assert all(now.get(series, 0) >= value for series, value in before.items()), "a counter went back"
        before = now
    assert len(seen) <= PLACES + 1, sorted(seen)


def test_fifty_collections_of_fresh_anonymous_keys_see_at_most_places_plus_other(
    settings: Any, collector: InMemoryMetricReader
) -> None:
    settings.SEMAPHORE_METRICS_MAX_PARTITIONS = PLACES
    seen: set[str] = set()
    for round_ in range(50):
        with holding(tenants=[f"anonymous-{round_}-{n}" for n in range(8)]):
            seen |= collected_keys(collector)
    assert len(seen) <= PLACES + 1, sorted(seen)
    assert "other" in seen


def test_a_partition_keeps_its_series_while_in_use_and_gives_its_place_up_after_the_retire_time(
    settings: Any,
) -> None:
    settings.SEMAPHORE_METRICS_MAX_PARTITIONS = 2
    settings.SEMAPHORE_METRICS_PARTITION_RETIRE = 1
    with holding(headers=["busy"]):
        with holding(headers=["brief"]):
            first = key_labels(scrape())
        assert first == {"header:x-api-key:busy", "header:x-api-key:brief", "other"}
        time.sleep(1.5)  # longer than the retire time: "brief" was found in use by no read since
        with holding(headers=["newcomer", "another"]):
            later = usage_by_key(scrape())
    # "busy" was in use at this read, however long since the last: it keeps its place. "brief" gave its up,
    # to one of the two found in use; the other is counted in "other".
    newcomers = {"header:x-api-key:newcomer", "header:x-api-key:another"}
    assert len(later) == 3 and {"header:x-api-key:busy", "other"} <= set(later)
    assert len(set(later) & newcomers) == 1
    assert later["header:x-api-key:busy"] == 1 and later["other"] == 1


def test_a_key_that_reads_other_does_not_pass_for_the_rest() -> None:
    permit = get_semaphore("guarded", key="other").acquire(wait=0)
    assert permit is not None
    try:
        keys = key_labels(scrape())
    finally:
        permit.release()
    assert "other" in keys and any(key.startswith("other#") for key in keys)
