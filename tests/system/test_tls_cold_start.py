"""A site's first requests, all at once, over TLS: none may run unguarded.

A freshly started server has no connection to Redis yet: its first
concurrent requests each open one, and over TLS each opening is a TLS
handshake (and, on the client, an SSL context). Here 16 first requests reach
a freshly started uvicorn (async view) or gunicorn (16 threads) at once,
guarded by a limit of 2, against a fresh ``rediss://`` server with a private
CA and a client certificate, and the timeouts docs/servers.md recommends.
A connection that did not open within its timeout would be an outage to the
guard: the request would run unguarded (``on_error="allow"``, the default),
more than the limit inside. The answer must be 0 unguarded, never more than
2 inside (counted by a referee on the server's plain port).
"""

from __future__ import annotations

import collections
import http.client
import json
import threading
import time
from collections.abc import Iterator

import pytest
import redis

from ..support import tls
from ..support.gunicorn import Gunicorn, Uvicorn, _WebServer
from ..support.tls_site import INSIDE, MOST

pytestmark = pytest.mark.processes  # starts a TLS server, uvicorn and gunicorn of its own

# What docs/servers.md's TLS settings say.
CONNECT_TIMEOUT, SOCKET_TIMEOUT = 0.5, 2.0
CLIENTS, LIMIT = 16, 2


@pytest.fixture(scope="module")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> tls.Certificates:
    return tls.make_certificates(tmp_path_factory.mktemp("tls"))


@pytest.fixture
def site_env(certificates: tls.Certificates, key_prefix: str) -> Iterator[dict[str, str]]:
    """A fresh TLS server (nothing loaded on it yet) and the site's settings pointing at it."""
    server, tls_port = tls.tls_server(tls.required_binary(), certificates)
    try:
        yield {
            "TLS_REDIS_URL": f"rediss://127.0.0.1:{tls_port}/0",
            "TLS_CONNECT_TIMEOUT": str(CONNECT_TIMEOUT),
            "TLS_SOCKET_TIMEOUT": str(SOCKET_TIMEOUT),
            "TLS_CA": str(certificates.ca),
            "TLS_CLIENT_CERT": str(certificates.client_cert),
            "TLS_CLIENT_KEY": str(certificates.client_key),
            "REFEREE_URL": server.url,
            "SEMAPHORE_KEY_PREFIX": key_prefix,
            "COLD_LIMIT": str(LIMIT),
        }
    finally:
        server.close()


def first_requests_at_once(port: int, path: str) -> list[tuple[int, str]]:
    """``CLIENTS`` requests sent at once (each on a connection opened beforehand): status and outcome of each
    (a 503's outcome: "503", the semaphore full)."""
    connections = [http.client.HTTPConnection("127.0.0.1", port, timeout=30) for _ in range(CLIENTS)]
    for connection in connections:
        connection.connect()
    start = threading.Barrier(CLIENTS)
    answers: list[tuple[int, str]] = []

    def ask(connection: http.client.HTTPConnection) -> None:
        start.wait()
        try:
            connection.request("GET", path)
            response = connection.getresponse()
            body = response.read()
            outcome = json.loads(body)["outcome"] if response.status == 200 else str(response.status)
            answers.append((response.status, outcome))
        finally:
            connection.close()

    threads = [threading.Thread(target=ask, args=(connection,)) for connection in connections]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    return answers


def run_cold_start(site: _WebServer, path: str, referee_url: str, key_prefix: str) -> None:
    with site.start("/ready/"):
        started = time.monotonic()
        answers = first_requests_at_once(site.port, path)
        took = time.monotonic() - started
    referee = redis.Redis.from_url(referee_url)
    most = int(referee.get(key_prefix + MOST) or 0)
    outcomes = collections.Counter(outcome for _, outcome in answers)
    print(f"{site.name} {path}: {CLIENTS} first requests at once over TLS in {took:.2f} s: {dict(outcomes)}, "
          f"at most {most} inside (limit {LIMIT})")  # fmt: skip
    assert len(answers) == CLIENTS, answers
    assert outcomes["error_allowed"] == 0, outcomes  # none ran unguarded
    assert most <= LIMIT
    assert int(referee.get(key_prefix + INSIDE) or 0) == 0
    assert outcomes["acquired"] >= LIMIT and set(outcomes) <= {"acquired", "503"}, outcomes


def test_the_first_requests_of_a_fresh_uvicorn_over_tls_are_all_guarded(
    site_env: dict[str, str], key_prefix: str
) -> None:
    site = Uvicorn("tests.support.tls_settings", env=site_env)
    run_cold_start(site, "/cold-async/", site_env["REFEREE_URL"], key_prefix)


def test_the_first_requests_of_a_fresh_threaded_gunicorn_over_tls_are_all_guarded(
    site_env: dict[str, str], key_prefix: str
) -> None:
    site = Gunicorn("tests.support.tls_settings", env=site_env, threads=CLIENTS)
    run_cold_start(site, "/cold/", site_env["REFEREE_URL"], key_prefix)
