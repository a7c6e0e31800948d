"""A worker killed outright (gunicorn's timeout, the OOM killer, ``kill -9``) leaves its permits to their leases.

A guarded request's permit is renewed while the request lives, so its lease
only says how long a dead worker's permit stays taken: ``SEMAPHORE_WEB_LEASE``
(10 s) by default. Here a real gunicorn worker (gthread, 4 threads) holds
three permits of a limit-4 semaphore declared with no lease of its own, and
is SIGKILLed: the permits are back within the web lease, not the minute of
``SEMAPHORE_DEFAULT_LEASE``.
"""

from __future__ import annotations

import contextlib
import http.client
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from django_semaphore import Semaphore, get_semaphore
from django_semaphore.testing import free_port, stop_process

from ..support.polling import wait_until
from ..support.server_clock import server_ms

ROOT = Path(__file__).resolve().parents[2]
WEB_LEASE = 10.0  # SEMAPHORE_WEB_LEASE's default, as docs/reference/settings.md documents it


def start_gunicorn(port: int, key_prefix: str) -> subprocess.Popen[bytes]:
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "tests.support.killed_settings", "SEMAPHORE_KEY_PREFIX": key_prefix}
    command = [sys.executable, "-m", "gunicorn", "tests.support.killed_site:application", "--bind", f"127.0.0.1:{port}"]
    command += ["--workers", "1", "--worker-class", "gthread", "--threads", "4", "--timeout", "120"]
    return subprocess.Popen([*command, "--log-level", "warning"], cwd=ROOT, env=env, stdin=subprocess.DEVNULL)


def answering(port: int) -> bool:
    with contextlib.suppress(OSError):
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
        connection.request("GET", "/nowhere/")
        connection.getresponse()
        connection.close()
        return True
    return False


def request_held(port: int) -> None:
    """A request that holds its permit until the worker serving it dies."""
    with contextlib.suppress(OSError, http.client.HTTPException):
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        connection.request("GET", "/hold/")
        connection.getresponse()


@pytest.mark.processes
def test_a_killed_gunicorn_workers_permits_are_back_within_the_web_lease(
    redis_server, redis_client, settings, key_prefix: str
) -> None:
    settings.SEMAPHORES = {**settings.SEMAPHORES, "held": {"limit": 4}}
    held = get_semaphore("held")
    port = free_port()
    server = start_gunicorn(port, key_prefix)
    try:
        wait_until(lambda: answering(port), timeout=30)
        for _ in range(3):
            threading.Thread(target=request_held, args=(port,), daemon=True).start()
        wait_until(lambda: held.status().used == 3)
        status = held.status()
        (worker,) = {holder.metadata["pid"] for holder in status.holders}
        # Each lease ends at most the web lease after its last renewal.
        assert all(h.lease_deadline_ms - status.now_ms <= WEB_LEASE * 1000 for h in status.holders), status.holders
        killed_ms = server_ms(redis_client)
        os.kill(worker, signal.SIGKILL)  # a process of our own gunicorn's, by its pid
        back_ms = permits_back_ms(held, WEB_LEASE + 30)
    finally:
        stop_process(server)
    back = (back_ms - killed_ms) / 1000
    print(f"the killed worker's 3 permits were back {back:.1f} s after the kill (web lease {WEB_LEASE} s)")
    assert back <= WEB_LEASE + 0.5


def permits_back_ms(held: Semaphore, within: float) -> int:
    """When the dead worker's permits were all back, on the server's clock.

    The first status that finds them gone says it at the latest; a loaded machine may read it a second or
    more late. Once the worker is dead nothing renews them, so the lease ends a status read after the kill
    showed are when they came back, if sooner.
    """
    deadline = time.monotonic() + within
    ends: int | None = None
    while (status := held.status()).used > 0:
        assert time.monotonic() < deadline, "the permits never came back"
        ends = max(holder.lease_deadline_ms for holder in status.holders)
        time.sleep(0.01)
    return min(status.now_ms, ends) if ends is not None else status.now_ms
