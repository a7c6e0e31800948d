"""E021 and W008: the metrics face's settings are checked at ``manage.py check`` (metrics/checks.py)."""

from __future__ import annotations

from typing import Any

import pytest

from django_semaphore.metrics.checks import check_metrics_settings


def ids(settings: Any, **values: Any) -> list[str]:
    for name, value in values.items():
        setattr(settings, name, value)
    return [str(message.id) for message in check_metrics_settings()]


def test_the_defaults_and_good_values_pass(settings: Any) -> None:
    assert ids(settings) == []
    good = "a-long-enough-token-for-the-scraper-0123"
    assert ids(settings, SEMAPHORE_METRICS_TOKEN=[good, good + "x"], SEMAPHORE_METRICS_PARTITIONS=True) == []
    assert ids(settings, SEMAPHORE_METRICS_PARTITION_RETIRE=3600.5) == []


@pytest.mark.parametrize(
    "values",
    [
        {"SEMAPHORE_METRICS_TOKEN": ""},
        {"SEMAPHORE_METRICS_TOKEN": 12345},
        {"SEMAPHORE_METRICS_TOKEN": ["a-long-enough-token-for-the-scraper", None]},
        {"SEMAPHORE_METRICS_PARTITIONS": "yes"},
        {"SEMAPHORE_METRICS_MAX_PARTITIONS": 0},
        {"SEMAPHORE_METRICS_MAX_PARTITIONS": True},
        {"SEMAPHORE_METRICS_MAX_PARTITIONS": 10_001},
        {"SEMAPHORE_METRICS_PARTITION_RETIRE": 0},
        {"SEMAPHORE_METRICS_PARTITION_RETIRE": None},
        {"SEMAPHORE_METRICS_PARTITION_RETIRE": "1d"},
        {"SEMAPHORE_METRICS_PARTITION_RETIRE": float("nan")},
        {"SEMAPHORE_METRICS_PARTITION_RETIRE": 10**10},
    ],
)
def test_a_wrong_value_is_e021(settings: Any, values: dict[str, Any]) -> None:
    assert ids(settings, **values) == ["django_semaphore.E021"]


def test_a_short_token_is_w008(settings: Any) -> None:
    assert ids(settings, SEMAPHORE_METRICS_TOKEN="guessable") == ["django_semaphore.W008"]
