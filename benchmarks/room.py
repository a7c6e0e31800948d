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


# The launch replay (``launch``): a burst into a room idle for a while (after a warm-up whose visits give the
# room a visit length), and a burst into a room that was busy until some minutes before. Visitors poll the
# JSON every REFRESH seconds as the queue page does, stay inside a visit of VISIT_S (uniform) and end it.
LAUNCH_LIMIT = 20
REFRESH = 1.0
VISIT_S = (3.0, 9.0)
BURST_SIZE = 300
BURST_SPREAD_S = 3.0


class _Launch:
    """One room's replay: its visitors' events on one clock (the harness's), their answers on the server's."""

    def __init__(self, name: str, arrivals: list[float]) -> None:
        import random

        self.name = name
        self.arrivals = arrivals
        self.random = random.Random(name)
        self.answers: dict[int, list[tuple[int, float | None]]] = {}  # visitor -> (server ms, eta shown)
        self.got_in: dict[int, int] = {}  # visitor -> server ms of its first "inside" answer


def _replay(launches: list[_Launch]) -> None:
    """Run every launch's visitors together: polls every REFRESH until inside, a visit, its end."""
    import heapq

    from django_semaphore import get_semaphore
    from django_semaphore.core import visits

    start = time.monotonic()
    events: list[tuple[float, int, int, str, int]] = []
    order = 0
    for index, launch in enumerate(launches):
        for visitor, at in enumerate(launch.arrivals):
            events.append((at, order, index, "poll", visitor))
            order += 1
    heapq.heapify(events)
    sems = [get_semaphore(launch.name) for launch in launches]
    while events:
        at, _, index, kind, visitor = heapq.heappop(events)
        delay = at - (time.monotonic() - start)
        if delay > 0:
            time.sleep(delay)
        launch, sem, token = launches[index], sems[index], f"{launches[index].name}-{visitor}"
        if kind == "end":
            visits.end(sem, token)
            continue
        reply, _ = visits.visit(sem, token)
        if reply.inside:
            launch.got_in.setdefault(visitor, reply.now_ms)
            order += 1
            heapq.heappush(events, (at + launch.random.uniform(*VISIT_S), order, index, "end", visitor))
        else:
            launch.answers.setdefault(visitor, []).append(
                (reply.now_ms, reply.eta_seconds(reply.position - 1, REFRESH))
            )
            order += 1
            heapq.heappush(events, (at + REFRESH, order, index, "poll", visitor))


def _ratios(launch: _Launch, only_first: bool) -> tuple[list[float], int]:
    """ETA shown / real remaining wait for each answer (or each visitor's first); and how many said unknown."""
    ratios, unknown = [], 0
    for visitor, answers in launch.answers.items():
        got_in = launch.got_in.get(visitor)
        if got_in is None:
            continue
        for shown_at, eta in answers[:1] if only_first else answers:
            remaining = (got_in - shown_at) / 1000
            if eta is None:
                unknown += 1
            elif remaining > 0:
                ratios.append(eta / remaining)
    return ratios, unknown


def launch(
    bench: Bench, idle: float = 600.0, quiet: float = 240.0, burst: int = BURST_SIZE, busy: float = 60.0
) -> dict[str, Any]:
    """Replay two launches at once: the median ETA-shown / real-remaining ratios, over all answers and first ones.

    "idle": a warm-up of 2 x the limit (so visits end and the room knows a
    visit's length), ``idle`` seconds of nothing, then ``burst`` visitors
    in BURST_SPREAD_S. "busy": a line for ``busy`` seconds (six times the
    limit a minute), arrivals stop ``quiet`` seconds before the same burst.
    Targets: 0.67-1.5 over every answer, 0.5-2 for each visitor's first answer.
    """
    import random

    from django.test import override_settings

    spec = {"limit": LAUNCH_LIMIT, "lease": 600, "waiting_room": {"refresh": REFRESH, "abandon": 10 * REFRESH}}
    rng = random.Random(31)
    warm_up = 10.0
    burst_at = warm_up + idle
    busy_from = max(burst_at - quiet - busy, 0.0)
    burst_times = sorted(burst_at + rng.uniform(0, BURST_SPREAD_S) for _ in range(burst))
    idle_room = _Launch("launch-idle", sorted(rng.uniform(0, warm_up) for _ in range(2 * LAUNCH_LIMIT)) + burst_times)
    gap = 60.0 / (6 * LAUNCH_LIMIT)  # six times the limit a minute
    busy_arrivals = [busy_from + i * gap for i in range(round(busy / gap))]
    busy_room = _Launch("launch-busy", busy_arrivals + burst_times)
    with override_settings(SEMAPHORES={"launch-idle": spec, "launch-busy": spec}):
        _replay([idle_room, busy_room])
    figures: dict[str, Any] = {"room_launch_idle_s": idle, "room_launch_quiet_s": quiet, "room_launch_burst": burst}
    every: list[float] = []
    first: list[float] = []
    for launch_room, label in ((idle_room, "idle"), (busy_room, "busy")):
        # Only the burst's visitors: the warm-up and the busy minute are the history, not the launch.
        history = len(launch_room.arrivals) - burst
        launch_room.answers = {v: a for v, a in launch_room.answers.items() if v >= history}
        all_ratios, all_unknown = _ratios(launch_room, only_first=False)
        first_ratios, first_unknown = _ratios(launch_room, only_first=True)
        every += all_ratios
        first += first_ratios
        figures[f"room_launch_{label}_eta_ratio"] = statistics.median(all_ratios) if all_ratios else None
        figures[f"room_launch_{label}_first_eta_ratio"] = statistics.median(first_ratios) if first_ratios else None
        figures[f"room_launch_{label}_answers"] = len(all_ratios) + all_unknown
        figures[f"room_launch_{label}_unknown"] = all_unknown
        figures[f"room_launch_{label}_first_unknown"] = first_unknown
        figures[f"room_launch_{label}_let_in"] = sum(1 for v in launch_room.got_in if v >= history)
    figures["room_launch_eta_ratio"] = statistics.median(every) if every else None
    figures["room_launch_first_eta_ratio"] = statistics.median(first) if first else None
    return figures


def proof_cost(places: int = 500, bits: int | None = None) -> dict[str, Any]:
    """What a script pays in CPU for ``places`` places behind a proof of work: the guide's Python solver, timed.

    Each place costs one solved challenge (web/room_proof.py binds it to its ticket); the browser's median
    time to join at the same difficulty is the browser test's figure (docs/performance.md).
    """
    import hashlib
    import itertools

    from django_semaphore.core.room_options import DEFAULT_WORK_BITS
    from django_semaphore.web import room_proof

    bits = bits or DEFAULT_WORK_BITS
    tries = []
    started = time.process_time()
    for place in range(places):
        challenge = room_proof.challenge("bench", f"{place:032x}", bits)
        for counter in itertools.count():
            digest = hashlib.sha256(f"{challenge}:{counter}".encode()).digest()
            if int.from_bytes(digest, "big") >> (256 - bits) == 0:
                tries.append(counter + 1)
                break
    cpu = time.process_time() - started
    return {
        "room_proof_bits": bits,
        "room_proof_places": places,
        "room_proof_script_cpu_s": round(cpu, 1),
        "room_proof_script_ms_per_place": round(cpu * 1000 / places, 1),
        "room_proof_median_tries": statistics.median(tries),
    }
