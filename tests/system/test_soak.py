"""Soak: 24 processes on several semaphores for SOAK_SECONDS, with random kills.

Half the processes run with clocks skewed by an hour; random holders and
waiters are SIGKILLed and replaced throughout. Afterwards: 0 entries over any
limit, every semaphore drains to 0 holders and 0 waiters once the leases run
out, and no key is left behind except those kept by design (a whole
semaphore's ``state`` and ``history``, and keys with an expiry: a keyed
semaphore's idle partitions and its registry). ``make test`` runs a short
soak (15 s by default); CI runs a longer one once (see .ci/run).
"""

from __future__ import annotations

import multiprocessing
import os
import random
import time

import pytest
import redis

from ..support import soak
from ..support.processes import warm

pytestmark = pytest.mark.processes  # starts, kills or stalls real processes: CI runs it in one cell

PROCESSES = 24
SKEWS = [3600.0, -3600.0, 0.0, 0.0]  # half the processes skewed by an hour


def _start(prefix: str, index: int, remaining: float) -> multiprocessing.process.BaseProcess:
    process = warm.Process(
        target=soak.run,
        args=(prefix, remaining, SKEWS[index % len(SKEWS)], random.randrange(1 << 30)),
        daemon=True,
    )
    process.start()
    return process


def _drained(sems: list) -> bool:
    return all(s.used == 0 and s.holder_count == 0 and s.waiting == 0 for s in (sem.status() for sem in sems))


DURATION = float(os.environ.get("SOAK_SECONDS", "15"))


@pytest.mark.slow
@pytest.mark.timeout(DURATION + 180)
def test_soak(key_prefix: str, redis_client: redis.Redis) -> None:
    duration = DURATION
    if duration <= 0:
        pytest.skip("SOAK_SECONDS=0")
    memory_before = redis_client.info("memory")["used_memory"]
    started = time.monotonic()
    end = started + duration
    processes = [_start(key_prefix, index, duration) for index in range(PROCESSES)]
    finished: list[multiprocessing.process.BaseProcess] = []
    kills = 0
    try:
        while time.monotonic() < end - 1:
            time.sleep(random.uniform(0.5, 2.0))
            victim_index = random.randrange(PROCESSES)
            victim = processes[victim_index]
            victim.kill()  # SIGKILL, our own child, by pid
            victim.join(5)
            kills += 1
            finished.append(victim)
            processes[victim_index] = _start(key_prefix, victim_index, max(end - time.monotonic(), 0.5))
        for process in processes:
            process.join(max(end - time.monotonic(), 0) + 30)
    finally:
        for process in processes:
            if process.is_alive():
                process.kill()
                process.join(5)
    finished.extend(processes)
    crashed = [p.exitcode for p in finished if p.exitcode not in (0, -9)]

    sems = soak.semaphores()
    drain_started = time.monotonic()
    deadline = drain_started + soak.LEASE * 3 + 5
    while not _drained(sems):
        assert time.monotonic() < deadline, [sem.status().as_dict() for sem in sems]
        time.sleep(0.1)
    drain = time.monotonic() - drain_started

    stats = {k.decode(): int(v) for k, v in redis_client.hgetall(soak.stats_key(key_prefix)).items()}
    leaked = []
    for raw in redis_client.scan_iter(f"{key_prefix}*"):
        key = raw.decode()
        by_design = key.endswith((":state", ":history", ":tally")) and key.count(":") == key_prefix.count(":") + 1
        if not by_design and redis_client.pttl(key) < 0:
            leaked.append(key)
    for sem in sems:
        redis_client.delete(soak.referee_key(key_prefix, sem))
    redis_client.delete(soak.stats_key(key_prefix))
    memory_after = redis_client.info("memory")["used_memory"]
    print(
        f"\nsoak {duration:.0f} s, {PROCESSES} processes: entries={stats.get('entries', 0)} "
        f"rejections={stats.get('rejected', 0)} renewals={stats.get('renewals', 0)} lost={stats.get('lost', 0)} "
        f"unavailable={stats.get('unavailable', 0)} kills={kills} violations={stats.get('violations', 0)} "
        f"drained in {drain:.1f} s; memory {memory_before} -> {memory_after} bytes"
    )
    assert crashed == []
    assert stats.get("entries", 0) > 100
    assert stats.get("violations", 0) == 0
    assert leaked == []
