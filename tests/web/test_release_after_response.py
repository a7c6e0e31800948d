"""A guarded request gives its permit back after its response is sent, and loses nothing doing so.

The release is sent once the server has sent the response and closed it
(``response.close()``, which WSGI servers, ASGI servers and the test client
all call), not before the client has its answer; on the sync path it is sent
without waiting for Redis's answer, which the process's next call (or the
background thread) reads. What must still hold: the permit is held until
then (a stream until it ends), a response nobody closes still gives it back,
a worker's next request finds its last release done, a worker killed between
its response and the release leaves it to the request's lease, a release
whose reply is lost, or which met a lost library, is retried, and under load
from several worker processes the count stays exact.
"""

from __future__ import annotations

import asyncio
import gc
import http.client
import multiprocessing
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from django.test import Client, RequestFactory, override_settings

from django_semaphore import get_semaphore
from django_semaphore.core import bounded, scripts
from django_semaphore.core.renewal import renewer
from django_semaphore.core.tally import BUCKETS, read_totals, tally
from django_semaphore.middleware import SemaphoreMiddleware
from django_semaphore.signals import semaphore_backend_error, semaphore_released
from django_semaphore.testing import RedisServer

from ..support import modes, views
from ..support.after_response_site import INSIDE, OVER
from ..support.guards import declare
from ..support.gunicorn import Gunicorn
from ..support.polling import wait_until
from ..support.recorded import recorded

# Closing a response sends request_finished, whose receiver looks at the database connection.
pytestmark = pytest.mark.django_db


def used(name: str = "guarded") -> int:
    return get_semaphore(name).status().used


def test_the_permit_is_held_until_the_response_is_closed(settings) -> None:
    declare(settings)
    response = views.guarded(RequestFactory().get("/surface/guarded/"))
    assert response.status_code == 200
    assert used() == 1  # the view has returned; the server has not sent the response yet
    response.close()
    assert used() == 0
    response.close()  # closed twice (a server and a wrapper): given back once
    assert used() == 0


def test_a_middleware_rule_holds_its_permit_until_the_response_is_closed(settings) -> None:
    declare(settings)
    settings.SEMAPHORE_MIDDLEWARE_RULES = [{"semaphore": "guarded", "path": r"^/surface/plain/$"}]
    middleware = SemaphoreMiddleware(lambda request: views.plain(request))
    response = middleware(RequestFactory().get("/surface/plain/"))
    assert response.status_code == 200 and used() == 1
    response.close()
    assert used() == 0


def test_the_test_client_closes_the_response_so_the_permit_is_back(client: Client, settings) -> None:
    declare(settings)
    assert client.get("/surface/guarded/").json()["used"] == 1
    assert used() == 0


def test_a_response_nobody_closes_gives_its_permit_back_when_dropped(settings) -> None:
    declare(settings)
    response = views.guarded(RequestFactory().get("/surface/guarded/"))
    assert used() == 1
    del response
    gc.collect()
    wait_until(lambda: used() == 0, timeout=5)
    wait_until(lambda: renewer.pending() == 0, timeout=5)


def test_a_response_a_later_middleware_replaces_gives_its_permit_back(client: Client, settings) -> None:
    declare(settings)
    settings.MIDDLEWARE = ["django.middleware.http.ConditionalGetMiddleware", *settings.MIDDLEWARE]
    etag = client.get("/surface/guarded/")["ETag"]
    assert used() == 0
    # A 304 made from the view's response: the server closes the 304, never the response that held the permit.
    # With the cyclic garbage collector off: the dropped response must not wait for it to give the permit back.
    gc.disable()
    try:
        assert client.get("/surface/guarded/", HTTP_IF_NONE_MATCH=etag).status_code == 304
        wait_until(lambda: used() == 0, timeout=5)
    finally:
        gc.enable()


def test_a_stream_still_holds_its_permit_until_it_ends(client: Client, settings) -> None:
    declare(settings)
    response = client.get("/surface/streaming/")
    assert used() == 1
    assert b"".join(response.streaming_content) == b"one two three"  # type: ignore[attr-defined]
    response.close()
    assert used() == 0


def test_the_async_path_gives_the_permit_back_too(async_client, settings) -> None:
    declare(settings)

    async def get() -> Any:
        return await async_client.get("/surface/guarded-async/")

    assert asyncio.run(get()).json()["used"] == 1
    assert used() == 0


class Ends:
    """A listener of the counts (core/tally.py, as the OpenTelemetry metrics hear them): the permits that ended."""

    def __init__(self) -> None:
        self.permits: list[tuple[str, str]] = []

    def attempt(self, name: str, result: str, seconds: float, detail: str) -> None:
        pass

    def permit(self, name: str, reason: str, seconds: float, weight: int) -> None:
        self.permits.append((name, reason))


@pytest.fixture
def ends() -> Iterator[Ends]:
    # Only this test's permits: the releases an earlier test of this process posted are heard first (one that
    # landed here counted a fourth "guarded" release in a full run).
    bounded.collect_posted()
    wait_until(lambda: renewer.pending() == 0, timeout=10)
    listener = Ends()
    tally.listeners.append(listener)
    try:
        yield listener
    finally:
        tally.listeners.remove(listener)


@pytest.mark.processes
def test_a_closed_response_does_not_wait_for_redis_to_answer_its_release(
    settings, own_server: RedisServer, ends: Ends, caplog
) -> None:
    declare(settings)
    assert used() == 0  # the way this server runs scripts is known now: a release can go alone
    response = views.guarded(RequestFactory().get("/surface/guarded/"))
    own_server.freeze()  # it answers nothing now
    try:
        with caplog.at_level("WARNING"):
            response.close()  # a release that waited for its answer would time out here, an outage
        assert "releasing a permit" not in caplog.text and renewer.pending() == 0
        assert ends.permits == []  # what the answer says is not known yet
    finally:
        own_server.thaw()
    assert used() == 0  # this call reads the release's answer first, on the same connection
    assert ends.permits == [("guarded", "released")]


@pytest.mark.processes
def test_a_slow_receiver_of_the_answer_does_not_eat_into_the_next_calls_time(settings, own_server: RedisServer) -> None:
    """A receiver of ``semaphore_released`` slower than the socket timeout (0.5 s here) runs after the call that
    read the answer, not inside its time: the next request is guarded as usual, no outage."""
    declare(settings)
    assert used() == 0  # the way this server runs scripts is known now: a release can go alone

    def slow(**kwargs: Any) -> None:
        time.sleep(0.6)

    views.guarded(RequestFactory().get("/surface/guarded/")).close()
    semaphore_released.connect(slow)
    try:
        with recorded(semaphore_backend_error) as errors:
            response = views.guarded(RequestFactory().get("/surface/guarded/"))
            response.close()
    finally:
        semaphore_released.disconnect(slow)
    assert response.status_code == 200 and errors == []


def test_a_slow_receiver_of_the_answer_never_holds_up_the_renewals(settings) -> None:
    """Nobody calls after the release: the background reads its answer, on a thread of its own, so a slow
    receiver does not stop the renewal thread from keeping another permit's lease alive."""
    declare(settings)
    assert used() == 0
    held = get_semaphore("sitewide").acquire(lease=1.5)  # renewed in the background every half second
    assert held is not None

    def slow(**kwargs: Any) -> None:
        time.sleep(3)

    semaphore_released.connect(slow)
    try:
        views.guarded(RequestFactory().get("/surface/guarded/")).close()
        time.sleep(4)
        assert held.held and held.is_held(), held
    finally:
        semaphore_released.disconnect(slow)
        held.release()


def test_with_no_next_call_the_background_thread_reads_the_answer(settings, client: Client, ends: Ends) -> None:
    declare(settings)
    assert client.get("/surface/guarded/").status_code == 200
    wait_until(lambda: ends.permits == [("guarded", "released")], timeout=5)


def test_a_workers_next_request_finds_its_last_release_done(settings, client: Client) -> None:
    """Limit 1: each request's acquire goes on the connection its predecessor's release went on, after it."""
    declare(settings)
    assert [client.get("/surface/guarded/").status_code for _ in range(100)] == [200] * 100


def test_a_release_that_meets_a_lost_library_or_script_cache_runs_again_before_the_next_call(
    way: modes.Way, redis_server: RedisServer, redis_client: redis.Redis, settings, client: Client, ends: Ends
) -> None:
    """Limit 1: the worker's next request, at once, finds the permit back (what a failover or restart leaves)."""
    settings.SEMAPHORE_CONNECTION = way.url(redis_server.url)
    declare(settings)
    assert client.get("/surface/guarded/").status_code == 200  # the way is decided: releases go alone now
    response = views.guarded(RequestFactory().get("/surface/guarded/"))
    if way.name == "functions":
        redis_client.function_delete(scripts.library()[0])
    else:
        redis_client.script_flush()
    response.close()
    assert client.get("/surface/guarded/").status_code == 200
    assert renewer.pending() == 0 and used() == 0
    assert ends.permits == [("guarded", "released")] * 3


def lose_the_scripts(way: modes.Way, redis_client: redis.Redis) -> None:
    """What a restart, a failover or a flush leaves: the server no longer has the operations' Lua."""
    if way.name == "functions":
        redis_client.function_delete(scripts.library()[0])
    else:
        redis_client.script_flush()


def test_after_a_lost_library_an_async_views_request_finds_the_permit_back(
    way: modes.Way, redis_server: RedisServer, redis_client: redis.Redis, settings
) -> None:
    """The next request is an async view's: its acquire, on the asyncio client, reads no posted answer; refused
    while a release of the process's had not run, it asks once more when that release has."""
    settings.SEMAPHORE_CONNECTION = way.url(redis_server.url)
    declare(settings)
    views.guarded(RequestFactory().get("/surface/guarded/")).close()  # the way is decided: releases go alone
    assert used() == 0
    response = views.guarded(RequestFactory().get("/surface/guarded/"))
    lose_the_scripts(way, redis_client)
    response.close()  # sent; its answer will say it did not run
    again = asyncio.run(views.guarded_async(RequestFactory().get("/surface/guarded-async/")))
    assert again.status_code == 200


def test_a_release_run_again_on_another_thread_does_not_turn_the_next_request_away(
    way: modes.Way, redis_server: RedisServer, redis_client: redis.Redis, settings, monkeypatch
) -> None:
    """The background's reading runs the release again while the worker's next request asks on another
    connection: refused before that run ends, the request asks once more after it."""
    settings.SEMAPHORE_CONNECTION = way.url(redis_server.url)
    declare(settings)
    views.guarded(RequestFactory().get("/surface/guarded/")).close()
    assert used() == 0
    running, go_on = threading.Event(), threading.Event()
    kept = bounded._kept

    def slowly_kept(*args: Any) -> None:
        if threading.current_thread() is not threading.main_thread():
            running.set()
            go_on.wait(5)  # the window a FUNCTION LOAD on a busy server opens, widened
        kept(*args)

    monkeypatch.setattr(bounded, "_kept", slowly_kept)
    response = views.guarded(RequestFactory().get("/surface/guarded/"))
    lose_the_scripts(way, redis_client)
    response.close()
    reader = threading.Thread(target=bounded.collect_posted)  # what the background runs
    reader.start()
    assert running.wait(5)
    threading.Timer(0.2, go_on.set).start()
    try:
        again = views.guarded(RequestFactory().get("/surface/guarded/"))
        assert again.status_code == 200
        again.close()
    finally:
        go_on.set()
        reader.join(10)


def test_threads_racing_on_the_connections_each_read_their_own_answers(settings, ends: Ends) -> None:
    """Eight threads post and take at once, with the background's reading racing them: each permit ends once."""
    declare(settings, guarded={"limit": 3})
    assert used() == 0
    errors: list[BaseException] = []
    served: list[int] = []
    deadline = time.monotonic() + 3

    def serve() -> None:
        try:
            while time.monotonic() < deadline:
                response = views.guarded(RequestFactory().get("/surface/guarded/"))
                if response.status_code == 200:
                    served.append(1)
                response.close()
                bounded.collect_posted()
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=serve) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    bounded.collect_posted()
    assert errors == [] and renewer.pending() == 0 and used() == 0
    assert ends.permits == [("guarded", "released")] * len(served)


EXITING_WORKER = """
import sys

import django

django.setup()
from django.http import HttpResponse
from django.test import RequestFactory

from django_semaphore.decorators import semaphore

view = semaphore("single")(lambda request: HttpResponse(b"ok"))
for _ in range(3):
    response = view(RequestFactory().get("/"))
    assert response.status_code == 200
    response.close()
"""


@pytest.mark.processes
def test_a_process_that_exits_counts_its_last_release(redis_server: RedisServer, key_prefix: str) -> None:
    """A worker's graceful exit (gunicorn's max_requests, a reload) reads the answers it left unread, then counts."""
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "tests.settings", "REDIS_URL": redis_server.url}
    env["SEMAPHORE_KEY_PREFIX"] = key_prefix
    subprocess.run([sys.executable, "-c", EXITING_WORKER], env=env, check=True, timeout=60, stdin=subprocess.DEVNULL)
    totals = read_totals(redis.Redis.from_url(redis_server.url), ["single"])["single"]
    assert sum(totals.holds["released"][:BUCKETS]) == 3, totals.holds


def _first_call(answer: Any) -> None:
    try:
        permit = get_semaphore("reports").acquire(wait=0, auto_renew=False)
        answer.send("ok" if permit is not None and permit.release() else "refused")
    except BaseException as error:
        answer.send(repr(error))


@pytest.mark.processes
def test_a_child_forked_while_answers_are_read_can_call_redis(settings) -> None:
    """The background's reading takes the connections' lock: a fork at that moment must not leave it taken."""
    assert get_semaphore("reports").status().used == 0
    stop = threading.Event()

    def reading() -> None:
        while not stop.is_set():
            bounded.collect_posted()

    reader = threading.Thread(target=reading, daemon=True)
    reader.start()
    fork = multiprocessing.get_context("fork")
    answers = []
    try:
        for _ in range(20):
            ours, theirs = fork.Pipe()
            child = fork.Process(target=_first_call, args=(theirs,))
            child.start()
            answers.append(ours.recv() if ours.poll(10) else "no answer")
            child.join(5)
            if child.is_alive():
                child.kill()  # our own child, by its pid
                child.join(5)
    finally:
        stop.set()
        reader.join(5)
    assert answers == ["ok"] * 20


class LosingReplies(redis.connection.Connection):
    """A connection that loses the reply of the next release it sends, after Redis ran it."""

    lose_next_release = False

    def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        sent = b"".join(command) if isinstance(command, list) else bytes(command)
        self._losing = type(self).lose_next_release and b"release" in sent
        super().send_packed_command(command, check_health)

    def read_response(self, *args: Any, **kwargs: Any) -> Any:
        reply = super().read_response(*args, **kwargs)
        if getattr(self, "_losing", False):
            type(self).lose_next_release = self._losing = False
            self.disconnect()
            raise redis.exceptions.ConnectionError("the release's reply was lost (test)")
        return reply


def test_a_release_whose_reply_is_lost_is_retried_and_the_count_stays_exact(
    redis_server, settings, client: Client
) -> None:
    losing = redis.Redis(
        connection_pool=redis.ConnectionPool.from_url(redis_server.url, connection_class=LosingReplies),
        retry=redis.retry.Retry(redis.backoff.NoBackoff(), 0),
    )
    settings.SEMAPHORE_CONNECTION = lambda: losing
    declare(settings, guarded={"limit": 2})
    other = get_semaphore("guarded").acquire(auto_renew=False)
    assert other is not None
    LosingReplies.lose_next_release = True
    assert client.get("/surface/guarded/").status_code == 200
    bounded.collect_posted()  # the release was sent without waiting for its reply: read it now
    assert not LosingReplies.lose_next_release  # the release ran, and its reply was lost
    wait_until(lambda: renewer.pending() == 0, timeout=5)  # retried (with its fence: only that grant)
    status = get_semaphore("guarded").status()
    assert status.used == 1 and [holder.token for holder in status.holders] == [other.token]
    other.release()
    assert used() == 0


def _get(port: int, path: str) -> int:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        connection.request("GET", path)
        response = connection.getresponse()
        response.read()
        return response.status
    finally:
        connection.close()


@pytest.mark.processes
def test_under_load_from_several_workers_the_count_stays_exact(redis_server, key_prefix: str) -> None:
    site = Gunicorn(
        "tests.support.after_response_settings", env={"SEMAPHORE_KEY_PREFIX": key_prefix}, workers=3, threads=1
    )
    statuses: list[int] = []
    with site.start("/counted/"):
        port = site.port
        # 4 s of load, and on until 50 requests were served: a loaded machine (the suite beside `make bench`)
        # served 33 in the 4 s. At most a minute.
        deadline, last = time.monotonic() + 4, time.monotonic() + 60

        def load(path: str) -> None:
            while time.monotonic() < last and (time.monotonic() < deadline or statuses.count(200) <= 50):
                statuses.append(_get(port, path))

        threads = [threading.Thread(target=load, args=(path,)) for path in ("/counted/", "/ruled/") * 4]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
    checker = redis.Redis.from_url(redis_server.url)
    for name in ("counted", "ruled"):
        assert int(checker.get(f"{key_prefix}{OVER}:{name}") or 0) == 0
        assert int(checker.get(f"{key_prefix}{INSIDE}:{name}") or 0) == 0
    assert statuses.count(200) > 50 and set(statuses) <= {200, 503}
    with override_settings(SEMAPHORES={"counted": {"limit": 2}, "ruled": {"limit": 2}}):
        for name in ("counted", "ruled"):
            status = get_semaphore(name).status()
            assert status.used == 0 and status.holder_count == 0, status


@pytest.mark.processes
def test_a_worker_killed_between_its_response_and_the_release_leaves_the_permit_to_the_lease(
    redis_server, key_prefix: str
) -> None:
    site = Gunicorn(
        "tests.support.after_response_settings", env={"SEMAPHORE_KEY_PREFIX": key_prefix}, workers=1, threads=4
    )
    with site.start("/counted/"), override_settings(SEMAPHORES={"slow-close": {"limit": 4}}):
        assert _get(site.port, "/slow-close/") == 200  # the whole response came; its close has not ended
        held = get_semaphore("slow-close")
        wait_until(lambda: held.status().used == 1, timeout=5)
        (worker,) = {holder.metadata["pid"] for holder in held.status().holders}
        os.kill(worker, signal.SIGKILL)  # a process of our own gunicorn's, by its pid
        killed_at = time.monotonic()
        wait_until(lambda: held.status().used == 0, timeout=10)
        back = time.monotonic() - killed_at
    assert back <= 2 + 0.5  # SEMAPHORE_WEB_LEASE of that site
