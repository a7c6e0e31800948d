"""Request paths and methods in the app's log lines cannot forge records (issue 12, item 5).

The same class of problem as Django's CVE-2025-48432: a percent-encoded
newline in a path turned one log record into two. Each scenario sends a real
request through the test client and reads what the app logged.
"""

from __future__ import annotations

import logging

import pytest
from django.test import Client

from django_semaphore import get_semaphore

from ..support.guards import hold, with_middleware

# Percent-decoded by Django into CR LF, a forged record, an ESC sequence, a line separator and a bidi override.
FORGED = "/x%0d%0aERROR%20django.security%20forged%20entry%1b%5b2J%e2%80%a8%e2%80%aeevil"
FORBIDDEN = ("\r", "\n", "\x1b", "\u2028", "\u202e")


@pytest.fixture(autouse=True)
def surface(settings) -> None:
    with_middleware(settings)


def semaphore_records(caplog: pytest.LogCaptureFixture) -> list[str]:
    messages = [r.getMessage() for r in caplog.records if r.name.startswith("django_semaphore")]
    assert messages, "the scenario logged nothing"
    return messages


def assert_one_line_each(messages: list[str]) -> None:
    for message in messages:
        assert not any(character in message for character in FORBIDDEN), repr(message)
        assert "/x\\r\\nERROR django.security forged entry\\x1b[2J\\u2028\\u202eevil" in message


def test_a_dry_run_rejection_logs_the_path_escaped(client: Client, settings, caplog) -> None:
    settings.SEMAPHORE_MIDDLEWARE_RULES = [{"semaphore": "guarded", "mode": "dry-run"}]
    permit = hold()
    try:
        with caplog.at_level(logging.INFO, logger="django_semaphore"):
            client.get(FORGED)
    finally:
        permit.release()
    assert_one_line_each(semaphore_records(caplog))


def test_a_weight_above_the_limit_in_force_logs_the_path_escaped(client: Client, settings, caplog) -> None:
    settings.SEMAPHORE_MIDDLEWARE_RULES = [{"semaphore": "sitewide", "weight": 3}]
    get_semaphore("sitewide").set_limit(2)
    with caplog.at_level(logging.WARNING, logger="django_semaphore"):
        assert client.get(FORGED).status_code == 503
    assert_one_line_each(semaphore_records(caplog))


def test_an_outage_logs_the_path_escaped(client: Client, settings, caplog) -> None:
    from django_semaphore.testing import free_port

    settings.SEMAPHORE_MIDDLEWARE_RULES = [{"semaphore": "guarded"}]
    settings.SEMAPHORE_CONNECTION = f"redis://127.0.0.1:{free_port()}/0?socket_connect_timeout=0.5"
    with caplog.at_level(logging.WARNING, logger="django_semaphore"):
        assert client.get(FORGED).status_code == 404  # on_error="allow": the request runs
    assert_one_line_each(semaphore_records(caplog))


def test_a_forged_method_is_escaped_too(client: Client, settings, caplog) -> None:
    settings.SEMAPHORE_MIDDLEWARE_RULES = [{"semaphore": "guarded", "mode": "dry-run"}]
    permit = hold()
    try:
        with caplog.at_level(logging.INFO, logger="django_semaphore"):
            client.generic("GET\r\nX", "/surface/plain/")
    finally:
        permit.release()
    (message,) = semaphore_records(caplog)
    assert "\n" not in message and "GET\\r\\nX /surface/plain/" in message
