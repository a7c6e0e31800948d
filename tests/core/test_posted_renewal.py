"""A permit handed over on a claim is renewed at once by a post: sent, its answer read later (Permit.post_renewal)."""

from __future__ import annotations

import select
import socket
import threading
import time
from typing import Any

import pytest
import redis

from django_semaphore import Permit, Semaphore, signals
from django_semaphore.core import bounded
from django_semaphore.core.conf import SemaphoreConfig
from django_semaphore.core.renewal import renewer
from django_semaphore.testing import RedisServer

from ..support import modes
from ..support.handoffs import in_line_behind_a_holder
from ..support.polling import wait_until


def make(name: str, limit: int = 1, **options: object) -> Semaphore:
    return Semaphore(SemaphoreConfig.from_options(name, {"limit": limit, **options}))


def handed(name: str, lease: float = 60) -> tuple[Semaphore, Permit, list[str]]:
    """A permit handed to a waiter in a thread, and its ``on_lost`` calls."""
    scene = in_line_behind_a_holder(name, lease)
    return scene.semaphore, scene.hand_over(), scene.lost


def renewals_counted(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    calls: list[float] = []
    renew = Permit.renew

    def counted(permit: Permit, lease: float | None = None) -> bool:
        calls.append(time.monotonic())
        return renew(permit, lease)

    monkeypatch.setattr(Permit, "renew", counted)
    return calls


def test_a_permit_tracked_again_after_its_release_is_dropped_not_renewed_in_a_loop(monkeypatch) -> None:
    """Whatever tracks a permit after its release (a post's lost answer read during it), the thread lets it go."""
    permit = make("let-go", lease=3).acquire()
    assert permit is not None
    permit.release()
    calls = renewals_counted(monkeypatch)
    renewer.track(permit, at=time.monotonic())
    time.sleep(0.3)
    assert len(calls) <= 1
    assert permit not in renewer._due


def test_a_release_in_progress_is_not_tracked_again_by_a_posts_lost_answer() -> None:
    permit = make("releasing", lease=60).acquire()
    assert permit is not None
    permit._start_release()  # as release() does, before it sends
    permit._renew_soon()  # what a post's lost answer, read by that release, asks for
    assert permit not in renewer._due
    permit.release()


def test_a_release_that_meets_the_posts_lost_answer_leaves_nothing_to_renew(monkeypatch) -> None:
    """The post's answer is lost with its connection (a reset): the release works, and nothing is renewed after."""
    post = bounded.Connections.post

    def post_and_lose_the_answer(connections: Any, command: tuple[Any, ...], posted: Any) -> None:
        post(connections, command, posted)
        (connection,) = [c for c, posts in list(connections._posted.items()) if posted in posts]
        assert select.select([connection._sock], [], [], 2)[0]  # the renewal ran: its answer is there
        connection._sock.recv(65536)
        connection._sock.shutdown(socket.SHUT_RDWR)

    monkeypatch.setattr(bounded.Connections, "post", post_and_lose_the_answer)
    sem, permit, _ = handed("dropped", lease=3)
    monkeypatch.undo()
    calls = renewals_counted(monkeypatch)
    assert permit.release() is True
    assert sem.status().used == 0
    time.sleep(1.5)  # past its next renewal, were it still tracked (a third of 3 s)
    assert permit not in renewer._due
    assert len(calls) <= 1


def test_a_lost_claim_read_by_another_thread_at_once_is_not_renewed(monkeypatch) -> None:
    """The waiter stalls before its post; another thread reads the post's answer at once, before anyone else."""
    post = Permit.post_renewal

    def late_and_read_elsewhere(permit: Permit) -> bool:
        time.sleep(1.1)  # a GC pause, say: the claim (one waiter TTL) ends first
        posted = post(permit)
        bounded.collect_posted()  # another request's thread, or the background, reads the answer now
        return posted

    monkeypatch.setattr(Permit, "post_renewal", late_and_read_elsewhere)
    _, permit, lost = handed("late")
    monkeypatch.undo()
    calls = renewals_counted(monkeypatch)
    time.sleep(0.5)
    # Renewed by the thread meanwhile (it was tracked before the post), or found lost and not renewed again.
    assert permit.is_held() if permit.held else (lost == ["lost"] and permit not in renewer._due)
    assert len(calls) <= 1
    permit.release()


def test_a_post_the_server_never_ran_is_renewed_before_the_claim_ends(own_server: RedisServer, monkeypatch) -> None:
    """The connection carrying the post is killed before Redis runs it: the thread renews the claim in time."""
    first = make("never-ran", lease=60).acquire()
    assert first is not None
    first.release()
    post = bounded.Connections.post
    admin = redis.Redis.from_url(own_server.url)

    def killed(connections: Any, command: tuple[Any, ...], posted: Any) -> None:
        admin.execute_command("CLIENT", "PAUSE", 5000, "WRITE")  # the post waits, unrun
        post(connections, command, posted)
        time.sleep(0.05)
        for client in admin.client_list():
            if client.get("cmd") in ("fcall", "evalsha"):
                admin.execute_command("CLIENT", "KILL", "ID", client["id"])
        admin.execute_command("CLIENT", "UNPAUSE")

    monkeypatch.setattr(bounded.Connections, "post", killed)
    sem, permit, lost = handed("never-ran")
    monkeypatch.undo()
    try:
        time.sleep(1.5)  # past the claim of 1 s
        status = sem.status()
        assert lost == [] and permit.is_held()
        assert status.holders[0].lease_deadline_ms - status.now_ms > 30_000
    finally:
        permit.release()
        admin.close()


def test_hand_offs_in_a_tight_loop_stay_within_the_limit_while_scripts_are_flushed(
    way: modes.Way, redis_server: RedisServer, settings
) -> None:
    """Posted renewals racing their permits' releases, and lost libraries, never put a holder over the limit."""
    settings.SEMAPHORE_CONNECTION = way.url(redis_server.url)
    name, limit = f"tight-{way}", 2
    sem = make(name, limit=limit, lease=60)
    first = sem.acquire()
    assert first is not None and first.renew()  # with EVALSHA, a renewal is posted once its script is known
    first.release()
    stop = threading.Event()
    problems: list[str] = []
    lost: list[Any] = []
    not_held: list[bool] = []
    entries = [0]

    def on_lost(sender: Any, **kwargs: Any) -> None:
        lost.append(kwargs)

    def on_released(sender: Any, was_held: bool, **kwargs: Any) -> None:
        if not was_held:
            not_held.append(was_held)

    def enter_and_leave() -> None:
        semaphore = make(name, limit=limit, lease=60)
        while not stop.is_set():
            permit = semaphore.acquire(wait=5)
            if permit is None:
                problems.append("refused")
                continue
            entries[0] += 1
            permit.release()

    def watch() -> None:
        while not stop.is_set():
            status = sem.status()
            if status.used > limit or len(status.holders) > limit:
                problems.append(f"over the limit: used {status.used}, {len(status.holders)} holders")
            time.sleep(0.002)

    def flush() -> None:
        with redis.Redis.from_url(redis_server.url) as admin:
            while not stop.is_set():
                admin.script_flush()
                if way.name == "functions":
                    admin.function_flush()
                time.sleep(0.02)

    signals.semaphore_lost.connect(on_lost)
    signals.semaphore_released.connect(on_released)
    threads = [threading.Thread(target=enter_and_leave) for _ in range(6)]
    threads += [threading.Thread(target=watch), threading.Thread(target=flush)]
    try:
        for thread in threads:
            thread.start()
        time.sleep(2)
    finally:
        stop.set()
        for thread in threads:
            thread.join(15)
        signals.semaphore_lost.disconnect(on_lost)
        signals.semaphore_released.disconnect(on_released)
    bounded.collect_posted()
    assert entries[0] > 100
    assert problems == [] and lost == [] and not_held == []
    wait_until(lambda: sem.status().used == 0, timeout=5)
