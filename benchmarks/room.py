"""A waiting room's poll at 10 and at 10,000 visitors in line: what it costs the server.

The figure is the server's own: ``INFO commandstats``, microseconds per call
of the room's operation (``FCALL``, or ``EVALSHA`` where the server has no
Functions), reset before each case. A poll is a visitor in line asking again
(the room full, nobody let in), at the back of the line and in its middle.
The 10-visitor case is measured before and after the large one (its median is
the base), so drift during the run shows in neither direction. The test
suite counts the commands one poll runs (tests/core/test_room_scale.py); this
is the time they take.
"""

from __future__ import annotations

import statistics
from typing import Any

from .runtime import Bench

SMALL, LARGE = 10, 10_000
POLLS = 2_000


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
