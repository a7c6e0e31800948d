"""Hand-off: with the semaphore full and one waiter in line, release() called -> the waiter holding.

The waiter is another process; both read CLOCK_MONOTONIC, which on Linux is
one clock for the whole host, so the two readings can be subtracted. The
release grants the permit to the waiter inside its script and pushes the
grant onto the waiter's wake list, so the waiter holds the permit as soon as
its BLPOP returns, often before the release's reply is back: the hand-off is
the release's one round trip and the waking of a process, and it is measured
from the moment release() is called (from its return it is often negative).

The RTT it is counted in is the same kind of round trip: one PING sent after
the same idle pause each hand-off follows (``idle_rtt``), not PINGs back to
back on a hot loop (``ping_rtt_ms``, kept for comparison), which on a shared
machine ran about ten times faster than any call that follows a pause.

Two more hand-offs are timed the same way, in the same run: python-redis-lock's
(its release pushes onto the list its waiter blocks on, which then takes the
lock with one more command), and the floor of any hand-off between two
processes through Redis: a one-line script's LPUSH to a bare BLPOP, with no
library on either side.
"""

from __future__ import annotations

import multiprocessing
import statistics
import time
from collections.abc import Callable
from typing import Any

from .runtime import Bench, now_ns, percentile, ping_rtt, setup_django

# The pause before each hand-off: the waiter gets from joining the line to blocking on its wake list.
PAUSE = 0.003
FLOOR_KEY = "handoff-floor"
LOCK_NAME = "handoff-lock"


def idle_rtt(client: Any, count: int = 200) -> float:
    """Median seconds of one PING sent after the pause each hand-off follows (the RTT a hand-off meets)."""
    client.ping()
    samples = []
    for _ in range(count):
        time.sleep(PAUSE)
        start = now_ns()
        client.ping()
        samples.append((now_ns() - start) / 1e9)
    return statistics.median(samples)


def waiter(conn: Any, samples: int) -> None:
    setup_django()
    from django_semaphore import get_semaphore

    semaphore = get_semaphore("handoff")
    conn.send("ready")
    for _ in range(samples):
        conn.recv()
        # Default settings: a permit handed over on a claim is renewed to its
        # full lease by the background renewer, after the waiter holds it.
        permit = semaphore.acquire(wait=10)
        conn.send(now_ns())
        permit.release()


def bare_waiter(conn: Any, samples: int, url: str) -> None:
    """The floor: a bare BLPOP, its reading time sent back."""
    import redis

    client = redis.Redis.from_url(url)
    client.ping()
    conn.send("ready")
    for _ in range(samples):
        conn.recv()
        client.blpop([FLOOR_KEY], timeout=10)
        conn.send(now_ns())


def lock_waiter(conn: Any, samples: int, url: str) -> None:
    import redis
    import redis_lock

    lock = redis_lock.Lock(redis.Redis.from_url(url), LOCK_NAME, expire=30)
    conn.send("ready")
    for _ in range(samples):
        conn.recv()
        lock.acquire(blocking=True, timeout=10)
        conn.send(now_ns())
        lock.release()


def _started(target: Callable[..., None], *args: Any) -> tuple[Any, Any]:
    """A waiter process and our end of its pipe, once it is ready."""
    context = multiprocessing.get_context("spawn")
    ours, theirs = context.Pipe()
    process = context.Process(target=target, args=(theirs, *args), daemon=True)
    process.start()
    deadline = time.monotonic() + 60
    while not ours.poll(0.2):
        if not process.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("the waiter process did not start")
    ours.recv()
    return process, ours


def _stopped(process: Any) -> None:
    process.join(timeout=10)
    if process.is_alive():
        process.kill()


def _peer_handoffs(bench: Bench, samples: int) -> dict[str, list[float]]:
    """Seconds from the push (the floor) or ``release()`` (python-redis-lock) to the waiter holding."""
    import redis_lock

    push = bench.client.register_script("return redis.call('LPUSH', KEYS[1], ARGV[1])")
    lock = redis_lock.Lock(bench.client, LOCK_NAME, expire=30)
    # Each: its waiter, what comes before the waiter is told to go, the pause (python-redis-lock's waiter
    # asks once before it blocks), and the step the hand-off is timed from.
    peers: dict[str, tuple[Callable[..., None], Callable[[], object], float, Callable[[], object]]] = {
        "floor": (bare_waiter, lambda: None, PAUSE, lambda: push(keys=[FLOOR_KEY], args=["x"])),
        "python_redis_lock": (lock_waiter, lambda: lock.acquire(blocking=True, timeout=10), 2 * PAUSE, lock.release),
    }
    delays: dict[str, list[float]] = {}
    for name, (target, before, pause, hand_off) in peers.items():
        process, conn = _started(target, samples, bench.url)
        delays[name] = []
        try:
            for _ in range(samples):
                before()
                conn.send("go")
                time.sleep(pause)
                start = now_ns()
                hand_off()
                delays[name].append((conn.recv() - start) / 1e9)
        finally:
            _stopped(process)
    return delays


def run(bench: Bench, samples: int) -> dict[str, Any]:
    from django_semaphore import get_semaphore

    semaphore = get_semaphore("handoff")
    loop_rtt = ping_rtt(bench.client)
    rtt = idle_rtt(bench.client)
    process, ours = _started(waiter, samples)
    delays: list[float] = []
    after_return: list[float] = []
    try:
        for _ in range(samples):
            permit = semaphore.acquire(wait=10, auto_renew=False)  # the waiter gives it back each time
            ours.send("go")
            while semaphore.status(max_holders=0).waiting < 1:
                time.sleep(0.001)
            time.sleep(PAUSE)  # let it get from joining the line to blocking on its wake list
            releasing = now_ns()
            permit.release()
            returned = now_ns()
            holding = ours.recv()
            delays.append((holding - releasing) / 1e9)
            after_return.append((holding - returned) / 1e9)
    finally:
        _stopped(process)
    p50, p99 = statistics.median(delays), percentile(delays, 0.99)
    peers = _peer_handoffs(bench, samples)
    floor, lock = statistics.median(peers["floor"]), statistics.median(peers["python_redis_lock"])
    return {
        "handoff_samples": samples,
        "ping_rtt_ms": loop_rtt * 1000,
        "idle_rtt_ms": rtt * 1000,
        "handoff_p50_ms": p50 * 1000,
        "handoff_p99_ms": p99 * 1000,
        "handoff_p50_rtt": p50 / rtt,
        "handoff_p99_rtt": p99 / rtt,
        # Negative when the waiter holds the permit before release() has returned to its caller.
        "handoff_after_return_p50_rtt": statistics.median(after_return) / rtt,
        "handoff_floor_p50_rtt": floor / rtt,
        "handoff_floor_p99_rtt": percentile(peers["floor"], 0.99) / rtt,
        "handoff_python_redis_lock_p50_rtt": lock / rtt,
        # Ours against python-redis-lock's and against the floor: below 1 is faster.
        "handoff_ratio_vs_python_redis_lock": p50 / lock,
        "handoff_ratio_vs_floor": p50 / floor,
    }
