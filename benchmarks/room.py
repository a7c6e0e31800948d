"""A waiting room's poll at 10 and at 10,000 visitors in line: what it costs the server.

The figure is the server's own: ``INFO commandstats``, microseconds per call
of the room's operation (``FCALL``, or ``EVALSHA`` where the server has no
Functions), reset before each case. A poll is a visitor in line asking again
(the room full, nobody let in), at the back of the line and in its middle.
The 10-visitor case is measured before and after the large one (its median is
the base), so drift during the run shows in neither direction. The test
suite counts the commands one poll runs (tests/core/test_room_scale.py); this
is the time they take.

The burst (``burst``): a hundred thousand places lapse at once, then one
visitor asks. Each of the calls its request takes (common.lua purges a batch
per call) is timed by the server (``SLOWLOG`` with a threshold of 0: every
command, the longest room call reported), while another client PINGs back to
back and records how long each PING waited (the longest, and the 99th
percentile). Targets: no call over 10 ms, no PING over 20 ms, and the
positions of the three visitors kept alive among the lapsed read 1, 2, 3.
"""

from __future__ import annotations

import statistics
import threading
import time
from typing import Any

import redis

from .runtime import Bench, percentile

SMALL, LARGE = 10, 10_000
POLLS = 2_000
# The review's burst: this many places lapse at once, then one visitor asks.
BURST = 100_000


def run(bench: Bench, repeats: int, polls: int = POLLS, large_line: int = LARGE) -> dict[str, Any]:
    from django.test import override_settings

    from django_semaphore import get_semaphore
    from django_semaphore.core import scripts, visits

    rooms = {
        size: {"limit": 1, "lease": 600, "waiting_room": {"refresh": 60, "abandon": 600}} for size in ("small", "large")
    }
    with override_settings(SEMAPHORES=rooms):
        client = bench.client

        def fill(name: str, waiting: int) -> list[str]:
            sem = get_semaphore(name)
            visits.visit(sem, "inside")
            tokens = [f"v{i:06d}" for i in range(waiting)]
            for first in range(0, waiting, 1000):
                scripts.run_pipeline(
                    client, [sem.calls.room(f"visit {t} 600000 0") for t in tokens[first : first + 1000]]
                )
            return tokens

        def server_us(name: str, tokens: list[str]) -> float:
            """Median over ``repeats`` of the server's microseconds per poll, polls spread over the line's back half."""
            sem = get_semaphore(name)
            polled = [tokens[len(tokens) // 2], tokens[-1]]
            figures = []
            for _ in range(repeats):
                client.config_resetstat()
                for i in range(polls):
                    visits.visit(sem, polled[i % 2])
                stats = client.info("commandstats")
                calls = [stats[key] for key in ("cmdstat_fcall", "cmdstat_evalsha") if key in stats]
                total_calls = sum(int(c["calls"]) for c in calls)
                figures.append(sum(float(c["usec"]) for c in calls) / max(total_calls, 1))
            return statistics.median(figures)

        small = fill("small", SMALL)
        large = fill("large", large_line)
        before = server_us("small", small)
        at_large = server_us("large", large)
        after = server_us("small", small)
        base = statistics.median([before, after])
        position = visits.visit(get_semaphore("large"), large[-1])[0].position
    return {
        "room_poll_server_us_10": round(base, 2),
        "room_poll_server_us_10k": round(at_large, 2),
        "room_poll_10k_ratio": at_large / base,
        "room_poll_position_checked": position,
    }


class Pinger(threading.Thread):
    """Another client of the server, PINGing back to back: how long each one waited for its answer."""

    def __init__(self, url: str) -> None:
        super().__init__(daemon=True)
        self.client = redis.Redis.from_url(url)
        self.waits: list[float] = []
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            start = time.perf_counter()
            self.client.ping()
            self.waits.append(time.perf_counter() - start)

    def finish(self) -> list[float]:
        self.stop.set()
        self.join()
        self.client.close()
        return self.waits


def burst(bench: Bench, lapsed: int = BURST) -> dict[str, Any]:
    """``lapsed`` places lapse at once, then one visitor asks: the longest call, the longest PING wait."""
    from django.test import override_settings

    from django_semaphore import get_semaphore
    from django_semaphore.core import scripts, visits

    spec = {"limit": 1, "lease": 600, "waiting_room": {"refresh": 60, "abandon": 600}}
    rooms = {"burst": spec, "quiet": spec}
    client = bench.client
    with override_settings(SEMAPHORES=rooms):
        sem = get_semaphore("burst")
        visits.visit(sem, "inside")
        tokens = [f"b{i:06d}" for i in range(lapsed + 3)]
        for first in range(0, len(tokens), 1000):
            scripts.run_pipeline(client, [sem.calls.room(f"visit {t} 600000 0") for t in tokens[first : first + 1000]])
        kept = [tokens[10], tokens[lapsed // 2], tokens[-1]]
        aged = [t for t in tokens if t not in kept]
        for first in range(0, len(aged), 5000):
            client.zadd(sem.calls.keys.alive, dict.fromkeys(aged[first : first + 5000], 1), xx=True)
        # The machine's own noise first: as many polls of a visitor in line of another room, PINGed alike.
        quiet = get_semaphore("quiet")
        visits.visit(quiet, "inside")
        noise_calls, noise_waits, _ = _timed(bench, lambda: [visits.visit(quiet, "waiter") for _ in range(200)])
        cpu_before = _cpu(client)
        calls, waits, took = _timed(bench, lambda: visits.visit(sem, kept[1]))
        cpu = _cpu(client) - cpu_before
        positions = [visits.visit(sem, who)[0].position for who in kept]
    return {
        "room_burst_lapsed": lapsed,
        "room_burst_calls": len(calls),
        "room_burst_max_call_ms": max(calls) / 1000,
        "room_burst_median_call_ms": statistics.median(calls) / 1000,
        "room_burst_request_s": round(took, 3),
        # The server's CPU time per call (what preemption on a busy machine does not inflate), on average.
        "room_burst_cpu_ms_per_call": cpu * 1000 / len(calls),
        "room_burst_ping_max_ms": max(waits) * 1000,
        "room_burst_ping_p99_ms": percentile(waits, 0.99) * 1000,
        "room_burst_noise_max_call_ms": max(noise_calls) / 1000,
        "room_burst_noise_ping_max_ms": max(noise_waits) * 1000,
        "room_burst_positions": positions,
    }


def _timed(bench: Bench, action: Any) -> tuple[list[int], list[float], float]:
    """Run ``action`` while another client PINGs: each room call's server time (us), each PING's wait (s)."""
    client = bench.client
    client.config_set("slowlog-log-slower-than", 0)
    client.config_set("slowlog-max-len", 100_000)
    client.slowlog_reset()
    pinger = Pinger(bench.url)
    pinger.start()
    time.sleep(0.1)
    started = time.perf_counter()
    action()
    took = time.perf_counter() - started
    time.sleep(0.1)
    waits = pinger.finish()
    entries = client.slowlog_get(100_000)
    client.config_set("slowlog-log-slower-than", 10_000)
    scripts = ("FCALL", "EVALSHA", "EVAL")
    calls = [e["duration"] for e in entries if _name(e["command"]) in scripts]
    return calls, waits, took


def _name(command: Any) -> str:
    text = command.decode("utf-8", "replace") if isinstance(command, bytes) else str(command)
    return text.split(" ")[0].upper()


def _cpu(client: redis.Redis) -> float:
    """The server's CPU seconds so far (user and system)."""
    info = client.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])
