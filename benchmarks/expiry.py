"""Hand-off on expiry: a holder goes silent, its lease ends, and the waiter in line takes the permit.

Nobody releases: the holder (a lease of 0.3 s, not renewed) stands for a
process that died or stalled. The waiter's timer is set for the lease's end
from what its own calls were told, and Redis's timer (``hz``, every 100 ms by
default) never makes it late: the waiter bounds that wait on its own clock.
Half the samples have the holder handed its permit from the line (the waiter
queued behind it learns its lease from a note), half have it acquire at once.

Each figure is read on the server's clock: the time the script that granted
the waiter ran (recorded with the holder) minus the lease deadline, so no
process's wake-up is mixed into the number but the waiter's own.
"""

from __future__ import annotations

import statistics
import threading
import time
from typing import Any

from .runtime import Bench, percentile

HOLDER_LEASE = 0.3


def _lateness_ms(bench: Bench, from_line: bool) -> int:
    from django_semaphore import get_semaphore

    semaphore = get_semaphore("expiry")
    first = semaphore.acquire(wait=10, auto_renew=False)
    holders: list[Any] = []
    waiters: list[Any] = []
    holder = threading.Thread(
        target=lambda: holders.append(semaphore.acquire(wait=10, lease=HOLDER_LEASE, auto_renew=False))
    )
    waiter = threading.Thread(target=lambda: waiters.append(semaphore.acquire(wait=10)))
    if from_line:
        holder.start()
        while semaphore.status(max_holders=0).waiting < 1:
            time.sleep(0.001)
        waiter.start()
        while semaphore.status(max_holders=0).waiting < 2:
            time.sleep(0.001)
        first.release()
        holder.join()
    else:
        first.release()
        holder.run()
        waiter.start()
    waiter.join()
    granted = waiters[0]
    keys = semaphore.calls.keys
    # The grant's record: in the state hash for a permit of one (core/lua/common.lua's `folded`), else in info.
    record = bench.client.hget(keys.state, "#" + granted.token) or bench.client.hget(keys.info, granted.token)
    granted.release()
    return int(record.split(b"|")[1]) - holders[0].lease_deadline_ms


def run(bench: Bench, samples: int) -> dict[str, Any]:
    from_line = [float(_lateness_ms(bench, True)) for _ in range(samples // 2)]
    direct = [float(_lateness_ms(bench, False)) for _ in range(samples - samples // 2)]
    both = from_line + direct
    return {
        "expiry_samples": len(both),
        "expiry_handoff_p50_ms": statistics.median(both),
        "expiry_handoff_p99_ms": percentile(both, 0.99),
        "expiry_handoff_max_ms": max(both),
        "expiry_handoff_from_line_p50_ms": statistics.median(from_line),
        "expiry_handoff_direct_p50_ms": statistics.median(direct),
    }
