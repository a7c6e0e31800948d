"""A release hands its permit straight to the head of the line."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from typing import Any

import pytest
import redis

from django_semaphore import BackendUnavailable, Permit, Semaphore, signals
from django_semaphore.core import bounded
from django_semaphore.core.conf import SemaphoreConfig
from django_semaphore.core.renewal import renewer
from django_semaphore.testing import RedisServer

from ..support import modes, workers
from ..support.handoffs import in_line_behind_a_holder
from ..support.polling import wait_until
from ..support.processes import warm


def make(name: str, limit: int = 1, **options: object) -> Semaphore:
    return Semaphore(SemaphoreConfig.from_options(name, {"limit": limit, **options}))


def renewals_counted(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    calls: list[float] = []
    renew = Permit.renew

    def counted(permit: Permit, lease: float | None = None) -> bool:
        calls.append(time.monotonic())
        return renew(permit, lease)

    monkeypatch.setattr(Permit, "renew", counted)
    return calls


def _scripts_run(client: redis.Redis) -> int:
    """Operations the server ran (a "function not found" answer, followed by a load, does not count)."""
    stats = client.info("commandstats").get("cmdstat_fcall", {})
    return int(stats.get("calls", 0)) - int(stats.get("failed_calls", 0))


def test_the_waiter_holds_the_permit_without_asking_again(own_server: RedisServer, settings) -> None:
    # No heartbeat, backstop or read-timeout wake-up during the test: any
    # script call but the release would be the waiter asking again.
    settings.SEMAPHORE_WAITER_TTL = 30
    settings.SEMAPHORE_CONNECTION = f"{own_server.url}?socket_timeout=30"
    sem = make("handed", lease=1)  # the waiter's lease is within the claim: nothing to renew
    holder = make("handed", lease=60).acquire(auto_renew=False)
    assert holder is not None
    got: list[object] = []
    waiter = threading.Thread(target=lambda: got.append(make("handed", lease=1).acquire(wait=10, auto_renew=False)))
    waiter.start()
    wait_until(lambda: sem.status().waiting == 1)
    with redis.Redis.from_url(own_server.url) as admin:
        admin.config_resetstat()
        holder.release()
        waiter.join(10)
        assert _scripts_run(admin) == 1  # the release alone: the waiter did not run acquire again
    assert got and got[0] is not None and got[0].fence > holder.fence
    assert sem.status().used == 1


def test_a_handed_permit_is_renewed_to_its_full_lease() -> None:
    sem = make("renewed", lease=60)
    holder = sem.acquire()
    assert holder is not None
    got: list[object] = []
    waiter = threading.Thread(target=lambda: got.append(make("renewed", lease=60).acquire(wait=10, auto_renew=False)))
    waiter.start()
    wait_until(lambda: sem.status().waiting == 1)
    holder.release()
    waiter.join(10)
    permit = got[0]
    assert permit is not None
    (status_holder,) = sem.status().holders
    assert status_holder.lease_deadline_ms - sem.status().now_ms > 30_000  # not the 1 s claim
    permit.release()


def test_a_permit_handed_on_a_claim_holds_its_full_lease_when_acquire_returns(monkeypatch) -> None:
    """Renewed by the waiter's own call before it returns, not by the renewal thread after."""
    scene = in_line_behind_a_holder("at-once")
    renewals: list[int] = []
    monkeypatch.setattr(Permit, "renew", lambda *args, **kwargs: renewals.append(1) or True)
    permit = scene.hand_over()
    status = scene.semaphore.status()
    assert status.holders[0].lease_deadline_ms - status.now_ms > 30_000  # not the 1 s claim
    assert permit.expires_at - time.monotonic() > 30
    assert renewals == []
    monkeypatch.undo()
    assert permit.is_held() and scene.lost == []
    permit.release()


def test_a_handed_permit_outlives_a_stall_that_begins_after_the_hand_off(own_server: RedisServer) -> None:
    """A stall longer than what is left of the claim, from a tenth of a second after the hand-off, costs nothing.

    The claim is renewed to the full lease before the waiter's acquire returns, as any permit's lease
    is in force when it returns: not when the renewal thread next looks, which may be inside the stall.
    """
    scene = in_line_behind_a_holder("stall")
    permit = scene.hand_over()
    time.sleep(0.1)
    with redis.Redis.from_url(own_server.url) as admin:
        admin.execute_command("CLIENT", "PAUSE", 1200, "ALL")  # a failover, a slow fork...
    time.sleep(1.2 + 0.5)
    assert scene.lost == [] and permit.is_held()
    permit.release()


def test_a_permit_tracked_again_after_its_release_is_dropped_not_renewed_in_a_loop(monkeypatch) -> None:
    """Whatever tracks a permit after its release, the thread lets it go."""
    permit = make("let-go", lease=3).acquire()
    assert permit is not None
    permit.release()
    calls = renewals_counted(monkeypatch)
    renewer.track(permit, at=time.monotonic())
    time.sleep(0.3)
    assert len(calls) <= 1
    assert permit not in renewer._due


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
            try:
                permit = semaphore.acquire(wait=5)
            except BackendUnavailable:
                # The library gone again at each of the call's rounds: an outage, the call holds nothing.
                continue
            if permit is None:
                problems.append("refused")
                continue
            entries[0] += 1
            # Flushed at every round of the release too, it raises and is retried in the background, as documented.
            with contextlib.suppress(BackendUnavailable):
                permit.release()

    looks = [0]

    def watch() -> None:
        while not stop.is_set():
            try:
                status = sem.status()
            except BackendUnavailable:  # flushed at every round of its call, as the callers' may be: look again
                continue
            looks[0] += 1
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
        # Two seconds, and on to a hundred entries at most 20 s in all (a loaded machine made 98 in two).
        started = time.monotonic()
        while time.monotonic() - started < 2 or (entries[0] <= 100 and time.monotonic() - started < 20):
            time.sleep(0.05)
    finally:
        stop.set()
        for thread in threads:
            thread.join(15)
        signals.semaphore_lost.disconnect(on_lost)
        signals.semaphore_released.disconnect(on_released)
    bounded.collect_posted()
    assert entries[0] > 100 and looks[0] > 0
    assert problems == [] and lost == [] and not_held == []
    wait_until(lambda: sem.status().used == 0, timeout=5)


@pytest.mark.processes
def test_a_permit_handed_to_a_frozen_waiter_comes_back_after_the_claim(key_prefix: str) -> None:
    sem = make("frozen", lease=60)
    holder = sem.acquire()
    assert holder is not None
    waiter = warm.Process(target=workers.hold_forever, args=(key_prefix, "frozen", 1, 60.0, 60.0))
    try:
        waiter.start()
        wait_until(lambda: sem.status().waiting == 1)
        os.kill(waiter.pid, signal.SIGSTOP)  # alive to the line for up to a second, but it will never renew
        holder.release()  # handed to the frozen waiter on a short claim
        assert sem.status().used == 1
        permit = sem.acquire(wait=10)  # the claim (1 s) lapses; the next in line gets the permit
        assert permit is not None
        assert sem.status().counters["expired"] >= 1
        permit.release()
    finally:
        waiter.kill()
        waiter.join(5)
