"""The API stacks on a real ASGI server (uvicorn) with real clients: overlapping requests and WebSockets.

One uvicorn process serves tests/support/api_asgi.py: REST framework and
Django Ninja over HTTP, Channels consumers over WebSocket (``websockets``
on both sides). A request that must overlap another waits on a Redis list
the test pushes to; every server is stopped by its pid, also when a test
fails; the kill test kills only the uvicorn it started.
"""

from __future__ import annotations

import asyncio
import http.client
import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
import websockets
from websockets.exceptions import ConnectionClosed

from django_semaphore import get_semaphore
from django_semaphore.core.semaphore import Semaphore

from ..support import api_load
from ..support.api_urls import SEMAPHORES, TOKENS
from ..support.polling import wait_until
from ..support.processes import run_to_the_end, warm
from ..support.uvicorn import ROOT, Uvicorn

pytestmark = pytest.mark.processes


@pytest.fixture
def site_env(redis_server, settings, key_prefix: str, tmp_path: Path) -> dict[str, str]:
    settings.SEMAPHORES = {**settings.SEMAPHORES, **SEMAPHORES}
    return {
        "DJANGO_SETTINGS_MODULE": "tests.support.api_settings",
        "SEMAPHORE_KEY_PREFIX": key_prefix,
        "REDIS_URL": redis_server.url,
        "API_SITE_DB": str(tmp_path / "api.sqlite3"),
    }


@pytest.fixture
def site(site_env: dict[str, str]) -> Iterator[Uvicorn]:
    with Uvicorn("tests.support.api_asgi:application", env=site_env) as server:  # started, and stopped by its pid
        yield server


def user_partition(site: Uvicorn, name: str, semaphore: str = "api") -> Semaphore:
    """The user's partition, found by what the site answers about the user (ids are the site's)."""
    ids = {"alice": 1, "bob": 2}  # made in this order by make_users() in a fresh database
    return get_semaphore(semaphore, f"user:{ids[name]}")


def request(site: Uvicorn, path: str, headers: dict[str, str]) -> tuple[int, dict[str, str], bytes]:
    connection = http.client.HTTPConnection("127.0.0.1", site.port, timeout=60)
    try:
        connection.request("GET", path, headers=headers)
        response = connection.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
    finally:
        connection.close()


class Held:
    """A request kept running on the server (its view waits on a Redis list) until ``release``."""

    def __init__(self, site: Uvicorn, path: str, headers: dict[str, str], redis_url: str) -> None:
        self.listed = f"go:{uuid.uuid4().hex}"
        self.redis = redis.Redis.from_url(redis_url)
        self.answer: tuple[int, dict[str, str], bytes] | None = None
        separator = "&" if "?" in path else "?"
        self.thread = threading.Thread(
            target=self._run, args=(site, f"{path}{separator}hold={self.listed}", headers), daemon=True
        )
        self.thread.start()

    def _run(self, site: Uvicorn, path: str, headers: dict[str, str]) -> None:
        self.answer = request(site, path, headers)

    def release(self) -> tuple[int, dict[str, str], bytes]:
        self.redis.rpush(self.listed, "go")
        self.thread.join(timeout=60)
        self.redis.close()
        assert self.answer is not None
        return self.answer


DRF = {"alice": {"Authorization": f"Token {TOKENS['alice']}"}, "bob": {"Authorization": f"Token {TOKENS['bob']}"}}
NINJA = {"alice": {"Authorization": f"Bearer {TOKENS['alice']}"}, "bob": {"Authorization": f"Bearer {TOKENS['bob']}"}}


@pytest.mark.parametrize(
    ("path", "auth", "detail"),
    [
        ("/drf/items/", DRF, "Too many requests like this one are running at once. Expected available in"),
        ("/ninja/items", NINJA, "Too many requests like this one are running at once."),
        ("/ninja/async-items", NINJA, "Too many requests like this one are running at once."),
        ("/ninja/routed/items", NINJA, "Too many requests like this one are running at once."),
    ],
)
def test_two_overlapping_requests_of_one_user_the_second_refused_another_users_served(
    site: Uvicorn, redis_server, path: str, auth: dict[str, dict[str, str]], detail: str
) -> None:
    first = Held(site, path, auth["alice"], redis_server.url)
    try:
        wait_until(lambda: user_partition(site, "alice").status().used == 1)
        status, headers, body = request(site, path, auth["alice"])
        assert status == 503
        assert json.loads(body)["detail"].startswith(detail)
        assert 1 <= int(headers["retry-after"]) <= 30
        other = Held(site, path, auth["bob"], redis_server.url)
        wait_until(lambda: user_partition(site, "bob").status().used == 1)
        assert other.release()[0] == 200
    finally:
        answer = first.release()
    assert answer[0] == 200 and json.loads(answer[2])["user"] == "alice"
    wait_until(lambda: user_partition(site, "alice").status().used == 0)


def test_never_over_a_users_limit_under_contention_from_several_processes(
    site_env: dict[str, str], redis_server, redis_client: redis.Redis, key_prefix: str
) -> None:
    """Two server processes, three client processes of four threads: one token user's overlapping requests of
    REST framework and Ninja (sync and async) views, weights 1 and 2, a wait in line of 0.2 s, under one per-user
    limit of 2. Each view counts itself inside (by its weight) in a referee of its own: never above the limit."""
    # The database and the users first: two workers starting together would both make them.
    environment = {**os.environ, **site_env}
    subprocess.run([sys.executable, "-c", "import tests.support.api_asgi"], cwd=ROOT, env=environment, check=True)
    with Uvicorn("tests.support.api_asgi:application", env={**site_env, "API_SITE_READY": "1"}, workers=2) as server:
        clients = [
            warm.Process(target=api_load.overlap, args=(server.port, redis_server.url, key_prefix, 4.0, seed))
            for seed in range(3)
        ]
        run_to_the_end(clients)
        assert all(client.exitcode == 0 for client in clients)
        for name in ("alice", "bob"):
            wait_until(lambda name=name: user_partition(server, name, "counted").status().used == 0)
    answers = {key.decode(): int(count) for key, count in redis_client.hgetall(key_prefix + "answers").items()}
    counts = {
        name: [int(redis_client.get(f"{key_prefix}referee:{pk}:{what}") or 0) for what in ("entries", "over")]
        for name, pk in (("alice", 1), ("bob", 2))
    }
    print(f"answers {answers}; entries and over per user {counts}")
    assert set(answers) <= {"200:none", "429:retry-after"}, answers  # no 500, no refusal without Retry-After
    assert answers.get("429:retry-after", 0) > 0, "the clients never overlapped"
    assert counts["alice"][0] > 20 and counts["bob"][0] > 0, "the clients barely ran"
    assert counts["alice"][1] == 0 and counts["bob"][1] == 0


def test_the_decorator_route_passes_in_silence_which_the_check_names(site: Uvicorn, redis_server) -> None:
    """As issue 32 found it: the decorator on dispatch sees no token user; W009 names it (tests/faces)."""
    first = Held(site, "/drf/decorated/", DRF["alice"], redis_server.url)
    try:
        time.sleep(0.5)  # time for it to have taken a permit, had it taken one
        assert user_partition(site, "alice").status().used == 0
        assert request(site, "/drf/decorated/", DRF["alice"])[0] == 200
    finally:
        assert first.release()[0] == 200


# -- Channels -------------------------------------------------------------------------------------------


def session_cookie(site: Uvicorn, name: str) -> str:
    connection = http.client.HTTPConnection("127.0.0.1", site.port, timeout=30)
    try:
        connection.request("GET", f"/login/{name}/")
        response = connection.getresponse()
        response.read()
        cookie = next(v for k, v in response.getheaders() if k.lower() == "set-cookie" and "sessionid=" in v)
    finally:
        connection.close()
    return cookie.split(";", 1)[0]


async def connect(site: Uvicorn, path: str, cookie: str) -> Any:
    return await websockets.connect(site.ws_url + path, additional_headers={"Cookie": cookie}, open_timeout=30)


async def refused_code(site: Uvicorn, path: str, cookie: str) -> int | None:
    """The close code of a socket the server refuses (it closes right after the handshake)."""
    socket = await connect(site, path, cookie)
    with pytest.raises(ConnectionClosed):
        await asyncio.wait_for(socket.recv(), timeout=30)
    return socket.close_code


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_a_users_sockets_beyond_the_limit_are_closed_with_1013(site: Uvicorn, kind: str) -> None:
    alice, bob = session_cookie(site, "alice"), session_cookie(site, "bob")
    path = f"/ws/{kind}/"

    async def scenario() -> None:
        sockets = [await connect(site, path, alice) for _ in range(2)]  # the limit: 2 per user
        for socket in sockets:
            assert await socket.recv() == "hello alice"
        assert await refused_code(site, path, alice) == 1013
        other = await connect(site, path, bob)
        assert await other.recv() == "hello bob"
        await other.close()
        # One socket closed by its client gives its permit back: the next one connects.
        await sockets[0].close()
        await asyncio.to_thread(wait_until, lambda: user_partition(site, "alice", "sockets").status().used == 1)
        again = await connect(site, path, alice)
        assert await again.recv() == "hello alice"
        # A consumer that raises gives its permit back too.
        await again.send("boom")
        with pytest.raises(ConnectionClosed):
            await asyncio.wait_for(again.recv(), timeout=30)
        await asyncio.to_thread(wait_until, lambda: user_partition(site, "alice", "sockets").status().used == 1)
        await sockets[1].close()

    asyncio.run(scenario())
    wait_until(lambda: user_partition(site, "alice", "sockets").status().used == 0)


def test_a_socket_that_never_opens_gives_its_permit_back(site: Uvicorn) -> None:
    """Its connect() raises (the handshake is refused, HTTP 500); its client gives up before the accept; its
    client leaves while it waits in line, and a permit comes to it afterwards: each permit comes back."""
    alice = session_cookie(site, "alice")
    partition = user_partition(site, "alice", "sockets")

    async def given_up(path: str) -> None:
        with pytest.raises((TimeoutError, websockets.exceptions.InvalidStatus)):
            await websockets.connect(site.ws_url + path, additional_headers={"Cookie": alice}, open_timeout=0.3)

    async def scenario() -> None:
        await given_up("/ws/failing/")
        await given_up("/ws/slow/")  # its permit taken, its accept a second later, to a client gone
        await asyncio.to_thread(wait_until, lambda: partition.status().used == 0)
        held = [await connect(site, "/ws/async/", alice) for _ in range(2)]
        for socket in held:
            await socket.recv()
        await given_up("/ws/waiting/")  # in line behind the two
        await asyncio.to_thread(wait_until, lambda: partition.status().waiting == 1)
        await held[0].close()  # the permit goes to the one in line, whose client is gone: back at once
        await asyncio.to_thread(wait_until, lambda: partition.status().waiting == 0)
        await asyncio.to_thread(wait_until, lambda: partition.status().used == 1)
        assert [holder.metadata["path"] for holder in partition.status().holders] == ["/ws/async/"]
        await held[1].close()

    asyncio.run(scenario())
    wait_until(lambda: partition.status().used == 0)


def test_an_open_socket_keeps_its_permit_for_many_leases(site: Uvicorn) -> None:
    """The socket semaphore's lease is 2 s; held 7 s (three and a half leases), its permits stay renewed."""
    alice = session_cookie(site, "alice")

    async def scenario() -> None:
        sockets = [await connect(site, "/ws/async/", alice) for _ in range(2)]
        for socket in sockets:
            await socket.recv()
        await asyncio.sleep(7)
        assert await refused_code(site, "/ws/async/", alice) == 1013
        await sockets[0].send("still here")
        assert await sockets[0].recv() == "still here"
        for socket in sockets:
            await socket.close()

    asyncio.run(scenario())


def test_a_sockets_own_cap_closes_it_with_1013(site: Uvicorn) -> None:
    """``max_hold`` 3 s: the socket is closed with 1013 when its permit reaches it, and the permit is back."""
    alice = session_cookie(site, "alice")

    async def scenario() -> float:
        socket = await connect(site, "/ws/capped/", alice)
        await socket.recv()
        opened = time.monotonic()
        with pytest.raises(ConnectionClosed):
            await asyncio.wait_for(socket.recv(), timeout=30)
        assert socket.close_code == 1013
        return time.monotonic() - opened

    lasted = asyncio.run(scenario())
    assert 2 <= lasted <= 3 + 2 + 1  # the cap, plus at most a lease for the renewal thread to see it end
    wait_until(lambda: user_partition(site, "alice", "capped_sockets").status().used == 0)


def test_a_killed_server_returns_its_sockets_permits_within_the_lease(site: Uvicorn) -> None:
    alice = session_cookie(site, "alice")
    lease = SEMAPHORES["sockets"]["lease"]
    partition = user_partition(site, "alice", "sockets")

    async def open_two() -> list[Any]:
        sockets = [await connect(site, "/ws/async/", alice) for _ in range(2)]
        for socket in sockets:
            await socket.recv()
        return sockets

    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(open_two())
        status = partition.status()
        assert status.used == 2
        assert all(h.lease_deadline_ms - status.now_ms <= lease * 1000 for h in status.holders)
        assert site.process is not None
        os.kill(site.process.pid, signal.SIGKILL)  # the uvicorn this test started, by its pid
        killed = time.monotonic()
        wait_until(lambda: partition.status().used == 0, timeout=lease + 10)
        back = time.monotonic() - killed
    finally:
        loop.close()
    print(f"a killed server's 2 socket permits were back {back:.1f} s after the kill (lease {lease} s)")
    assert back <= lease + 0.5
