"""The asyncio clients live as long as their event loop: under WSGI, one request (Django runs each
async view in a loop of its own), and their connections are closed with it, not left to the garbage
collector."""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass, field

import pytest
import redis
import redis.asyncio
from django.test import Client

from ..support.guards import declare


@dataclass
class Made:
    """Every asyncio client the app built, kept referenced so only an explicit close can disconnect it."""

    url: str
    name: str = field(default_factory=lambda: f"probe-{uuid.uuid4().hex[:8]}")
    clients: list[redis.asyncio.Redis] = field(default_factory=list)

    def factory(self) -> redis.asyncio.Redis:
        client = redis.asyncio.Redis.from_url(self.url, client_name=self.name, socket_timeout=2)
        self.clients.append(client)
        return client

    def connected(self) -> int:
        with redis.Redis.from_url(self.url) as admin:
            return sum(1 for entry in admin.client_list() if entry.get("name") == self.name)


@pytest.fixture
def made(settings, redis_server) -> Made:
    declare(settings)
    made = Made(redis_server.url)
    settings.SEMAPHORE_ASYNC_CONNECTION = made.factory
    return made


def test_async_views_under_wsgi_close_their_connections(client: Client, made: Made) -> None:
    for _ in range(5):
        assert client.get("/surface/guarded-async/").status_code == 200
    assert len(made.clients) == 5  # one loop per request, so one client each
    assert made.connected() == 0


def test_a_long_lived_loop_keeps_one_client_until_it_shuts_down(made: Made) -> None:
    from django_semaphore import get_semaphore

    async def scenario() -> int:
        for _ in range(5):
            async with get_semaphore("guarded"):
                pass
        return made.connected()

    assert asyncio.run(scenario()) >= 1  # open while the loop runs
    assert len(made.clients) == 1
    assert made.connected() == 0
