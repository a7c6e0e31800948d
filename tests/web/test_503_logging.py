"""A semaphore's 503s are logged on django.request at SEMAPHORE_503_LOG_LEVEL, not at Django's ERROR."""

from __future__ import annotations

import asyncio
import logging

import pytest
from django.test import AsyncClient, Client

from ..support.guards import declare, hold, with_middleware


@pytest.fixture(autouse=True)
def surface(settings) -> None:
    declare(settings)


def request_records(caplog: pytest.LogCaptureFixture) -> list[tuple[int, str]]:
    return [(record.levelno, record.getMessage()) for record in caplog.records if record.name == "django.request"]


def test_a_full_semaphores_503_is_a_warning_by_default(client: Client, caplog) -> None:
    permit = hold()
    try:
        with caplog.at_level(logging.DEBUG, logger="django.request"):
            assert client.get("/surface/guarded/").status_code == 503
    finally:
        permit.release()
    assert request_records(caplog) == [(logging.WARNING, "Service Unavailable: /surface/guarded/")]
    assert caplog.records[-1].status_code == 503  # Django's own extra, for handlers that filter on it


@pytest.mark.parametrize("level", ["INFO", "debug", "ERROR"])
def test_operators_choose_the_level(client: Client, settings, caplog, level: str) -> None:
    settings.SEMAPHORE_503_LOG_LEVEL = level
    permit = hold()
    try:
        with caplog.at_level(logging.DEBUG, logger="django.request"):
            assert client.get("/surface/guarded/").status_code == 503

            async def scenario() -> None:
                assert (await AsyncClient().get("/surface/guarded-async/")).status_code == 503

            asyncio.run(scenario())
    finally:
        permit.release()
    expected = getattr(logging, level.upper())
    assert [levelno for levelno, _ in request_records(caplog)] == [expected, expected]


def test_the_middlewares_503_is_logged_once_at_the_chosen_level(client: Client, settings, caplog) -> None:
    with_middleware(settings)
    settings.SEMAPHORE_MIDDLEWARE_RULES = [{"semaphore": "guarded", "path": r"^/surface/plain/$"}]
    settings.SEMAPHORE_503_LOG_LEVEL = "INFO"
    permit = hold()
    try:
        with caplog.at_level(logging.DEBUG, logger="django.request"):
            assert client.get("/surface/plain/").status_code == 503
    finally:
        permit.release()
    assert request_records(caplog) == [(logging.INFO, "Service Unavailable: /surface/plain/")]


def test_other_server_errors_keep_djangos_error_level(client: Client, caplog) -> None:
    with caplog.at_level(logging.DEBUG, logger="django.request"), pytest.raises(ValueError):
        client.get("/surface/failing/")
    assert [levelno for levelno, _ in request_records(caplog)] == [logging.ERROR]
