"""A rolling deploy recorded: processes of an older version hand over to this tree's, on the same semaphores.

The run starts with ``OLD`` worker processes of the older version (its
package installed apart: tests/support/old_version.py). One at a time, a
process of this tree's version starts and, a second later, an old one ends
its turns (its permits given back, as a deploy's graceful stop does), until
only new processes are left; they go on until the run's end. Every entry,
exit and release is recorded on the probe, as in every history run
(recorder.py), and checked the same way (checker.py): the limit, fences,
leases lost without cause, FIFO. Meanwhile the older layout is watched: the
info hash of the semaphore whose permits are all of one (the mutex), which
only an older version's grants still write
(core/lua/common.lua's ``folded``), must be gone once the last old process
has ended and the permits it handed on have ended too.
"""

from __future__ import annotations

import multiprocessing
import random
import time
import uuid
from dataclasses import dataclass, replace
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import Any

import redis

from django_semaphore.testing import RedisServer, find_binary

from .. import modes
from . import worker
from .checker import Verdict, check
from .nemesis import LineWatcher
from .plan import FAIR, LEASE, LIMITS, TIMEOUTS, WAITER_TTL, WorkerPlan
from .recorder import Recorder, most_inside, read_history

# Fresh interpreters: each imports the version of the package its plan names (the suite's warm forkserver,
# tests/support/processes.py, has imported this one already).
spawn = multiprocessing.get_context("spawn")
OLD = 3
# Seconds a new process starts before the old one it replaces ends its turns.
OVERLAP = 1.0
# The semaphore whose every permit is of one (the others take weights of 2 too): no record of this version's is
# kept in its info hash.
SINGLE = ("mutex",)
# How long a permit an old process handed on may still be held after it ended: the longest hold (worker.pick).
HELD_ON = 1.2 * LEASE + 1.0
# Seconds this version's processes go on past the run's length (see upgrade_run).
LATE = 2 * LEASE


@dataclass
class Upgrade:
    """What the run did and what its history showed."""

    verdict: Verdict
    crashed: list[int | None]
    most_inside: dict[str, int]
    # Info keys of SINGLE semaphores found after the last old process and its permits had ended: (seconds, key).
    old_keys_after: list[tuple[float, str]]
    # Info keys seen while old processes ran (the older layout was in use, or the check sees nothing).
    old_keys_during: int
    looked_after: int
    seconds: float

    def summary(self) -> str:
        return (
            f"{self.seconds:.0f} s; most inside {self.most_inside}; "
            f"old-layout keys seen during {self.old_keys_during}, "
            f"after {self.old_keys_after} in {self.looked_after} looks"
            f"\n{self.verdict.report()}"
        )


def upgrade_run(way: modes.Way, settings: Any, prefix: str, seconds: float, old_package: Path) -> Upgrade:
    """A rolling deploy from ``old_package``'s version to this tree's over ``seconds`` (18 at least: each old
    process works three seconds or more, most of a lease, before the next one replaces it)."""
    binary = find_binary()
    seconds = max(seconds, 18.0)
    step = seconds / (2 * OLD)  # the last old process ends half-way through: the rest is this version's alone
    with RedisServer(binary) as probe, RedisServer(binary, extra_args=modes.server_args(binary)) as server:
        url = f"{way.url(server.url)}?{TIMEOUTS}"
        settings.SEMAPHORE_CONNECTION = url
        run = uuid.uuid4().hex[:12]
        recorder = Recorder(probe.url, run, process="nemesis")
        base = WorkerPlan(probe.url, run, url, prefix)
        rng = random.Random()
        watcher = LineWatcher(server.url, prefix, recorder)
        admin = redis.Redis.from_url(server.url)
        info = {name: f"{prefix}{{{name}}}:info" for name in SINGLE}
        running: list[BaseProcess] = []
        started = time.monotonic()

        def spawned(package: str) -> Any:
            """A process set up (its Django, its package) and waiting for its go: its end time, shared."""
            plan = replace(base, seed=rng.randrange(1 << 30), package=package)
            ready, go = spawn.Event(), spawn.Value("d", 0.0)
            process = spawn.Process(target=worker.run, args=(plan, ready, go), daemon=True)
            process.start()
            running.append(process)
            return process, ready, go

        # Every process set up first (a spawn takes seconds on a loaded machine), then the deploy's clock runs.
        old = [spawned(str(old_package)) for _ in range(OLD)]
        new = [spawned("") for _ in range(OLD)]
        for _, ready, _ in old + new:
            assert ready.wait(120), "a worker process did not start"
        watcher.start()
        try:
            started = time.monotonic()
            # This version's processes run LATE seconds past the run's length: an old process may finish its last
            # turn that much late on a loaded machine, and the older layout is looked for while they still work.
            end = started + seconds + LATE
            for index, (_, _, go) in enumerate(old):
                go.value = started + step * (index + 1)
            # This version's processes, each starting a little before the old one it replaces ends its turns.
            arrivals = [started + step * (index + 1) - OVERLAP for index in range(OLD)]
            during, looks, after = 0, 0, []
            settled: float | None = None
            # And on past the end until the layout was looked for once after the old processes (beside `make
            # bench` the last of them ended too late for a look before the end): at most a minute more.
            while time.monotonic() < end - 0.5 or (looks == 0 and time.monotonic() < end + 60):
                if arrivals and time.monotonic() >= arrivals[0]:
                    arrivals.pop(0)
                    new[OLD - 1 - len(arrivals)][2].value = end
                present = [key for key in info.values() if admin.exists(key)]
                if settled is None:
                    during += bool(present)
                    if all(process.exitcode is not None for process, _, _ in old):
                        settled = time.monotonic() + HELD_ON
                elif time.monotonic() >= settled:
                    looks += 1
                    after.extend((round(time.monotonic() - started, 1), key) for key in present)
                time.sleep(0.1)
            for process in running:
                process.join(2 * LEASE + 10)
        finally:
            watcher.stop()
            for process in running:
                if process.is_alive():
                    process.kill()  # our own child, by pid
                    process.join(10)
            admin.close()
        with redis.Redis.from_url(probe.url) as client:
            events = read_history(client, run)
            inside = most_inside(client, run)
        recorder.close()
    crashed = [p.exitcode for p in running if p.exitcode not in (0, None)]
    verdict = check(events, LIMITS, FAIR, LEASE, WAITER_TTL)
    return Upgrade(verdict, crashed, inside, after, during, looks, time.monotonic() - started)
