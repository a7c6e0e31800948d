"""Scale: acquire+release cost with 10, 1,000 and 10,000 holders, and with 1,000 waiters in line.

Costs are ratios to the 10-holder case, which is measured before and after
the large cases (its median is the base), so drift during the run shows up
in neither direction. Memory per holder is the growth of the holders ZSET, the
info HASH and the state HASH, which holds a permit of one's record
(``MEMORY USAGE``), from 10 to 10,000 holders, per holder.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

from .runtime import Bench

HOLDERS = (10, 1_000, 10_000)
WAITERS = 1_000


def timed(cycle: Callable[[], None], untimed: Callable[[], None] | None, seconds: float) -> float:
    """Seconds per ``cycle``, over about ``seconds`` of cycles (``untimed`` runs between, not counted)."""
    spent, count = 0.0, 0
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        start = time.perf_counter()
        cycle()
        spent += time.perf_counter() - start
        count += 1
        if untimed is not None:
            untimed()
    return spent / count


def run(bench: Bench, seconds: float, repeats: int) -> dict[str, Any]:
    from django.test import override_settings

    from django_semaphore import get_semaphore
    from django_semaphore.core import scripts
    from django_semaphore.core.calls import AcquireOptions

    semaphore = get_semaphore("scale")
    held: list[Any] = []

    def hold(count: int) -> None:
        while len(held) < count:
            held.append(semaphore.acquire(wait=0, auto_renew=False))
        while len(held) > count:
            held.pop().release()

    def cycle() -> None:
        semaphore.acquire(wait=0, auto_renew=False).release()

    def memory() -> int:
        keys = semaphore.keys
        return sum(bench.client.memory_usage(key, samples=0) or 0 for key in (keys.holders, keys.info, keys.state))

    def cost(count: int) -> list[float]:
        hold(count)
        cycle()
        return [timed(cycle, None, seconds) for _ in range(repeats)]

    costs = {count: cost(count) for count in HOLDERS}
    memory_large = memory()
    base = costs[HOLDERS[0]] + cost(HOLDERS[0])
    memory_small = memory()

    # The waiting line: 11 permits, all held, then 1,000 waiters who never
    # need to heartbeat (a long waiter TTL), then one permit freed. Each cycle
    # the head of the line acquires and releases (timed), then joins the tail
    # again (not timed), so the line stays 1,000 long.
    with override_settings(SEMAPHORE_WAITER_TTL=600):
        line = get_semaphore("scale")
        line.set_limit(HOLDERS[0] + 1)
        hold(HOLDERS[0] + 1)

        def join_line(identity: str) -> None:
            # The acquire's first call in waiting mode, without then blocking
            # on the wake list as acquire() would.
            scripts.run(
                bench.client,
                AcquireOptions(wait=60, identity=identity).request(line.config, line.calls).acquire_call(0),
            )

        for i in range(WAITERS):
            join_line(f"w{i}")
        held.pop().release()
        head = [0]

        def head_cycle() -> None:
            line.acquire(identity=f"w{head[0] % WAITERS}", wait=1, auto_renew=False).release()

        def rejoin() -> None:
            join_line(f"w{head[0] % WAITERS}")
            head[0] += 1

        waiting = [timed(head_cycle, rejoin, seconds) for _ in range(repeats)]
        line.set_limit(None)
    hold(0)
    base_cost = statistics.median(base)
    return {
        "scale_cycle_ms_10_holders": base_cost * 1000,
        "scale_1k_holders_ratio": statistics.median(costs[1_000]) / base_cost,
        "scale_10k_holders_ratio": statistics.median(costs[10_000]) / base_cost,
        "scale_1k_waiters_ratio": statistics.median(waiting) / base_cost,
        "bytes_per_holder": (memory_large - memory_small) / (HOLDERS[-1] - HOLDERS[0]),
    }
