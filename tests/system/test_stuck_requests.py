"""How long a stuck request holds its permit, per worker type: the bounds docs/install.md gives, measured.

A request stuck in its view (waiting on a slow query, a partner that never
answers) keeps its permit renewed while it runs. What ends it is up to the
server:

- gunicorn's **sync** worker is killed at ``timeout``: gunicorn looks at its
  workers about once a second and sends SIGABRT, which ends the view there
  and then, so the permit comes back at once; a worker that signal cannot
  reach (stuck in a C call) is SIGKILLed a second later, and its permit comes
  back one lease after its last renewal.
- **gthread**, **gevent** and **ASGI** (uvicorn) keep their worker alive
  (its main loop or event loop goes on telling gunicorn it lives), so
  ``timeout`` never fires for a stuck request: the permit comes back at
  ``SEMAPHORE_WEB_MAX_HOLD``, while the request runs on (and answers 200).
- Under ASGI an **async view** is also cancelled when its client goes away
  (Django 5.0+), and its permit comes back at once; a thread of gthread runs
  on.

Every time is read on the Redis server's clock: from the holder's grant to
the last status read that saw it held (``at_least``) and the first that saw
it gone (``at_most``). A loaded machine may space two reads a second or more
apart; when the last read that saw the permit held showed its lease ending at
its max_hold, which no renewal can pass (the server caps it), the permit was
back by then, and ``at_most`` is that end if it came first.
"""

from __future__ import annotations

import http.client
import threading
import time
from dataclasses import dataclass

import pytest

from django_semaphore import get_semaphore

from ..support.gunicorn import Gunicorn, Uvicorn, _WebServer
from ..support.polling import wait_until

pytestmark = pytest.mark.processes  # starts gunicorn and uvicorn, which kill or keep their stuck workers

# gunicorn's --timeout, SEMAPHORE_WEB_LEASE and SEMAPHORE_WEB_MAX_HOLD of the site, and how long its view is stuck.
TIMEOUT, LEASE, MAX_HOLD, STUCK_FOR = 2.0, 2.0, 7.0, 7.5
# gunicorn's arbiter looks at its workers' heartbeats about once a second.
ARBITER = 1.0
# What a loaded machine adds to a bound: a late look of the arbiter, the time between two status reads.
SLACK = 1.0
SETTINGS = "tests.support.stuck_settings"


@dataclass(frozen=True)
class Held:
    """How long the stuck request's permit was held (s, server clock), and what its client got."""

    at_least: float
    at_most: float
    answer: int | str


def held(site: _WebServer, path: str, key_prefix: str, give_up_after: float | None = None) -> Held:
    """Send a request to ``path``, follow its permit until it is back (its client leaves after ``give_up_after``)."""
    stuck = get_semaphore("stuck")
    answers: list[int | str] = []

    def ask() -> None:
        connection = http.client.HTTPConnection("127.0.0.1", site.port, timeout=give_up_after or 60)
        try:
            connection.request("GET", path)
            response = connection.getresponse()
            response.read()
            answers.append(response.status)
        except (OSError, http.client.HTTPException) as error:
            answers.append(type(error).__name__)
        finally:
            connection.close()

    with site:
        client = threading.Thread(target=ask)
        client.start()
        deadline = time.monotonic() + 30
        while (status := stuck.status()).used == 0:
            assert time.monotonic() < deadline, "the request never took its permit"
            time.sleep(0.02)
        granted, seen_held, lease_ends = (
            status.holders[0].acquired_at_ms,
            status.now_ms,
            status.holders[0].lease_deadline_ms,
        )
        deadline = time.monotonic() + MAX_HOLD + 30
        while (status := stuck.status()).used > 0:
            assert time.monotonic() < deadline, "the permit never came back"
            seen_held, lease_ends = status.now_ms, status.holders[0].lease_deadline_ms
            time.sleep(0.05)
        client.join(STUCK_FOR + 30)
    back_by = status.now_ms
    if lease_ends >= granted + MAX_HOLD * 1000:  # its last lease ran to its max_hold: no renewal went further
        back_by = min(back_by, lease_ends)
    result = Held((seen_held - granted) / 1000, (back_by - granted) / 1000, answers[0])
    print(
        f"{site.name} {path}: permit held {result.at_least:.2f}-{result.at_most:.2f} s; the client got {result.answer}"
    )
    return result


@pytest.fixture
def env(settings, key_prefix: str, redis_server) -> dict[str, str]:
    settings.SEMAPHORES = {**settings.SEMAPHORES, "stuck": {"limit": 4}}  # as the site declares it
    return {
        "REDIS_URL": redis_server.url,
        "SEMAPHORE_KEY_PREFIX": key_prefix,
        "STUCK_LEASE": str(LEASE),
        "STUCK_MAX_HOLD": str(MAX_HOLD),
        "STUCK_FOR": str(STUCK_FOR),
    }


def gunicorn(env: dict[str, str], **options: object) -> Gunicorn:
    # --preload: the workers fork with Django loaded, so a worker's boot never meets the short timeout.
    return Gunicorn(SETTINGS, env=env, timeout=TIMEOUT, preload=True, **options)  # type: ignore[arg-type]


def test_a_sync_worker_stuck_in_its_view_is_killed_at_the_timeout_and_gives_its_permit_back_then(
    env: dict[str, str], key_prefix: str
) -> None:
    result = held(gunicorn(env, threads=1), "/stuck/", key_prefix)
    assert result.at_most <= TIMEOUT + ARBITER + SLACK  # SIGABRT ends the view, and the guard gives the permit back
    assert result.answer != 200


def test_a_sync_worker_that_signal_cannot_reach_is_killed_and_its_permit_is_back_one_lease_later(
    env: dict[str, str], key_prefix: str
) -> None:
    result = held(gunicorn(env, threads=1), "/stuck-deaf/", key_prefix)
    # SIGABRT waits; the next look sends SIGKILL; the last renewal's lease runs out.
    assert result.at_most <= TIMEOUT + 2 * ARBITER + LEASE + SLACK
    assert result.at_most < MAX_HOLD and result.answer != 200


@pytest.mark.parametrize("worker", ["gthread", "gevent"])
def test_threads_and_greenlets_never_meet_the_timeout_a_stuck_request_holds_its_permit_for_max_hold(
    env: dict[str, str], key_prefix: str, worker: str
) -> None:
    if worker == "gevent":
        pytest.importorskip("gevent")  # the bench extra's
    options = {"threads": 4} if worker == "gthread" else {"threads": 1, "worker_class": "gevent"}
    result = held(gunicorn(env, **options), "/stuck/", key_prefix)
    assert result.at_least >= MAX_HOLD - SLACK and result.at_most <= MAX_HOLD + SLACK
    assert result.answer == 200  # the worker was never killed: the request ran on, past its permit


@pytest.mark.parametrize("path", ["/stuck-async/", "/stuck/"])
def test_under_asgi_a_stuck_request_holds_its_permit_for_max_hold(
    env: dict[str, str], key_prefix: str, path: str
) -> None:
    result = held(Uvicorn(SETTINGS, env=env), path, key_prefix)
    assert result.at_least >= MAX_HOLD - SLACK and result.at_most <= MAX_HOLD + SLACK
    assert result.answer == 200


def test_under_asgi_an_async_view_whose_client_left_gives_its_permit_back_at_once(
    env: dict[str, str], key_prefix: str
) -> None:
    result = held(Uvicorn(SETTINGS, env=env), "/stuck-async/", key_prefix, give_up_after=1.0)
    assert result.at_most <= 1.0 + SLACK  # Django cancels the view when its client disconnects


def test_a_thread_of_gthread_whose_client_left_runs_on_and_holds_its_permit_for_max_hold(
    env: dict[str, str], key_prefix: str
) -> None:
    result = held(gunicorn(env, threads=4), "/stuck/", key_prefix, give_up_after=1.0)
    assert result.at_least >= MAX_HOLD - SLACK and result.at_most <= MAX_HOLD + SLACK


def test_under_gevent_with_preload_guarded_requests_answer_and_give_their_permits_back(
    env: dict[str, str], key_prefix: str
) -> None:
    """gunicorn --preload loads the app, and with it the background thread's lock, before its gevent worker
    patches threading: that lock was the C RLock, which cannot tell two greenlets of one thread apart, and
    every guarded request answered 500 (RuntimeError: cannot release un-acquired lock) and kept its permit
    until max_hold."""
    pytest.importorskip("gevent")
    # A lease and a hold cap longer than the test: a permit is back only if it was given back.
    quick = {**env, "STUCK_FOR": "0.2", "STUCK_LEASE": "60", "STUCK_MAX_HOLD": "120"}
    site = Gunicorn(SETTINGS, env=quick, threads=1, worker_class="gevent", preload=True)
    answers: list[int] = []

    def ask() -> None:
        connection = http.client.HTTPConnection("127.0.0.1", site.port, timeout=30)
        try:
            connection.request("GET", "/stuck/")
            answers.append(connection.getresponse().status)
        finally:
            connection.close()

    with site:
        for _ in range(2):  # four at once, twice: the first permits start the thread, the next find it
            clients = [threading.Thread(target=ask) for _ in range(4)]
            for client in clients:
                client.start()
            for client in clients:
                client.join(60)
        assert answers == [200] * 8
        wait_until(lambda: get_semaphore("stuck").status().used == 0, timeout=20)  # released after each response
